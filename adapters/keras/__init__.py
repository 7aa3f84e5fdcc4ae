"""The adapter for Keras 3 on its torch backend (``trainspec check keras``).

A Keras-native model through ``Model.fit`` with ``ModelCheckpoint``, ``EarlyStopping`` and
``BackupAndRestore``: configured as Keras's docs tell a user to, never bent to pass a check.
How and why: ``docs/frameworks/keras.md``. Keras is imported inside the functions only (with
``KERAS_BACKEND=torch`` unless set): importing this module never imports it.
"""

from __future__ import annotations

from pathlib import Path

from trainspec.adapters.keras import causes as keras_causes
from trainspec.adapters.keras.causes import REMEDIES
from trainspec.adapters.keras.files import describe_keras_files
from trainspec.adapters.keras.run import KerasRun, keras_module
from trainspec.conformance.run.adapter import Capability, RunContext, chosen_remedies
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.spec.causes import Remedy, RootCause

__all__ = ["REMEDIES", "KerasAdapter"]

# Where in Keras 3.15 the behaviour behind each failing clause comes from (read in the
# installed sources; paths relative to site-packages)
_MON = "keras/src/callbacks/monitor_callback.py, MonitorCallback._is_improvement"
_FIRST = (f"{_MON}: returns True while the reference is None, so the first monitored "
          "value becomes the incumbent even when NaN or infinite (nothing beats a NaN "
          "or +inf incumbent afterwards)")
_INFINITE = (f"{_MON}: ops.greater(value - min_delta, best) (mode max) or ops.less "
             "(mode min) holds for +inf or -inf, so an infinite score is an improvement")
_NO_TRACKING = ("keras/src/backend/torch/trainer.py, TorchTrainer.fit: fit keeps no best "
                "score; only ModelCheckpoint(save_best_only=True) tracks one, and with "
                "ckpt.enable=false there is none")
_UNMONITORED = ("keras/src/callbacks/model_checkpoint.py, ModelCheckpoint."
                "_should_save_model: when the monitored val_score is missing (an epoch "
                "validation_freq skips) it warns and saves anyway, so best.keras then "
                "holds that epoch's weights")
_SOURCES = {
    "LOOP-2": "keras/src/trainers/trainer.py, Trainer._should_eval: validates when "
              "(epoch + 1) % validation_freq == 0, so after epochs n-1, 2n-1, ..., and "
              "not necessarily after the final epoch",
    "BEST-1": f"{_NO_TRACKING}; {_UNMONITORED}",
    "BEST-3": "keras/src/saving/saving_lib.py, _save_model_to_fileobj: a .keras archive "
              "holds config.json, metadata.json (keras_version, date_saved) and "
              "model.weights.h5; ModelCheckpoint._save_model records no epoch",
    "BEST-4": f"{_FIRST}; ModelCheckpoint._should_save_model then saves best.keras",
    "NAN-1": _INFINITE,
    "NAN-2": _FIRST,
    "NAN-3": f"keras/src/callbacks/early_stopping.py, EarlyStopping.on_epoch_end: "
             f"resets wait on {_MON}, which takes +inf (mode max) as an improvement",
    "PAT-3": "keras/src/callbacks/early_stopping.py, EarlyStopping.on_epoch_end: "
             "returns before any bookkeeping while epoch < start_from_epoch, so its best "
             "starts at that epoch and a worse score there counts as an improvement",
    "PAT-5": f"{_NO_TRACKING}; keras/src/trainers/trainer.py, Trainer._should_eval: "
             "validates when (epoch + 1) % validation_freq == 0, not after the final "
             "epoch; plus the NaN/inf and start_from_epoch behaviours of NAN-2 and PAT-3",
    "RES-3": "keras/src/callbacks/backup_and_restore.py, BackupAndRestore._save_model: "
             "backs up the weights (with the optimizer) and the epoch only; "
             "ModelCheckpoint.best and EarlyStopping's wait and best (reset in "
             "EarlyStopping.on_train_begin) start afresh in the resumed fit",
    "RES-5": "keras/src/optimizers/base_optimizer.py, BaseOptimizer.load_own_variables: "
             "a saved optimizer state with another number of variables is skipped with "
             "a warning, and training goes on with a fresh optimizer",
    "DBG-3": "keras/src/backend/config.py, set_max_epochs / set_max_steps_per_epoch: "
             "Keras's debug caps limit epochs and steps only; ModelCheckpoint and "
             "BackupAndRestore still write",
    "DBG-4": "keras/src/optimizers/base_optimizer.py, BaseOptimizer."
             "_backend_apply_gradients: with gradient_accumulation_steps the update runs "
             "only when (_iterations + 1) % steps == 0, and the debug step cap "
             "(keras/src/trainers/epoch_iterator.py, EpochIterator.__init__) leaves "
             "accumulation as it is",
    "CKPT-1": "keras/src/callbacks/model_checkpoint.py, ModelCheckpoint."
              "_should_save_on_batch: save_freq is 'epoch' or a count of batches, so "
              "every n epochs means after epochs n-1, 2n-1, ...; its .keras files and "
              "BackupAndRestore's latest.weights.h5 hold no epoch, run id or config",
    "CKPT-2": "keras/src/callbacks/backup_and_restore.py, BackupAndRestore._save_model: "
              "model.save_weights writes latest.weights.h5 in place (h5py opens the path "
              "itself), with no temporary file renamed over it; only double_checkpoint=True "
              "(off by default) keeps a .bkp copy that on_train_begin falls back to",
    "CKPT-4": "keras/src/callbacks/backup_and_restore.py, BackupAndRestore._load_model: "
              "with no latest.weights.h5 in backup_dir, fit starts afresh without an "
              "error (by design: the first run of a job has no backup)",
    "RES-4": "keras/src/callbacks/backup_and_restore.py, BackupAndRestore._save_model: backs "
             "up the weights, the optimizer and training_metadata.json (epoch, batch), no RNG "
             "state; keras/src/trainers/data_adapters/array_data_adapter.py, "
             "ArrayDataAdapter.get_torch_dataloader: shuffle=True draws each epoch's order "
             "from torch's global generator (RandomSampler), which a restarted job seeds "
             "afresh (keras.utils.set_random_seed)",
    "CKPT-5": "keras/src/backend/torch/trainer.py, TorchTrainer.fit: Keras installs no signal "
              "handler (nothing in keras/ calls signal.signal), so SIGTERM's default action "
              "ends the process where it is; keras/src/callbacks/backup_and_restore.py, "
              "BackupAndRestore.on_epoch_end writes the backup at epoch ends only (its "
              "docstring's save_before_preemption is not an argument in Keras 3)",
}


