"""One run of a scenario through ``keras.Model.fit``: the model, the callbacks, the hooks.

The configuration and its reasons are in ``docs/frameworks/keras.md``. The suite's callbacks
are plain classes here; :func:`_keras_object` mixes Keras's base class in when a run starts,
so Keras is imported inside the functions only.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import torch

from trainspec.adapters.keras.files import (
    BACKUP_DIR,
    BACKUP_WEIGHTS,
    BEST_FILE,
    PERIODIC_PATTERN,
    WeightNames,
    backup_epoch,
    snapshot,
)
from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.records import (
    FileSnapshot,
    RunEnd,
    Setup,
    TestPass,
    TrainEnd,
    TrainerState,
    TrainStart,
    Validation,
    Weights,
)
from trainspec.conformance.run.scenario import Scenario, ScoreScript, Task
from trainspec.conformance.run.task import rng_digests, task_data
from trainspec.errors import AdapterError

__all__ = ["KerasRun", "keras_module"]

MONITOR = "val_score"


def keras_module() -> Any:
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


def _keras_object(base: type, hooks: type, *args: object) -> Any:
    """An instance of ``hooks`` with Keras's ``base`` mixed in after it: ``hooks`` overrides
    the base's no-op hooks, and Keras calls them as it calls a subclass's."""
    return type(hooks.__name__.lstrip("_"), (hooks, base), {})(*args)


def _weight_names(model: Any) -> WeightNames:
    """Each layer's name and its variables' stable names, in the order Keras saves them."""
    return [(layer.name, [f"{layer.name}/{v.name}" for v in
                          [*layer.trainable_weights, *layer.non_trainable_weights]])
            for layer in model.layers if layer.weights]


def _weights(model: Any) -> Weights:
    """The model's weights, copied, keyed ``layer/variable`` (stable across runs and files)."""
    out: Weights = {}
    for layer in model.layers:
        for v in [*layer.trainable_weights, *layer.non_trainable_weights]:
            out[f"{layer.name}/{v.name}"] = v.value.detach().to("cpu", copy=True)
    return out


def _state(model: Any) -> TrainerState:
    """What a resume must restore: weights, the optimizer's variables, the current LR."""
    optimizer = model.optimizer
    return TrainerState(
        weights=_weights(model),
        optimizer={f"{i}:{v.name}": v.value.detach().to("cpu", copy=True)
                   for i, v in enumerate(optimizer.variables)},
        scheduler={"learning_rate": torch.tensor(float(optimizer.learning_rate))},
        rng=rng_digests())


def _planned(keras: Any, n: int, batch_size: int) -> int:
    """How many batches Keras draws from an evaluation split: its length, cut to
    ``keras.config.max_steps_per_epoch()`` (the debug cap)."""
    batches = math.ceil(n / batch_size)
    cap = keras.config.max_steps_per_epoch()
    return min(batches, cap) if cap else batches


class _ScriptedScore:
    """The scripted score of the epoch in progress, as a compiled ``keras.metrics.Metric``
    (Keras logs it for the validation data as ``val_score``). ``scores`` and ``world_size``
    are set on the class a run makes, so that a model ``load_model`` rebuilds scores alike."""

    scores: ScoreScript
    world_size: int
    dtype: Any

    def __init__(self, name: str = "score", dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)  # type: ignore[call-arg]
        self.epoch: int | None = None

    def update_state(self, *args: object, **kwargs: object) -> None:
        return None  # scripted, not measured

    def result(self) -> Any:
        value = math.nan if self.epoch is None else self.scores.pooled(self.epoch,
                                                                       self.world_size)
        return keras_module().ops.convert_to_tensor(value, dtype=self.dtype)

    def reset_state(self) -> None:
        return None


class _EpochEvents:
    """First in fit's callback list: epoch starts, the end of training, the start of
    validation."""

    model: Any  # Keras's Callback provides model and params
    params: Any

    def __init__(self, run: KerasRun) -> None:
        super().__init__()
        self.run = run
        self.batches = 0
        self.start_step = 0
        self.ended: int | None = None

    def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
        run = self.run
        run.ctx.crash_point("train_start", epoch)
        run.score.epoch = epoch
        run.epochs_done = epoch
        step = int(self.model.optimizer.iterations)
        self.batches, self.start_step, self.ended = 0, step, None
        run.ctx.record(TrainStart(epoch=epoch, train_step=step, state=_state(self.model),
                                  last_file_epoch=run.last_epoch(),
                                  best_file=run.best_snapshot()))

    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        self.batches += 1

    def end_epoch(self, epoch: int) -> None:
        """The epoch's training ended: at the start of its validation, or at its end when no
        validation is due."""
        if self.ended == epoch:
            return
        self.ended = epoch
        self.run.final = _weights(self.model)
        step = int(self.model.optimizer.iterations)
        planned = self.run.planned
        self.run.ctx.record(TrainEnd(epoch=epoch, train_step=step, batches=self.batches,
                                     optimizer_steps=step - self.start_step,
                                     loader_len=int(self.params["steps"]),
                                     loader_batch_size=self.run.task.batch_size,
                                     eval_lens=planned, eval_batches=planned))
        self.run.ctx.crash_point("train_end", epoch)

    def on_test_begin(self, logs: object = None) -> None:
        run = self.run
        epoch = run.score.epoch if run.score.epoch is not None else 0
        self.end_epoch(epoch)
        run.ctx.crash_point("val_start", epoch)
        run.pending = (epoch, _weights(self.model))

    def on_epoch_end(self, epoch: int, logs: object = None) -> None:
        self.end_epoch(epoch)
        self.run.best_before = self.run.best_value()


