"""The adapter for Keras 3 on its torch backend (``trainspec check keras``).

Keras is configured the way its documentation tells a user to, for the scenario's keys, and
never bent to pass a check:

- the task is a Keras-native ``keras.Sequential`` (``Dense`` layers shaped as the probe's
  ``task_model``), compiled with ``model.compile(optimizer=Adam|SGD(...), loss=
  SparseCategoricalCrossentropy(from_logits=True), metrics=[score])``. Not a
  ``TorchModuleWrapper`` around the probe's module: its ``get_config`` embeds the module as a
  ``torch.save`` pickle, so a whole-model ``.keras`` file of it loads only with
  ``safe_mode=False``, which ModelCheckpoint's default (whole-model) files would then need;
- the scripted score is a ``keras.metrics.Metric`` named ``score`` given to ``compile``: Keras
  logs it for the validation data as ``val_score``, which is what ModelCheckpoint's docs tell a
  user to monitor ("Typically the metrics are set by the Model.compile method. Prefix the name
  with "val_" to monitor validation metrics");
- ``model.fit(x, y, epochs=num_epochs, batch_size=..., validation_data=(x_val, y_val),
  validation_freq=val.every_n_epochs, callbacks=[...])``, with
  ``ModelCheckpoint(ckpt_root/"best.keras", monitor="val_score", mode=..., save_best_only=True)``
  for the best model, ``EarlyStopping(monitor="val_score", mode=..., patience=val.patience,
  start_from_epoch=val.start_patience)`` only when patience is set, and, when
  ``ckpt.every_n_epochs`` is set, ``ModelCheckpoint(ckpt_root/"epoch{epoch:02d}.keras",
  save_freq=every_n_epochs * steps_per_epoch)`` (Keras's save_freq counts epochs or batches,
  nothing in between; Keras fills ``{epoch}`` 1-based);
- resume: ``keras.callbacks.BackupAndRestore(backup_dir)``, the callback Keras documents "to
  recover training from an interruption that has happened in the middle of a Model.fit
  execution": it backs up the weights and optimizer (``latest.weights.h5``) and the epoch
  (``training_metadata.json``) after every epoch and restores them when fit starts again. The
  other documented route (``load_model`` plus ``fit(initial_epoch=...)``) needs the epoch from
  the user, since no Keras file but BackupAndRestore's records it. Every checkpointing run backs
  up into ``ckpt_root/"backup"``; a resume uses the folder of ``ckpt.load_from`` as its
  ``backup_dir``, as a restarted Keras job reuses its backup folder, and Keras restores the
  backup it finds there, or starts afresh when there is none (a folder that does not exist
  holds none: the run then backs up into its own folder rather than create that one).
  ``ckpt.save_last`` keeps the backup after training (``delete_checkpoint=False``); otherwise
  Keras deletes it, its default;
- finetune: the checkpoint's weights loaded with ``model.load_weights(ckpt.load_from)`` into a
  fresh, not yet compiled model, then ``compile`` (a fresh optimizer; Keras loads optimizer
  state only into a model compiled beforehand);
- ``grad_accum_steps`` is the optimizer's ``gradient_accumulation_steps`` (Keras takes None
  for 1), ``grad_clip`` its ``global_clipnorm`` (the norm over all gradients together, as
  ``torch.nn.utils.clip_grad_norm_`` in the seed; ``clipnorm`` clips each variable on its own),
  ``weight_decay`` its ``weight_decay``; the task's LinearLR is ``PolynomialDecay(lr,
  decay_steps, lr / 10, power=1)``. The task's extra param group and extra scheduler have no
  Keras counterpart (one learning rate per optimizer; a schedule is a stateless function of
  the iteration count) and are not applied;
- debug: ``keras.config.set_max_epochs(1)`` and ``keras.config.set_max_steps_per_epoch(1)``,
  the caps Keras offers "purely for debugging" (also as ``KERAS_MAX_EPOCHS`` and
  ``KERAS_MAX_STEPS_PER_EPOCH``); they cap epochs and steps and nothing else;
- the test pass: ``keras.models.load_model(best.keras).evaluate(x_test, y_test)`` when a best
  model was saved (as ModelCheckpoint's docs load it), the trained model otherwise.

Small callbacks turn Keras's hooks into the suite's events. Keras runs callbacks in the order of
the list given to fit, so they stand around its own: one first, one between ModelCheckpoint
and EarlyStopping (the ``val_after_save`` crash point), one last. A validation's ``improved``
is whether ModelCheckpoint's ``best`` changed at that epoch (Keras tracks the best model in
that callback only: without checkpointing there is none), its ``stop`` is
``model.stop_training`` once EarlyStopping has acted, its ``score`` the ``val_score`` Keras
logged (float32, as metrics are).

Keras is imported inside the functions only (with ``KERAS_BACKEND=torch`` unless set):
importing this module never imports it.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import torch

from trainspec.conformance.run.adapter import Capability, RunContext
from trainspec.conformance.run.files import error_line, file_entry, top_level
from trainspec.conformance.run.probe import rng_digests, task_data
from trainspec.conformance.run.scenario import Scenario, Task
from trainspec.conformance.run.trace import encode
from trainspec.errors import AdapterError

__all__ = ["KerasAdapter"]

MONITOR = "val_score"
BEST_FILE = "best.keras"
BACKUP_DIR = "backup"
# BackupAndRestore's own names inside its backup_dir
BACKUP_WEIGHTS = "latest.weights.h5"
BACKUP_METADATA = "training_metadata.json"
PERIODIC_PATTERN = "epoch{epoch:02d}.keras"
_PERIODIC_FILE = re.compile(r"^epoch\d+\.keras$")


def _keras() -> Any:
    """Keras on its torch backend, imported on first use."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    loaded = "keras" in sys.modules
    import keras  # type: ignore[import-untyped]

    backend = keras.config.backend()
    if backend != "torch":
        how = "was already imported with" if loaded else "was configured for"
        raise AdapterError(f"the Keras adapter runs Keras on its torch backend, but keras {how} "
                           f"the {backend!r} backend: set KERAS_BACKEND=torch before anything "
                           "imports keras")
    return keras


