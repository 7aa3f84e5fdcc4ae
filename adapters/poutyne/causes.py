"""The few Poutyne behaviours behind the poutyne target's fails (read in Poutyne 1.19's sources;
paths relative to site-packages). The matrix pages list those behind failing clauses above the
clause-by-clause table; each clause's own pointer is ``PoutyneAdapter.framework_sources()``.
"""

from __future__ import annotations

from trainspec.conformance.spec.causes import RootCause

__all__ = ["ROOT_CAUSES"]

_CB = "poutyne/framework/callbacks"
_BUNDLE = "poutyne/framework/model_bundle.py, ModelBundle"

ROOT_CAUSES: tuple[RootCause, ...] = (
    RootCause(summary="+inf (maximizing) or -inf (minimizing) is a new best and refills "
                      "patience: no finiteness check",
              source=f"{_CB}/periodic.py, PeriodicSaveCallback.on_epoch_end; "
                     f"{_CB}/best_model_restore.py, BestModelRestore.on_epoch_end; "
                     f"{_CB}/earlystopping.py, EarlyStopping.on_epoch_end",
              clauses=("BEST-1", "NAN-1", "NAN-2", "NAN-3", "PAT-5")),
    RootCause(summary="no step count is kept or saved, and best and periodic checkpoints are "
                      "the network's bare state_dict, the epoch only in the file name",
              source=f"{_BUNDLE}._train; {_CB}/checkpoint.py, ModelCheckpoint.save_file "
                     "(Model.save_weights)",
              clauses=("RES-1", "BEST-3", "CKPT-1")),
    RootCause(summary="the optimizer is checkpointed before the epoch's LR scheduler step, and "
                      "a resume does not put the scheduler's learning rate back: the resumed "
                      "run trains one schedule step behind",
              source=f"{_BUNDLE}._train (OptimizerCheckpoint before LRSchedulerCheckpoint), "
                     f"{_BUNDLE}._load_epoch_state",
              clauses=("RES-2", "RES-4")),
    RootCause(summary="EarlyStopping starts afresh on every train() call, and ModelBundle "
                      "saves no callback state: patience does not survive a resume",
              source=f"{_CB}/earlystopping.py, EarlyStopping.on_train_begin",
              clauses=("RES-3",)),
    RootCause(summary="a resume loads the saved optimizer state into whatever optimizer the "
                      "run holds, and a missing scheduler state only warns",
              source=f"{_BUNDLE}._load_epoch_state",
              clauses=("RES-5",)),
    RootCause(summary="the last checkpoint is written after every epoch whatever is asked, and "
                      "a periodic ModelCheckpoint counts one-based epochs",
              source=f"{_BUNDLE}._train; {_CB}/periodic.py, PeriodicSaveCallback.on_epoch_end",
              clauses=("CKPT-1",)),
    RootCause(summary="every checkpoint is read with a full unpickler: torch.load with "
                      "pickle_module=pickle defaults to weights_only=False",
              source="poutyne/framework/model.py, Model.load_weights",
              clauses=("CKPT-3",)),
    RootCause(summary="a directory without last.epoch is a fresh start, without an error; a "
                      "damaged file raises torch's own error, naming no file",
              source=f"{_BUNDLE}._load_epoch_state",
              clauses=("CKPT-4",)),
    RootCause(summary="ModelBundle.test looks the best epoch up in log.tsv and fails when "
                      "every logged score is NaN",
              source=f"{_BUNDLE}.get_best_epoch_stats (pandas idxmax)",
              clauses=("BEST-4",)),
    RootCause(summary="no SIGTERM handling: the process dies mid-epoch, and checkpoints are "
                      "written only at epoch ends",
              source="poutyne/framework/model.py, Model.fit_generator",
              clauses=("CKPT-5",)),
)
