"""The few Trainer behaviours behind the hf target's fails (read in transformers 5.24's sources;
paths relative to site-packages). The matrix pages list those behind failing clauses above the
clause-by-clause table; each clause's own pointer is ``HFTrainerAdapter.framework_sources()``.
"""

from __future__ import annotations

from trainspec.conformance.spec.causes import RootCause

__all__ = ["ROOT_CAUSES"]

ROOT_CAUSES: tuple[RootCause, ...] = (
    RootCause(summary="the val.first evaluation (eval_on_start) is never a best candidate, and "
                      "the first validation after it never counts against patience",
              source="transformers/trainer.py, Trainer._inner_training_loop (eval_on_start "
                     "without _determine_best_metric); transformers/trainer_callback.py, "
                     "EarlyStoppingCallback.check_metric_value",
              clauses=("BEST-1", "PAT-1", "PAT-5")),
    RootCause(summary="with save_strategy='no' (ckpt.enable=false) no best weights are kept: "
                      "the saved best_model_checkpoint directory is the only copy",
              source="transformers/trainer.py, Trainer._save_checkpoint, "
                     "Trainer._load_best_model",
              clauses=("BEST-1", "BEST-2", "PAT-5")),
    RootCause(summary="+inf (maximizing) or -inf (minimizing) is a new best and refills "
                      "patience: no finiteness check",
              source="transformers/trainer.py, Trainer._determine_best_metric (np.greater / "
                     "np.less); transformers/trainer_callback.py, "
                     "EarlyStoppingCallback.check_metric_value",
              clauses=("NAN-1", "NAN-2", "NAN-3")),
    RootCause(summary="a resumed train() runs eval_on_start again",
              source="transformers/trainer.py, Trainer._inner_training_loop",
              clauses=("LOOP-2",)),
    RootCause(summary="at its defaults a resume does not restore EarlyStoppingCallback's "
                      "counter (restore_callback_states_from_checkpoint=False)",
              source="transformers/trainer.py, Trainer._load_callback_state: returns unless "
                     "args.restore_callback_states_from_checkpoint",
              clauses=("RES-3",)),
    RootCause(summary="optimizer and scheduler states are loaded into whatever the Trainer "
                      "holds, with no check that they fit",
              source="transformers/trainer.py, Trainer._load_optimizer_and_scheduler",
              clauses=("RES-5",)),
    RootCause(summary="best and stop are decided on each rank's own metrics, with no "
                      "broadcast from rank 0",
              source="transformers/trainer.py, Trainer._determine_best_metric; "
                     "transformers/trainer_callback.py, EarlyStoppingCallback.on_evaluate",
              clauses=("DIST-2", "DIST-3")),
    RootCause(summary="every rank writes its own RNG file into the checkpoint, and no barrier "
                      "follows the save",
              source="transformers/trainer.py, Trainer._save_rng_state, "
                     "Trainer._save_checkpoint",
              clauses=("DIST-4",)),
    RootCause(summary="on the CPU the process group gets torch's default timeout, not "
                      "ddp_timeout",
              source="transformers/training_args.py, TrainingArguments._setup_devices "
                     "(use_cpu branch)",
              clauses=("DIST-5",)),
    RootCause(summary="a checkpoint is a directory written in place: no run id or config a "
                      "weights-only load reads, no temporary directory renamed into place",
              source="transformers/trainer.py, Trainer._save_checkpoint",
              clauses=("CKPT-1", "CKPT-2")),
    RootCause(summary="a damaged weights file raises safetensors' own error, which does not "
                      "name the checkpoint",
              source="transformers/trainer.py, Trainer._load_from_checkpoint",
              clauses=("CKPT-4",)),
    RootCause(summary="at its defaults the Trainer does not handle SIGTERM; its just-in-time "
                      "checkpoint (enable_jit_checkpoint) waits kill_wait=3 s before saving",
              source="transformers/trainer_jit_checkpoint.py, CheckpointManager",
              clauses=("CKPT-5",)),
)