class _AfterBest:
    """Between ModelCheckpoint and EarlyStopping: best selected, patience not yet."""

    def __init__(self, run: KerasRun) -> None:
        super().__init__()
        self.run = run

    def on_epoch_end(self, epoch: int, logs: object = None) -> None:
        if self.run.pending is not None:
            self.run.ctx.crash_point("val_after_save", epoch)


class _Report:
    """Last in fit's callback list: every callback has acted on the epoch's validation."""

    model: Any

    def __init__(self, run: KerasRun) -> None:
        super().__init__()
        self.run = run

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        run = self.run
        run.epochs_done = epoch + 1
        pending, run.pending = run.pending, None
        if pending is None or MONITOR not in (logs or {}):
            return
        validated, weights = pending
        run.ctx.record(Validation(
            epoch=validated, phase="epoch", score=float((logs or {})[MONITOR]),
            improved=run.best_value() is not run.best_before,
            stop=bool(self.model.stop_training), weights=weights,
            best_file=run.best_snapshot()))


class _TestEvents:
    """The test pass, on the model ``evaluate`` runs."""

    model: Any

    def __init__(self, run: KerasRun) -> None:
        super().__init__()
        self.run = run

    def on_test_begin(self, logs: object = None) -> None:
        self.run.ctx.record(TestPass(weights=_weights(self.model)))