class KerasAdapter:
    """Runs scenarios through ``keras.Model.fit`` (torch backend) on one CPU process, at Keras's
    defaults (Keras has no remedy to name: :data:`REMEDIES` is empty)."""

    name = "keras"

    def __init__(self, *remedies: str) -> None:
        self.applied = chosen_remedies("keras", remedies, REMEDIES)

    def capabilities(self) -> frozenset[Capability]:
        # not declared: multi_rank (keras.distribution has no torch backend: fit runs in one
        # process), val_first (fit validates after epochs only; a model.evaluate before fit is
        # not seen by ModelCheckpoint or EarlyStopping, so it cannot count), eval_only (needs
        # val_first)
        return frozenset({"checkpoint", "resume", "finetune", "early_stopping",
                          "start_patience", "val_every_n", "test_pass", "debug", "grad_accum"})

    def environment(self) -> dict[str, str | None]:
        keras = keras_module()
        return {"framework": f"keras {keras.__version__}",
                "keras_backend": str(keras.config.backend())}

    def framework_sources(self) -> dict[str, str]:
        """Where in Keras 3.15 the behaviour behind each failing clause comes from (read in the
        installed sources; paths relative to site-packages)."""
        return dict(_SOURCES)

    def root_causes(self) -> tuple[RootCause, ...]:
        return keras_causes.ROOT_CAUSES

    def remedies(self) -> tuple[Remedy, ...]:
        return REMEDIES

    def describe_checkpoints(self, root: Path) -> list[FileRecord]:
        """Every file under ``root``: BackupAndRestore's ``backup/latest.weights.h5`` as the
        "last" checkpoint, ModelCheckpoint's ``best.keras`` as "best" and ``epochNN.keras`` as
        "epoch". ``epoch`` is read from BackupAndRestore's ``training_metadata.json`` (its
        epoch count less one); ``.keras`` archives store none, so theirs is None. ``step`` is
        the optimizer's stored iteration counter (batches, not updates, under gradient
        accumulation: the file does not say how many batches an update took). Files are read
        with zipfile, json and h5py: never unpickled."""
        # as JSON: the worker sends the entries on as they are (FileRecord.to_json)
        return describe_keras_files(root)

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        KerasRun(scenario, ctx).run()
