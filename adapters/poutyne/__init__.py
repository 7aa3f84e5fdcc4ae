"""The adapter for Poutyne (``trainspec check poutyne``).

A ``poutyne.Model`` in a ``ModelBundle`` (Poutyne's tool for automatic checkpointing, logging,
resuming and testing), with ``EarlyStopping`` and a periodic ``ModelCheckpoint`` given to
``train``: configured as Poutyne's docs tell a user to, never bent to pass a check. How and why:
``docs/frameworks/poutyne.md``. Poutyne is imported inside the functions only: importing this
module never imports it.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from trainspec.adapters.poutyne import causes as poutyne_causes
from trainspec.adapters.poutyne.files import describe_poutyne_files
from trainspec.adapters.poutyne.run import PoutyneRun, poutyne_module
from trainspec.conformance.run.adapter import Capability, RunContext, chosen_remedies
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.spec.causes import Remedy, RootCause

__all__ = ["REMEDIES", "PoutyneAdapter"]

# documented non-default Poutyne switches that should make failing clauses pass: none found
# (docs/frameworks/poutyne.md says why for each failing clause); PoutyneAdapter(*names) refuses
# every name
REMEDIES: tuple[Remedy, ...] = ()

# Where in Poutyne 1.19 the behaviour behind each failing clause comes from (read in the
# installed sources; paths relative to site-packages)
_FW = "poutyne/framework"
_BUNDLE = f"{_FW}/model_bundle.py, ModelBundle"
_BEST_OP = (f"{_FW}/callbacks/periodic.py, PeriodicSaveCallback.on_epoch_end (ModelBundle's best "
            "ModelCheckpoint) and callbacks/best_model_restore.py, BestModelRestore.on_epoch_end "
            "(without logging): an improvement is monitor_op(score, current_best), x > y (x < y "
            "minimizing) from -inf (+inf), with no finiteness check: +inf (-inf) beats any "
            "best, NaN never improves")
_STOP_OP = (f"{_FW}/callbacks/earlystopping.py, EarlyStopping.on_epoch_end: "
            "np.greater(current - min_delta, best) (np.less minimizing) resets wait for +inf "
            "(-inf), an improvement; NaN adds one to wait")
_NO_STEP = ("Model keeps no step count and ModelBundle saves none: its resume state is "
            "last.epoch (the epoch number), checkpoint.ckpt, checkpoint.optim, "
            "checkpoint.randomstate and lr_sched_<i>.lrsched")
_LR_BEHIND = (f"{_BUNDLE}._train: OptimizerCheckpoint (checkpoint.optim) runs before the "
              "LRSchedulerCheckpoint callbacks (_init_lr_scheduler_callbacks, appended last), "
              "whose on_epoch_end steps the scheduler: the saved optimizer holds the epoch's "
              "learning rate from before that step, and a resume (_load_epoch_state, then "
              "_PyTorchLRSchedulerWrapper.on_train_begin: torch's LRScheduler.load_state_dict "
              "restores the scheduler's counters, not the optimizer's lr) trains the next epoch "
              "one schedule step behind")
_FULL_UNPICKLE = (f"{_FW}/model.py, Model.load_weights: torch.load(f, pickle_module=pickle, "
                  "map_location='cpu'); with a pickle_module given torch defaults to "
                  "weights_only=False, a full unpickling (ModelBundle.load_checkpoint, "
                  "_load_epoch_state and load_optimizer_state load the same way)")
_SOURCES: dict[str, str] = {
    "BEST-1": _BEST_OP,
    "BEST-3": f"{_FW}/callbacks/checkpoint.py, ModelCheckpoint.save_file: Model.save_weights "
              "saves the network's bare state_dict; the epoch is only in the file name "
              "(ModelBundle.BEST_CHECKPOINT_FILENAME, checkpoint_epoch_{epoch}.ckpt), no step "
              "is recorded",
    "BEST-4": f"{_BUNDLE}._test: load_checkpoint('best') reads the best epoch from log.tsv "
              "(get_best_epoch_stats: history[monitor_metric].idxmax()), which raises "
              "ValueError when every logged score is NaN, so the test pass never runs",
    "NAN-1": _BEST_OP,
    "NAN-2": _BEST_OP,
    "NAN-3": _STOP_OP,
    "PAT-5": f"{_STOP_OP}; {_BEST_OP}",
    "RES-1": f"{_BUNDLE}._train and _load_epoch_state: {_NO_STEP}",
    "RES-2": _LR_BEHIND,
    "RES-3": f"{_FW}/callbacks/earlystopping.py, EarlyStopping.on_train_begin resets wait and "
             f"best (\"Allow instances to be re-used\"), and {_BUNDLE}._train checkpoints no "
             "callback state but the LR schedulers' (best tracking alone is restored, from "
             "log.tsv)",
    "RES-4": f"{_LR_BEHIND} (without an LR schedule the resume is bitwise exact: "
             "RandomStatesCheckpoint restores python's, numpy's and torch's generators)",
    "RES-5": f"{_BUNDLE}._load_epoch_state: Model.load_optimizer_state hands the saved state "
             "to the run's optimizer whatever its class (torch's Optimizer.load_state_dict "
             "checks the group and parameter counts only), and a missing lr_sched_<i>.lrsched "
             "only warns (_warn_missing_file)",
    "CKPT-1": f"{_BUNDLE}._train: with logging, checkpoint.ckpt, checkpoint.optim, "
              "checkpoint.randomstate and last.epoch are written after every epoch, with no "
              f"switch to leave them out; {_NO_STEP}, and no run id or config; best and "
              "periodic ModelCheckpoint files are bare state_dicts; "
              "callbacks/periodic.py, PeriodicSaveCallback.on_epoch_end saves when "
              "epoch_number % period == 0, with one-based epochs (after epochs n-1, 2n-1, ...)",
    "CKPT-3": _FULL_UNPICKLE,
    "CKPT-5": f"{_FW}/model.py, Model.fit_generator (and {_BUNDLE}._train) installs no "
              "signal handler: SIGTERM's default action ends the process mid-epoch, and "
              "ModelBundle writes its checkpoints only in the callbacks' on_epoch_end",
    "CKPT-4": f"{_BUNDLE}._load_epoch_state: resumes only when last.epoch exists in the "
              "bundle's directory, and otherwise starts at epoch 1 without an error (a missing "
              "checkpoint.ckpt, .optim or .randomstate only warns); a truncated file raises "
              "torch's own error from Model.load_weights, which names no file",
}


class PoutyneAdapter:
    """Runs scenarios through a Poutyne ``ModelBundle`` on one CPU process."""

    name = "poutyne"

    def __init__(self, *remedies: str) -> None:
        self.applied = chosen_remedies("poutyne", remedies, REMEDIES)

    def capabilities(self) -> frozenset[Capability]:
        # not declared: multi_rank (Poutyne has no distributed training: Model runs one
        # process, several GPUs only through torch.nn.parallel.data_parallel), val_first
        # (fit validates after each epoch only), val_every_n (fit_generator validates after
        # every epoch: it takes no validation interval), start_patience (EarlyStopping takes
        # none), eval_only (needs val_first), debug (Poutyne has no debug mode:
        # steps_per_epoch shortens the training epoch only)
        return frozenset({"checkpoint", "resume", "finetune", "early_stopping", "test_pass",
                          "grad_accum"})

    def remedies(self) -> tuple[Remedy, ...]:
        return REMEDIES

    def root_causes(self) -> tuple[RootCause, ...]:
        return poutyne_causes.ROOT_CAUSES

    def environment(self) -> dict[str, str | None]:
        # pandas reads ModelBundle's log.tsv, where the best epoch is looked up
        return {"framework": f"poutyne {poutyne_module().__version__}",
                "pandas": importlib.metadata.version("pandas")}

    def framework_sources(self) -> dict[str, str]:
        """Where in Poutyne 1.19 the behaviour behind each failing clause comes from (read in
        the installed sources; paths relative to site-packages)."""
        return dict(_SOURCES)

    def describe_checkpoints(self, root: Path) -> list[FileRecord]:
        """Every file under ``root``: ModelBundle's directory as the "last" checkpoint (the
        files a resume reads; its epoch from ``last.epoch``, no step: Poutyne records none),
        ``checkpoint_epoch_<e>.ckpt`` as "best" and the periodic ``epoch_<e>.ckpt`` as "epoch"
        (bare state_dicts; their epoch from the one-based ``<e>`` of the name)."""
        return describe_poutyne_files(root)

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        PoutyneRun(scenario, ctx).run()
