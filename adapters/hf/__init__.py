"""The adapter for the Hugging Face transformers ``Trainer`` (``trainspec check hf``).

The Trainer trains the suite's task configured as its documentation tells a user to for the
scenario's keys (:func:`training_arguments`, ``EarlyStoppingCallback``, the task's optimizer
and schedule), on the CPU, on one rank or several; a callback reports its hooks as records.
Which key maps to what, and why: ``docs/frameworks/hf.md``. transformers is imported inside
functions only: importing this module never imports it.
"""

from __future__ import annotations

from pathlib import Path

from trainspec.adapters.hf import causes as hf_causes
from trainspec.adapters.hf import files as hf_files
from trainspec.adapters.hf.run import Run, offline, training_arguments
from trainspec.conformance.run.adapter import Capability, RunContext, chosen_remedies
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.spec.causes import Remedy, RootCause

__all__ = ["REMEDIES", "HFTrainerAdapter", "training_arguments"]


# documented TrainingArguments switches, off by default, that should fix failing clauses;
# `trainspec check hf --remedies NAME` runs with one on (the matrix verifies each)
REMEDIES = (
    Remedy(name="restore_callback_states",
           setting="TrainingArguments(restore_callback_states_from_checkpoint=True)",
           clauses=("RES-3",),
           docs="transformers/training_args.py, TrainingArguments."
                "restore_callback_states_from_checkpoint: \"Whether to restore the callback "
                "states from the checkpoint\" (EarlyStoppingCallback's patience counter "
                "among them)"),
    Remedy(name="jit_checkpoint", setting="TrainingArguments(enable_jit_checkpoint=True)",
           clauses=("CKPT-5",),
           docs="transformers/training_args.py, TrainingArguments.enable_jit_checkpoint: "
                "\"Enable JIT checkpointing on SIGTERM signal for graceful termination on "
                "preemptible workloads\""),
)


class HFTrainerAdapter:
    """Runs scenarios through ``transformers.Trainer`` on the CPU, on one rank or several, at
    the Trainer's defaults but for the remedies named (:data:`REMEDIES`)."""

    name = "hf"

    def __init__(self, *remedies: str) -> None:
        self.applied = chosen_remedies("hf", remedies, REMEDIES)

    def capabilities(self) -> frozenset[Capability]:
        # not declared: val_every_n, start_patience, debug (see docs/frameworks/hf.md)
        return frozenset({"checkpoint", "resume", "finetune", "early_stopping", "val_first",
                          "test_pass", "grad_accum", "eval_only", "multi_rank"})

    def remedies(self) -> tuple[Remedy, ...]:
        return REMEDIES

    def root_causes(self) -> tuple[RootCause, ...]:
        return hf_causes.ROOT_CAUSES

    def framework_sources(self) -> dict[str, str]:
        """Where in transformers 5.24 the behaviour behind each failing clause comes from (read
        in the installed sources; paths relative to site-packages)."""
        return {**_decision_sources(), **_run_sources()}

    def environment(self) -> dict[str, str | None]:
        from importlib.metadata import PackageNotFoundError, version

        offline()
        import transformers
        from transformers import Trainer  # noqa: F401  (paid once here, in the worker: every
        # run is a fork of it)

        try:
            accelerate: str | None = version("accelerate")
        except PackageNotFoundError:
            accelerate = None
        return {"framework": f"transformers {transformers.__version__}",
                "accelerate": accelerate}

    def describe_checkpoints(self, root: Path) -> list[FileRecord]:
        """Every file under ``root`` (role None), then every ``checkpoint-<step>/`` directory
        as one record with its role: "last" (the highest step), "best" (the state's
        ``best_model_checkpoint``; a directory both newest and best is listed under each role)
        or "epoch" (any other). Its keys are the files it holds; its ``error`` names what a
        resume needs and cannot read (a missing trainer_state.json: a checkpoint cut short)."""
        return hf_files.describe(root)

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        Run(scenario, ctx, self.applied).run()


def _decision_sources() -> dict[str, str]:
    """Sources of the best-model, patience, loop and NaN findings."""
    best = ("transformers/trainer.py, Trainer._determine_best_metric: the incumbent starts "
            "at -inf (greater_is_better) or +inf and a score replaces it when np.greater/"
            "np.less says so, so +inf (maximizing) or -inf (minimizing) is a new best; NaN "
            "compares False and never is")
    first = ("transformers/trainer.py, Trainer._inner_training_loop: eval_on_start runs "
             "self._evaluate() without _determine_best_metric, so the val.first score is "
             "never a best candidate; transformers/trainer_callback.py, "
             "EarlyStoppingCallback.check_metric_value resets its counter while "
             "state.best_metric is None: the first validation after training starts never "
             "counts against patience, whatever its score, and val.first's neither")
    no_copy = ("with save_strategy='no' (ckpt.enable=false) the Trainer keeps no best "
               "weights: best_model_checkpoint, a saved directory, is its only copy "
               "(Trainer._save_checkpoint, Trainer._load_best_model)")
    return {
        "BEST-1": f"{first}; {no_copy}",
        "BEST-2": f"transformers/trainer.py, Trainer._save_checkpoint: {no_copy}",
        "PAT-5": f"{first}; {no_copy}",
        "LOOP-2": "transformers/trainer.py, Trainer._inner_training_loop: "
                  "if args.eval_on_start: self._evaluate(...) runs at the start of every "
                  "train() call, a resumed one (epochs_trained > 0) included",
        "PAT-1": first,
        "NAN-1": best,
        "NAN-2": best,
        "NAN-3": f"{best}; transformers/trainer_callback.py, EarlyStoppingCallback."
                 "check_metric_value takes the same np.greater/np.less verdict, so that +inf "
                 "refills patience",
    }