def _role(relpath: Path) -> str | None:
    """The role of a file under this adapter's names: BackupAndRestore's weights are the last
    checkpoint, ModelCheckpoint's best and periodic ``.keras`` files the others."""
    name = relpath.name
    if name == BACKUP_WEIGHTS:
        return "last"
    if name == BEST_FILE:
        return "best"
    return "epoch" if _PERIODIC_FILE.match(name) else None


def _h5_bytes(path: Path) -> io.BytesIO | Path:
    """What h5py opens for a Keras file: the ``.weights.h5`` itself, or the weights inside a
    ``.keras`` zip archive (read as bytes; nothing in it is unpickled or executed)."""
    if path.suffix == ".keras":
        with zipfile.ZipFile(path) as archive:
            return io.BytesIO(archive.read("model.weights.h5"))
    return path


def _stored_step(h5: Any) -> int | None:
    """The optimizer's iteration counter as stored (its first variable; raw batches seen when
    gradient accumulation is on), or None when the file holds no optimizer."""
    value = h5.get("optimizer/vars/0")
    if value is None or value.shape != () or value.dtype.kind not in "iu":
        return None
    return int(value[()])


def _backup_epoch(weights: Path) -> int | None:
    """The epoch of a BackupAndRestore backup: its metadata holds the number of epochs done
    (the next epoch to run), so the backed-up epoch is one less."""
    meta = weights.parent / BACKUP_METADATA
    try:
        epoch = json.loads(meta.read_text())["epoch"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return epoch - 1 if isinstance(epoch, int) and not isinstance(epoch, bool) else None


def _describe(path: Path) -> dict[str, Any]:
    """Top-level entries, epoch and step of a Keras file, read with zipfile, json and h5py."""
    import h5py  # type: ignore[import-untyped]

    out: dict[str, Any] = {}
    try:
        if path.suffix == ".json":
            content = json.loads(path.read_text())
            if isinstance(content, dict):
                out.update(top_level(content))
            return out
        if path.suffix == ".keras":
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
            out.update(keys=sorted(names), types=dict.fromkeys(names, "file"))
        with h5py.File(_h5_bytes(path), "r") as h5:
            if path.suffix != ".keras":
                out.update(keys=sorted(h5.keys()),
                           types={k: type(v).__name__ for k, v in h5.items()})
            out["step"] = _stored_step(h5)
            has_model, has_optimizer = "layers" in h5, "optimizer" in h5
    except Exception as e:  # the file is what is being judged: record, do not raise
        out["error"] = error_line(e)
        return out
    # a .keras archive (config.json, metadata.json, model.weights.h5) stores no epoch;
    # BackupAndRestore keeps its epoch beside its weights
    out["epoch"] = _backup_epoch(path) if path.name == BACKUP_WEIGHTS else None
    # in the spec's terms (CKPT-1): the archive's config.json is the model's architecture, not
    # the run's config; Keras records no run id, and its schedules hold no state to save
    present = {"epoch": out["epoch"] is not None, "step": out["step"] is not None,
               "model": has_model, "optimizer": has_optimizer}
    out["holds"] = [name for name, held in present.items() if held]
    return out


def _weight_names(model: Any) -> list[tuple[str, list[str]]]:
    """Each layer's name and its variables' stable names, in the order Keras saves them."""
    return [(layer.name, [f"{layer.name}/{v.name}" for v in
                          [*layer.trainable_weights, *layer.non_trainable_weights]])
            for layer in model.layers if layer.weights]


def _weights(model: Any) -> dict[str, torch.Tensor]:
    """The model's weights, copied, keyed ``layer/variable`` (stable across runs and files)."""
    out: dict[str, torch.Tensor] = {}
    for layer in model.layers:
        for v in [*layer.trainable_weights, *layer.non_trainable_weights]:
            out[f"{layer.name}/{v.name}"] = v.value.detach().to("cpu", copy=True)
    return out


def _optimizer_state(optimizer: Any) -> dict[str, torch.Tensor]:
    return {f"{i}:{v.name}": v.value.detach().to("cpu", copy=True)
            for i, v in enumerate(optimizer.variables)}


def _file_weights(h5: Any, names: list[tuple[str, list[str]]]) -> dict[str, torch.Tensor]:
    """A Keras weights file's layer variables under the live model's names: Keras stores each
    layer's variables as ``layers/<key>/vars/<i>``, the layer's name an attribute of ``vars``."""
    groups = {str(g.attrs.get("name", "")): g
              for g in (layer.get("vars") for layer in h5.get("layers", {}).values())
              if g is not None}
    out: dict[str, torch.Tensor] = {}
    for layer, keys in names:
        group = groups.get(layer)
        if group is None:
            continue
        for i, key in enumerate(keys):
            data = group.get(str(i))
            if data is not None:
                out[key] = torch.from_numpy(data[()].copy())
    return out


class KerasAdapter:
    """Runs scenarios through ``keras.Model.fit`` (torch backend) on one CPU process."""

    name = "keras"

    def capabilities(self) -> frozenset[Capability]:
        # not declared: multi_rank (keras.distribution has no torch backend: fit runs in one
        # process), sigterm (fit has no signal handling),
        # val_first (fit validates after epochs only; a model.evaluate before fit is not seen
        # by ModelCheckpoint or EarlyStopping, so it cannot count), eval_only (needs
        # val_first), rng_state (BackupAndRestore backs up weights, optimizer and epoch only)
        return frozenset({"checkpoint", "resume", "finetune", "early_stopping",
                          "start_patience", "val_every_n", "test_pass", "debug", "grad_accum"})

    def environment(self) -> dict[str, str | None]:
        keras = _keras()
        return {"framework": f"keras {keras.__version__}",
                "keras_backend": str(keras.config.backend())}

    def framework_sources(self) -> dict[str, str]:
        """Where in Keras 3.15 the behaviour behind each failing clause comes from (read in the
        installed sources; paths relative to site-packages)."""
        mon = "keras/src/callbacks/monitor_callback.py, MonitorCallback._is_improvement"
        first = (f"{mon}: returns True while the reference is None, so the first monitored "
                 "value becomes the incumbent even when NaN or infinite (nothing beats a NaN "
                 "or +inf incumbent afterwards)")
        infinite = (f"{mon}: ops.greater(value - min_delta, best) (mode max) or ops.less "
                    "(mode min) holds for +inf or -inf, so an infinite score is an improvement")
        no_tracking = ("keras/src/backend/torch/trainer.py, TorchTrainer.fit: fit keeps no best "
                       "score; only ModelCheckpoint(save_best_only=True) tracks one, and with "
                       "ckpt.enable=false there is none")
        unmonitored = ("keras/src/callbacks/model_checkpoint.py, ModelCheckpoint."
                       "_should_save_model: when the monitored val_score is missing (an epoch "
                       "validation_freq skips) it warns and saves anyway, so best.keras then "
                       "holds that epoch's weights")
        return {
            "LOOP-2": "keras/src/trainers/trainer.py, Trainer._should_eval: validates when "
                      "(epoch + 1) % validation_freq == 0, so after epochs n-1, 2n-1, ..., and "
                      "not necessarily after the final epoch",
            "BEST-1": f"{no_tracking}; {unmonitored}",
            "BEST-3": "keras/src/saving/saving_lib.py, _save_model_to_fileobj: a .keras archive "
                      "holds config.json, metadata.json (keras_version, date_saved) and "
                      "model.weights.h5; ModelCheckpoint._save_model records no epoch",
            "BEST-4": f"{first}; ModelCheckpoint._should_save_model then saves best.keras",
            "NAN-1": infinite,
            "NAN-2": first,
            "NAN-3": f"keras/src/callbacks/early_stopping.py, EarlyStopping.on_epoch_end: "
                     f"resets wait on {mon}, which takes +inf (mode max) as an improvement",
            "PAT-3": "keras/src/callbacks/early_stopping.py, EarlyStopping.on_epoch_end: "
                     "returns before any bookkeeping while epoch < start_from_epoch, so its best "
                     "starts at that epoch and a worse score there counts as an improvement",
            "PAT-5": f"{no_tracking}; keras/src/trainers/trainer.py, Trainer._should_eval: "
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
            "CKPT-4": "keras/src/callbacks/backup_and_restore.py, BackupAndRestore._load_model: "
                      "with no latest.weights.h5 in backup_dir, fit starts afresh without an "
                      "error (by design: the first run of a job has no backup)",
        }

    def describe_checkpoints(self, root: Path) -> list[dict[str, Any]]:
        """Every file under ``root``: BackupAndRestore's ``backup/latest.weights.h5`` as the
        "last" checkpoint, ModelCheckpoint's ``best.keras`` as "best" and ``epochNN.keras`` as
        "epoch". ``epoch`` is read from BackupAndRestore's ``training_metadata.json`` (its
        epoch count less one); ``.keras`` archives store none, so theirs is None. ``step`` is
        the optimizer's stored iteration counter (batches, not updates, under gradient
        accumulation: the file does not say how many batches an update took). Files are read
        with zipfile, json and h5py: never unpickled."""
        entries: list[dict[str, Any]] = []
        if not root.exists():
            return entries
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            entry = file_entry(path, root, _role(path.relative_to(root)))
            if path.name.endswith((".keras", ".h5", ".json")):
                entry.update(_describe(path))
            entries.append(entry)
        return entries

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        _Run(scenario, ctx).run()


class _Run:
    """One run of a scenario: builds the model, the callbacks, and fits."""

    def __init__(self, scenario: Scenario, ctx: RunContext) -> None:
        self.scenario, self.ctx = scenario, ctx
        self.get = scenario.get
        self.names: list[tuple[str, list[str]]] = []
        self.backup_dir: Path | None = None
        self.best_cb: Any = None

    def build(self, keras: Any, task: Task) -> Any:
        layers: list[Any] = [keras.Input((task.features,))]
        if task.hidden:
            layers += [keras.layers.Dense(task.hidden, activation="tanh", name="hidden"),
                       keras.layers.Dense(task.classes, name="output")]
        else:
            layers.append(keras.layers.Dense(task.classes, name="linear"))
        return keras.Sequential(layers, name="net")

    def optimizer(self, keras: Any, task: Task, total_steps: int) -> Any:
        # the task's extra_param_group and extra_scheduler have no Keras counterpart: a Keras
        # optimizer has one learning rate for all variables, and a schedule is a stateless
        # function of the iteration count, so there is no scheduler state to register
        lr: Any = task.lr
        if task.scheduler:
            lr = keras.optimizers.schedules.PolynomialDecay(
                task.lr, decay_steps=total_steps, end_learning_rate=task.lr * 0.1, power=1.0)
        accum = int(self.get("grad_accum_steps"))
        decay = float(self.get("weight_decay") or 0.0)
        common: dict[str, Any] = {
            "learning_rate": lr, "global_clipnorm": self.get("grad_clip"),
            "gradient_accumulation_steps": accum if accum > 1 else None,
            "weight_decay": decay or None}
        if task.optimizer == "sgd":
            return keras.optimizers.SGD(momentum=0.9, **common)
        return keras.optimizers.Adam(**common)

    def run(self) -> None:
        keras = _keras()
        debug = bool(self.get("debug"))
        caps = (keras.config.max_epochs(), keras.config.max_steps_per_epoch())
        if debug:
            keras.config.set_max_epochs(1)
            keras.config.set_max_steps_per_epoch(1)
        try:
            self.fit(keras)
        finally:
            keras.config.set_max_epochs(caps[0])
            keras.config.set_max_steps_per_epoch(caps[1])

    def fit(self, keras: Any) -> None:
        s, ctx, get = self.scenario, self.ctx, self.get
        task = s.task
        seed = int(get("seed"))
        keras.backend.clear_session()
        keras.utils.set_random_seed(seed)
        splits = task_data(task, seed)
        data = {name: (splits[name].tensors[0].numpy(), splits[name].tensors[1].numpy())
                for name in ("train", "val", "test")}
        steps_per_epoch = math.ceil(task.n_train / task.batch_size)
        num_epochs = int(get("num_epochs"))
        total_steps = max(1, steps_per_epoch * max(num_epochs, 1))
        mode = "min" if get("val.minimize") else "max"
        load_from = get("ckpt.load_from")
        resume = bool(get("ckpt.resume")) and not get("ckpt.model_only") \
            and load_from is not None
        ckpt = bool(get("ckpt.enable"))

        class Score(keras.metrics.Metric):  # type: ignore[misc]
            """The scripted score of the epoch in progress, as a compiled metric."""

            def __init__(self, name: str = "score", dtype: Any = None) -> None:
                super().__init__(name=name, dtype=dtype)
                self.epoch: int | None = None

            def update_state(self, *args: Any, **kwargs: Any) -> None:
                return None  # scripted, not measured

            def result(self) -> Any:
                value = math.nan if self.epoch is None \
                    else s.scores.pooled(self.epoch, ctx.world_size)
                return keras.ops.convert_to_tensor(value, dtype=self.dtype)

            def reset_state(self) -> None:
                return None

        model = self.build(keras, task)
        if load_from is not None and not resume:  # finetune: the weights, a fresh optimizer
            model.load_weights(load_from)
        score = Score()
        model.compile(optimizer=self.optimizer(keras, task, total_steps),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[score])
        self.names = _weight_names(model)
        self.final: dict[str, torch.Tensor] = _weights(model)

        best_cb: Any = None
        checkpoints: list[Any] = []
        if ckpt:
            best_cb = keras.callbacks.ModelCheckpoint(
                ctx.ckpt_root / BEST_FILE, monitor=MONITOR, mode=mode, save_best_only=True)
            every = get("ckpt.every_n_epochs")
            if every:
                checkpoints.append(keras.callbacks.ModelCheckpoint(
                    ctx.ckpt_root / PERIODIC_PATTERN, save_freq=int(every) * steps_per_epoch))
        stopping: list[Any] = []
        patience = get("val.patience")
        if patience is not None:
            stopping.append(keras.callbacks.EarlyStopping(
                monitor=MONITOR, mode=mode, patience=int(patience),
                start_from_epoch=int(get("val.start_patience"))))
        backup: list[Any] = []
        if ckpt or resume:
            self.backup_dir = ctx.ckpt_root / BACKUP_DIR
            if resume and Path(load_from).parent.is_dir():  # a restarted job's backup folder
                self.backup_dir = Path(load_from).parent
            backup.append(keras.callbacks.BackupAndRestore(
                self.backup_dir, delete_checkpoint=not get("ckpt.save_last")))
        self.best_cb = best_cb

        run = self
        val_data = data["val"]
        planned = {"eval_loader": None,
                   "val_loader": self.planned(keras, len(val_data[0]), task.batch_size),
                   "test_loader": self.planned(keras, task.n_test, task.batch_size)}
        self.epochs_done = 0
        self.pending: dict[str, Any] | None = None

        class Events(keras.callbacks.Callback):  # type: ignore[misc]
            """First in the list: epoch starts, the end of training, the start of validation."""

            def __init__(self) -> None:
                super().__init__()
                self.batches = 0
                self.start_step = 0
                self.ended: int | None = None

            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                ctx.crash_point("train_start", epoch)
                score.epoch = epoch
                run.epochs_done = epoch
                optimizer = self.model.optimizer
                step = int(optimizer.iterations)
                self.batches, self.start_step, self.ended = 0, step, None
                state = {"weights": _weights(self.model),
                         "optimizer": _optimizer_state(optimizer),
                         "scheduler": {"learning_rate": torch.tensor(
                             float(optimizer.learning_rate))},
                         "rng": rng_digests()}
                ctx.emit({"ev": "train_start", "epoch": epoch, "train_step": step,
                          "state": encode(state), "last_file_epoch": run.last_epoch(),
                          "best_file": run.best_snapshot()})

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                self.batches += 1

            def end_epoch(self, epoch: int) -> None:
                if self.ended == epoch:
                    return
                self.ended = epoch
                run.final = _weights(self.model)
                step = int(self.model.optimizer.iterations)
                ctx.emit({"ev": "train_end", "epoch": epoch, "train_step": step,
                          "batches": self.batches, "optimizer_steps": step - self.start_step,
                          "loader_len": int(self.params["steps"]),
                          "loader_batch_size": task.batch_size,
                          "loader_lens": planned, "loader_batches": planned})
                ctx.crash_point("train_end", epoch)

            def on_test_begin(self, logs: Any = None) -> None:
                epoch = score.epoch if score.epoch is not None else 0
                self.end_epoch(epoch)
                ctx.crash_point("val_start", epoch)
                run.pending = {"ev": "val", "epoch": epoch, "phase": "epoch",
                               "weights": encode(_weights(self.model))}

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                self.end_epoch(epoch)
                run.best_before = run.best_value()

        class AfterBest(keras.callbacks.Callback):  # type: ignore[misc]
            """Between ModelCheckpoint and EarlyStopping: best selected, patience not yet."""

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                if run.pending is not None:
                    ctx.crash_point("val_after_save", epoch)

        class Report(keras.callbacks.Callback):  # type: ignore[misc]
            """Last in the list: every callback has acted on the epoch's validation."""

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                run.epochs_done = epoch + 1
                pending, run.pending = run.pending, None
                if pending is None or MONITOR not in (logs or {}):
                    return
                ctx.emit({**pending, "score": float(logs[MONITOR]),
                          "improved": run.best_value() is not run.best_before,
                          "stop": bool(self.model.stop_training),
                          "best_file": run.best_snapshot()})

        class TestEvents(keras.callbacks.Callback):  # type: ignore[misc]
            def on_test_begin(self, logs: Any = None) -> None:
                ctx.emit({"ev": "test", "used_best": run.tested_best,
                          "weights": encode(_weights(self.model))})

        self.best_before: Any = None
        callbacks = [Events(), *([best_cb] if best_cb else []), AfterBest(), *stopping,
                     *checkpoints, *backup, Report()]
        ctx.emit({"ev": "setup", "ckpt_given": load_from is not None,
                  "train_len_seen": steps_per_epoch, "schedule_steps": total_steps,
                  "epoch": 0, "train_step": 0,
                  "cfg_seen": {"num_epochs": num_epochs,
                               "grad_accum_steps": get("grad_accum_steps"),
                               "ckpt.enable": get("ckpt.enable"), "save_preds.enable": None,
                               "wandb.mode": None}})
        x, y = data["train"]
        model.fit(x, y, batch_size=task.batch_size, epochs=num_epochs, verbose=0,
                  shuffle=task.shuffle, validation_data=val_data,
                  validation_freq=int(get("val.every_n_epochs")), callbacks=callbacks)
        best_path = self.best_path()
        self.tested_best = best_path is not None
        if get("test.enable"):
            tested = model
            if best_path is not None:
                tested = keras.models.load_model(best_path, custom_objects={"Score": Score})
            tested.evaluate(*data["test"], batch_size=task.batch_size, verbose=0,
                            callbacks=[TestEvents()])
        best = self.best_snapshot()
        ctx.emit({"ev": "end", "epoch": self.epochs_done,
                  "train_step": int(model.optimizer.iterations), "best_file": best,
                  "final_weights": encode(self.final),
                  "best_model": None if best is None else best.get("weights")})

    @staticmethod
    def planned(keras: Any, n: int, batch_size: int) -> int:
        """How many batches Keras draws from an evaluation split: its length, cut to
        ``keras.config.max_steps_per_epoch()`` (the debug cap)."""
        batches = math.ceil(n / batch_size)
        cap = keras.config.max_steps_per_epoch()
        return min(batches, cap) if cap else batches

    def best_value(self) -> Any:
        """ModelCheckpoint's incumbent: the very object it holds (a new one on improvement)."""
        return None if self.best_cb is None else self.best_cb.best

    def best_path(self) -> Path | None:
        if self.best_cb is None:
            return None
        path = self.ctx.ckpt_root / BEST_FILE
        return path if path.is_file() else None

    def last_epoch(self) -> int | None:
        """The epoch of the backup BackupAndRestore holds now, if any."""
        if self.backup_dir is None or not (self.backup_dir / BACKUP_WEIGHTS).is_file():
            return None
        return _backup_epoch(self.backup_dir / BACKUP_WEIGHTS)

    def best_snapshot(self) -> dict[str, Any] | None:
        """Identity and content of best.keras, in the suite's BestFile shape."""
        import h5py

        path = self.best_path()
        if path is None:
            return None
        stat = path.stat()
        out: dict[str, Any] = {"path": str(path), "mtime_ns": stat.st_mtime_ns,
                               "size": stat.st_size, "epoch": None, "step": None}
        try:
            with h5py.File(_h5_bytes(path), "r") as h5:
                out["step"] = _stored_step(h5)
                out["weights"] = encode(_file_weights(h5, self.names))
        except Exception as e:  # the file is what is being judged: record, do not raise
            out["error"] = error_line(e)
        return out