class KerasRun:
    """One run of a scenario: builds the model, the callbacks, and fits."""

    def __init__(self, scenario: Scenario, ctx: RunContext) -> None:
        self.scenario, self.ctx = scenario, ctx
        self.get = scenario.get
        self.task: Task = scenario.task
        self.names: WeightNames = []
        self.backup_dir: Path | None = None
        self.best_cb: Any = None
        self.best_before: object = None  # ModelCheckpoint's incumbent before the epoch's
        self.pending: tuple[int, Weights] | None = None  # the validation under way
        self.epochs_done = 0
        self.final: Weights = {}
        self.planned: dict[str, int | None] = {}

    def run(self) -> None:
        keras = keras_module()
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
        task, seed = self.task, int(self.get("seed"))
        keras.backend.clear_session()
        keras.utils.set_random_seed(seed)
        splits = task_data(task, seed)
        data = {name: (splits[name].tensors[0].numpy(), splits[name].tensors[1].numpy())
                for name in ("train", "val", "test")}
        steps_per_epoch = math.ceil(task.n_train / task.batch_size)
        num_epochs = int(self.get("num_epochs"))
        model = self.build_model(keras, max(1, steps_per_epoch * max(num_epochs, 1)))
        callbacks = self.build_callbacks(keras, steps_per_epoch)
        self.planned = {"eval_loader": None,
                        "val_loader": _planned(keras, len(data["val"][0]), task.batch_size),
                        "test_loader": _planned(keras, task.n_test, task.batch_size)}
        self.ctx.record(Setup(epoch=0, train_step=0, train_len=steps_per_epoch))
        x, y = data["train"]
        model.fit(x, y, batch_size=task.batch_size, epochs=num_epochs, verbose=0,
                  shuffle=task.shuffle, validation_data=data["val"],
                  validation_freq=int(self.get("val.every_n_epochs")), callbacks=callbacks)
        self.test(keras, model, data["test"])
        best = self.best_snapshot()
        self.ctx.record(RunEnd(train_step=int(model.optimizer.iterations),
                               final_weights=self.final,
                               best_model=None if best is None else best.weights,
                               best_file=best))

    def resumes(self) -> bool:
        return bool(self.get("ckpt.resume")) and not self.get("ckpt.model_only") \
            and self.get("ckpt.load_from") is not None

    def build_model(self, keras: Any, total_steps: int) -> Any:
        """The task as a Keras-native Sequential, compiled with the scripted score metric;
        a finetune loads the checkpoint's weights before compile (a fresh optimizer)."""
        task = self.task
        layers: list[Any] = [keras.Input((task.features,))]
        if task.hidden:
            layers += [keras.layers.Dense(task.hidden, activation="tanh", name="hidden"),
                       keras.layers.Dense(task.classes, name="output")]
        else:
            layers.append(keras.layers.Dense(task.classes, name="linear"))
        model = keras.Sequential(layers, name="net")
        load_from = self.get("ckpt.load_from")
        if load_from is not None and not self.resumes():
            model.load_weights(load_from)
        self.score_type = type("Score", (_ScriptedScore, keras.metrics.Metric), {
            "scores": self.scenario.scores, "world_size": self.ctx.world_size})
        self.score: Any = self.score_type()
        model.compile(optimizer=self.optimizer(keras, total_steps),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[self.score])
        self.names = _weight_names(model)
        self.final = _weights(model)
        return model

    def optimizer(self, keras: Any, total_steps: int) -> Any:
        # the task's extra_param_group and extra_scheduler have no Keras counterpart: a Keras
        # optimizer has one learning rate for all variables, and a schedule is a stateless
        # function of the iteration count, so there is no scheduler state to register
        task = self.task
        lr: Any = task.lr
        if task.scheduler:
            lr = keras.optimizers.schedules.PolynomialDecay(
                task.lr, decay_steps=total_steps, end_learning_rate=task.lr * 0.1, power=1.0)
        accum = int(self.get("grad_accum_steps"))
        decay = float(self.get("weight_decay") or 0.0)
        common: dict[str, object] = {
            "learning_rate": lr, "global_clipnorm": self.get("grad_clip"),
            "gradient_accumulation_steps": accum if accum > 1 else None,
            "weight_decay": decay or None}
        if task.optimizer == "sgd":
            return keras.optimizers.SGD(momentum=0.9, **common)
        return keras.optimizers.Adam(**common)

    def build_callbacks(self, keras: Any, steps_per_epoch: int) -> list[Any]:
        """Keras runs callbacks in the order given to fit, so the suite's stand around Keras's
        own: one first, one between ModelCheckpoint and EarlyStopping, one last."""
        get, root, base = self.get, self.ctx.ckpt_root, keras.callbacks.Callback
        mode = "min" if get("val.minimize") else "max"
        periodic: list[Any] = []
        if get("ckpt.enable"):
            self.best_cb = keras.callbacks.ModelCheckpoint(
                root / BEST_FILE, monitor=MONITOR, mode=mode, save_best_only=True)
            every = get("ckpt.every_n_epochs")
            if every:
                periodic.append(keras.callbacks.ModelCheckpoint(
                    root / PERIODIC_PATTERN, save_freq=int(every) * steps_per_epoch))
        stopping: list[Any] = []
        patience = get("val.patience")
        if patience is not None:
            stopping.append(keras.callbacks.EarlyStopping(
                monitor=MONITOR, mode=mode, patience=int(patience),
                start_from_epoch=int(get("val.start_patience"))))
        return [_keras_object(base, _EpochEvents, self),
                *([self.best_cb] if self.best_cb else []), _keras_object(base, _AfterBest, self),
                *stopping, *periodic, *self.backup(keras), _keras_object(base, _Report, self)]

    def backup(self, keras: Any) -> list[Any]:
        """BackupAndRestore for every checkpointing run and every resume: in the run's folder,
        or in the folder of ``ckpt.load_from`` when it exists (a restarted job's)."""
        load_from = self.get("ckpt.load_from")
        if not (self.get("ckpt.enable") or self.resumes()):
            return []
        self.backup_dir = self.ctx.ckpt_root / BACKUP_DIR
        if self.resumes() and Path(load_from).parent.is_dir():
            self.backup_dir = Path(load_from).parent
        return [keras.callbacks.BackupAndRestore(
            self.backup_dir, delete_checkpoint=not self.get("ckpt.save_last"))]

    def test(self, keras: Any, model: Any, test_data: tuple[Any, Any]) -> None:
        """The test pass: the best model as ModelCheckpoint saved it, else the trained one."""
        if not self.get("test.enable"):
            return
        best_path, tested = self.best_path(), model
        if best_path is not None:
            tested = keras.models.load_model(best_path,
                                             custom_objects={"Score": self.score_type})
        tested.evaluate(*test_data, batch_size=self.task.batch_size, verbose=0,
                        callbacks=[_keras_object(keras.callbacks.Callback, _TestEvents, self)])

    def best_value(self) -> object:
        """ModelCheckpoint's incumbent: the very object it holds (a new one on improvement)."""
        return None if self.best_cb is None else self.best_cb.best

    def best_path(self) -> Path | None:
        if self.best_cb is None:
            return None
        path = self.ctx.ckpt_root / BEST_FILE
        return path if path.is_file() else None

    def best_snapshot(self) -> FileSnapshot | None:
        path = self.best_path()
        return None if path is None else snapshot(path, self.names)

    def last_epoch(self) -> int | None:
        """The epoch of the backup BackupAndRestore holds now, if any."""
        if self.backup_dir is None or not (self.backup_dir / BACKUP_WEIGHTS).is_file():
            return None
        return backup_epoch(self.backup_dir / BACKUP_WEIGHTS)
