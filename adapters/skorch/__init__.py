"""The adapter for skorch (``trainspec check skorch``).

A ``NeuralNetClassifier`` with skorch's own callbacks: ``EpochScoring`` for the score,
``Checkpoint`` for the best, last and periodic checkpoints, ``LoadInitState`` to resume,
``EarlyStopping`` and ``LRScheduler``: configured as skorch's docs tell a user to, never bent to
pass a check. How and why: ``docs/frameworks/skorch.md``. skorch is imported inside the
functions only: importing this module never imports it.
"""

from __future__ import annotations

from pathlib import Path

from trainspec.adapters.skorch import causes as skorch_causes
from trainspec.adapters.skorch.files import describe_skorch_files
from trainspec.adapters.skorch.run import SkorchRun
from trainspec.conformance.run.adapter import Capability, RunContext, chosen_remedies
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.spec.causes import Remedy, RootCause

__all__ = ["REMEDIES", "SkorchAdapter"]

# documented non-default skorch switches that should make failing clauses pass: none found
# (docs/frameworks/skorch.md says why for each failing clause); SkorchAdapter(*names) refuses
# every name
REMEDIES: tuple[Remedy, ...] = ()

# Where in skorch 1.4 the behaviour behind each failing clause comes from (read in the installed
# sources; paths relative to site-packages)
_BEST = ("skorch/callbacks/scoring.py, ScoringBase._is_best_score: current_score > best_score_ "
         "(< when lower_is_better), with no finiteness check: +inf (maximizing) or -inf "
         "(minimizing) is recorded as score_best=True, becomes best_score_, and the best "
         "Checkpoint (monitor='score_best') saves it")
_NO_BEST = ("skorch keeps no best weights in memory: EpochScoring records only the score_best "
            "flag in the history, and the weights are kept only in Checkpoint's files "
            "(skorch/callbacks/training.py, Checkpoint.save_model), so with ckpt.enable=false "
            "there is no best model")
_STOP = ("skorch/callbacks/training.py, EarlyStopping._is_score_improved: score > "
         "dynamic_threshold_ (< when lower_is_better) holds for +inf (maximizing) or -inf "
         "(minimizing): an infinite score resets misses_ and becomes the threshold")
_NOT_SAVED = ("skorch/callbacks/training.py, Checkpoint.save_model: writes the module "
              "(f_params), optimizer, criterion and history only")
_SCHEDULER = ("skorch/callbacks/lr_scheduler.py, LRScheduler.on_train_begin and "
              "_get_scheduler: the scheduler is built anew at every fit with last_epoch = "
              "len(net.history) - 1, an epoch count even with step_every='batch'; "
              "Checkpoint.save_model saves no scheduler state")
_SOURCES = {
    "BEST-1": f"{_BEST}; {_NO_BEST}",
    "BEST-2": f"skorch/callbacks/scoring.py, EpochScoring: {_NO_BEST}",
    "RES-1": "skorch/callbacks/training.py, Checkpoint: f_history is never formatted with the "
             "epoch, so every periodic checkpoint shares one history.json, the newest; "
             "LoadInitState restores that history with an older params_<e>.pt, and "
             "NeuralNet.fit_loop continues after the newest epoch, not after e",
    "NAN-1": _BEST,
    "NAN-2": _BEST,
    "NAN-3": _STOP,
    "PAT-5": f"{_BEST}; {_STOP}",
    "RES-2": _SCHEDULER,
    "RES-3": "skorch/callbacks/training.py, EarlyStopping.on_train_begin: resets misses_ and "
             "dynamic_threshold_ at every fit, and Checkpoint.save_model saves no callback "
             "state, so patience starts afresh on a resume",
    "RES-4": f"{_SCHEDULER}; {_NOT_SAVED} (no RNG state), and "
             "LoadInitState.on_train_begin restores no generator; skorch/net.py, "
             "NeuralNet.fit_loop: a fit runs max_epochs more epochs whatever the history "
             "LoadInitState loaded holds",
    "RES-5": "skorch/net.py, NeuralNet.load_params: hands the saved optimizer state to "
             "optimizer_.load_state_dict as it is, with no check that it is the optimizer the "
             "checkpoint was written with (torch then fails in SGD.step, KeyError: 'momentum'), "
             "naming neither the item nor a finetune as the way out; an extra LRScheduler goes "
             "unnoticed (Checkpoint saves no scheduler)",
    "CKPT-1": f"{_NOT_SAVED}: no LR scheduler state, no run id, no config",
    "CKPT-2": "skorch/net.py, NeuralNet.save_params: torch.save(state_dict, f_name) straight "
              "to the checkpoint's own path (called by Checkpoint._save_params), overwriting "
              "the previous file in place: a kill during the write leaves it truncated",
    "CKPT-4": "skorch/callbacks/training.py, LoadInitState.on_train_begin: calls "
              "net.load_params(checkpoint=...) under suppress(FileNotFoundError), so a missing "
              "checkpoint starts training afresh without an error (by design: the first run "
              "of a script has no files yet)",
    "CKPT-5": "skorch/net.py, NeuralNet.partial_fit: catches KeyboardInterrupt (SIGINT) only; "
              "skorch installs no SIGTERM handler, so SIGTERM's default action ends the process "
              "mid-epoch, and Checkpoint writes only in on_epoch_end",
}


class SkorchAdapter:
    """Runs scenarios through a skorch ``NeuralNetClassifier`` on one CPU process.

    ``remedies`` names documented non-default skorch switches to turn on (``REMEDIES``): skorch
    has none known to fix a failing clause, so every name is refused.
    """

    name = "skorch"

    def __init__(self, *remedies: str) -> None:
        self.applied = chosen_remedies("skorch", remedies, REMEDIES)

    def capabilities(self) -> frozenset[Capability]:
        # not declared (docs/frameworks/skorch.md says more): val_first (skorch validates
        # inside each epoch of fit_loop only), eval_only (needs val_first; a fit of 0 epochs
        # validates nothing), val_every_n (every epoch of fit_loop validates when a
        # train_split is set; no option validates less often), start_patience (EarlyStopping
        # has no such option), debug (skorch has no debug mode), grad_accum (skorch has no
        # option for it, says its FAQ; the accelerate route is AccelerateMixin, below),
        # multi_rank (skorch's only multi-process route, AccelerateMixin, fails on several
        # CPU processes: it prepares the parameterless criterion, which accelerate's
        # MULTI_CPU prepare_model wraps in DistributedDataParallel, which refuses it)
        return frozenset({"checkpoint", "resume", "finetune", "early_stopping", "test_pass"})

    def remedies(self) -> tuple[Remedy, ...]:
        return REMEDIES

    def root_causes(self) -> tuple[RootCause, ...]:
        return skorch_causes.ROOT_CAUSES

    def environment(self) -> dict[str, str | None]:
        import skorch  # type: ignore[import-untyped]

        return {"framework": f"skorch {skorch.__version__}"}

    def framework_sources(self) -> dict[str, str]:
        """Where in skorch 1.4 the behaviour behind each failing clause comes from (read in the
        installed sources; paths relative to site-packages)."""
        return dict(_SOURCES)

    def describe_checkpoints(self, root: Path) -> list[FileRecord]:
        """Every file under ``root``, and each checkpoint as one record: the folders ``last``
        and ``best`` (a Checkpoint's params.pt, optimizer.pt, criterion.pt and history.json)
        and every periodic ``epochs/params_<e>.pt``. ``epoch`` (zero-based) and ``step`` (the
        training batches) come from the history saved with it."""
        return describe_skorch_files(root)

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        SkorchRun(scenario, ctx).run()
