"""The few Keras behaviours behind the keras target's fails (read in Keras 3.15's sources on its
torch backend; paths relative to site-packages). The matrix pages list those behind failing
clauses above the clause-by-clause table; each clause's own pointer is
``KerasAdapter.framework_sources()``.

Keras has no documented switch, off by default, that should fix one of them (``REMEDIES`` is
empty; why each candidate was left out: ``docs/frameworks/keras.md``).
"""

from __future__ import annotations

from trainspec.conformance.spec.causes import Remedy, RootCause

__all__ = ["REMEDIES", "ROOT_CAUSES"]

_MON = "keras/src/callbacks/monitor_callback.py, MonitorCallback._is_improvement"
_BACKUP = "keras/src/callbacks/backup_and_restore.py, BackupAndRestore"

ROOT_CAUSES: tuple[RootCause, ...] = (
    RootCause(summary="validation_freq=n validates after epochs n-1, 2n-1, ... (1-based "
                      "multiples): not after the first epoch, nor after a final epoch off "
                      "that grid",
              source="keras/src/trainers/trainer.py, Trainer._should_eval",
              clauses=("LOOP-2", "PAT-5")),
    RootCause(summary="fit keeps no best score: only ModelCheckpoint(save_best_only=True) "
                      "tracks one (none with checkpointing off), and it saves anyway when the "
                      "monitored score is missing",
              source="keras/src/backend/torch/trainer.py, TorchTrainer.fit; "
                     "keras/src/callbacks/model_checkpoint.py, "
                     "ModelCheckpoint._should_save_model",
              clauses=("BEST-1", "PAT-5")),
    RootCause(summary="the first monitored value becomes the best even when NaN or infinite, "
                      "and +inf (max) or -inf (min) is an improvement: no finiteness check in "
                      "ModelCheckpoint or EarlyStopping",
              source=_MON,
              clauses=("NAN-1", "NAN-2", "NAN-3", "BEST-4", "PAT-5")),
    RootCause(summary="EarlyStopping does no bookkeeping before start_from_epoch: its best "
                      "starts at that epoch, so a worse score there is an improvement",
              source="keras/src/callbacks/early_stopping.py, EarlyStopping.on_epoch_end",
              clauses=("PAT-3", "PAT-5")),
    RootCause(summary="its files record no epoch (.keras archives), run id or run config "
                      "(.keras archives and the backup), and save_freq counts 1-based epochs "
                      "or batches",
              source="keras/src/saving/saving_lib.py, _save_model_to_fileobj; "
                     "keras/src/callbacks/model_checkpoint.py, "
                     "ModelCheckpoint._should_save_on_batch",
              clauses=("BEST-3", "CKPT-1")),
    RootCause(summary="BackupAndRestore backs up the weights, the optimizer and the epoch "
                      "only: ModelCheckpoint's best and EarlyStopping's counter start afresh "
                      "in the resumed fit",
              source=f"{_BACKUP}._save_model; keras/src/callbacks/early_stopping.py, "
                     "EarlyStopping.on_train_begin",
              clauses=("RES-3",)),
    RootCause(summary="BackupAndRestore keeps no RNG state: a resumed fit shuffles the next "
                      "epoch from a freshly seeded torch generator",
              source=f"{_BACKUP}._save_model; keras/src/trainers/data_adapters/"
                     "array_data_adapter.py, ArrayDataAdapter.get_torch_dataloader",
              clauses=("RES-4",)),
    RootCause(summary="a saved optimizer state that does not fit is skipped with a warning, "
                      "and training goes on with a fresh optimizer",
              source="keras/src/optimizers/base_optimizer.py, "
                     "BaseOptimizer.load_own_variables",
              clauses=("RES-5",)),
    RootCause(summary="the debug caps limit epochs and steps only: ModelCheckpoint and "
                      "BackupAndRestore still write, and gradient accumulation still waits "
                      "for its full count",
              source="keras/src/backend/config.py, set_max_epochs / set_max_steps_per_epoch; "
                     "keras/src/optimizers/base_optimizer.py, "
                     "BaseOptimizer._backend_apply_gradients",
              clauses=("DBG-3", "DBG-4")),
    RootCause(summary="with no backup in backup_dir, fit starts afresh without an error (by "
                      "design: a job's first run has none)",
              source=f"{_BACKUP}._load_model",
              clauses=("CKPT-4",)),
    RootCause(summary="fit installs no SIGTERM handler: SIGTERM ends the process where it is, "
                      "and BackupAndRestore writes at epoch ends only",
              source="keras/src/backend/torch/trainer.py, TorchTrainer.fit (no signal "
                     f"handling anywhere in keras/); {_BACKUP}.on_epoch_end",
              clauses=("CKPT-5",)),
    RootCause(summary="BackupAndRestore writes latest.weights.h5 in place through h5py, with "
                      "no temporary file renamed into place: a kill mid-write leaves a file "
                      "that no longer loads",
              source=f"{_BACKUP}._save_model",
              clauses=("CKPT-2",)),
)

# none: see the module docstring
REMEDIES: tuple[Remedy, ...] = ()