def _run_sources() -> dict[str, str]:
    """Sources of the resume, checkpoint and several-ranks findings."""
    rank_local = ("transformers/trainer.py, Trainer._determine_best_metric and "
                  "transformers/trainer_callback.py, EarlyStoppingCallback.on_evaluate judge "
                  "the metrics compute_metrics returned on each rank, with no broadcast from "
                  "rank 0 nor reduction of the stop decision: a rank-local score gives each "
                  "rank its own best and stop, and a rank that stops leaves the others in "
                  "DDP's all-reduce (Trainer._finalize_training's store_flos all_gather "
                  "against the next epoch's backward), bounded only by the process group's "
                  "timeout (see DIST-5)")
    return {
        "RES-5": "transformers/trainer.py, Trainer._load_optimizer_and_scheduler: "
                 "optimizer.load_state_dict and lr_scheduler.load_state_dict on whatever the "
                 "Trainer holds, with no check that they are the ones saved; torch accepts an "
                 "Adam state in an SGD and raises its own message otherwise",
        "CKPT-1": "transformers/trainer.py, Trainer._save_checkpoint: a checkpoint is a "
                  "directory checkpoint-<step>/ (no run id; the config only in "
                  "training_args.bin, a pickled TrainingArguments that no weights-only load "
                  "reads; rng_state.pth loads weights-only only with numpy's array types "
                  "allowlisted); transformers/trainer_utils.py, rotate_checkpoints keeps the "
                  "newest save_total_limit checkpoints and the best, with no interval",
        "CKPT-2": "transformers/trainer.py, Trainer._save_checkpoint writes straight into "
                  "checkpoint-<step>/ (model, training_args.bin, optimizer.pt, scheduler.pt, "
                  "rng_state.pth, trainer_state.json last), with no temporary directory "
                  "renamed into place; transformers/trainer_utils.py, get_last_checkpoint "
                  "(resume_from_checkpoint=True) picks the highest step, complete or not",
        "CKPT-4": "transformers/trainer.py, Trainer._load_from_checkpoint: "
                  "safetensors.torch.load_file(safe_weights_file) on a damaged file raises "
                  "safetensors' own error, which does not name the checkpoint",
        "CKPT-5": "transformers/trainer.py: at its defaults (enable_jit_checkpoint=False) the "
                  "Trainer installs no SIGTERM handler, so SIGTERM ends the process where it "
                  "is; transformers/trainer_jit_checkpoint.py, CheckpointManager: with "
                  "enable_jit_checkpoint=True, SIGTERM arms a timer of kill_wait=3 s (not a "
                  "TrainingArguments field); only then does JITCheckpointCallback save at the "
                  "next step or epoch boundary and stop",
        "RES-3": "transformers/trainer.py, Trainer._load_callback_state: returns at once "
                 "unless args.restore_callback_states_from_checkpoint (False by default), so "
                 "a resumed EarlyStoppingCallback counts patience from 0",
        "DIST-2": rank_local,
        "DIST-3": rank_local,
        "DIST-4": "transformers/trainer.py, Trainer._save_rng_state: on several ranks every "
                  "process saves its own rng_state_<process_index>.pth into the checkpoint "
                  "directory; Trainer._save_checkpoint: its one dist.barrier() comes after "
                  "the model is saved and before optimizer.pt, scheduler.pt, the RNG files "
                  "and trainer_state.json, and none follows, so another rank starts the next "
                  "epoch while rank 0 still writes",
        "DIST-5": "transformers/training_args.py, TrainingArguments._setup_devices: with "
                  "use_cpu the PartialState kwargs get ddp_backend but not ddp_timeout (only "
                  "the non-CPU branches pass timedelta(seconds=ddp_timeout)); "
                  "accelerate/state.py, PartialState.__init__ then calls "
                  "init_process_group(backend, rank=..., world_size=...) for MULTI_CPU, with "
                  "torch's default timeout (without use_cpu on a CPU-only machine the timeout "
                  "is passed, but the state is DistributedType.NO and the Trainer runs no "
                  "DDP)",
    }
