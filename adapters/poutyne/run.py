"""One run of a scenario through Poutyne's ``ModelBundle``: the bundle, its callbacks, the hooks.

The configuration and its reasons are in ``docs/frameworks/poutyne.md``. The suite's callbacks
and metric are plain classes here; :func:`_poutyne_object` mixes Poutyne's base class in when a
run starts, so Poutyne is imported inside the functions only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional
from torch.utils.data import DataLoader, default_collate

from trainspec.adapters.poutyne.files import (
    BUNDLE_DIR,
    MODEL_FILE,
    PERIODIC_NAME,
    bundle_epoch,
    load_weights,
    newest_best,
    snapshot,
)
from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.recording import trainer_state
from trainspec.conformance.run.records import (
    FileSnapshot,
    RunEnd,
    Setup,
    TestPass,
    TrainEnd,
    TrainStart,
    Validation,
    Weights,
)
from trainspec.conformance.run.scenario import CrashWhere, Scenario
from trainspec.conformance.run.task import (
    draw_host_rngs,
    plain_weights,
    pool_with_torchmetrics,
    task_data,
    task_model,
    task_optimizer,
)

__all__ = ["MONITOR", "PoutyneRun", "poutyne_module"]

# the scripted score is the epoch metric "score"; Poutyne logs it for the validation data as
# "val_score", the name ModelBundle's monitor_metric, EarlyStopping and the log use
MONITOR = "val_score"


def poutyne_module() -> Any:
    """Poutyne, imported on first use."""
    import poutyne  # type: ignore[import-untyped]

    return poutyne


def _poutyne_object(base: Any, hooks: type, *args: object, **kwargs: object) -> Any:
    """An instance of ``hooks`` with Poutyne's ``base`` mixed in after it: ``hooks`` overrides
    the base's hooks, and Poutyne calls them as it calls a subclass's."""
    return type(hooks.__name__.lstrip("_"), (hooks, base), {})(*args, **kwargs)


def _collate(batch: list[tuple[torch.Tensor, ...]]) -> Any:
    """The default collation, after one draw from python's and numpy's generators, as a
    pipeline's augmentations would (RES-4)."""
    draw_host_rngs()
    return default_collate(batch)


class _ScriptedScore:
    """The scripted score as a Poutyne epoch metric: the batches go through the model, the
    score is the scenario's for the epoch under way (``PoutyneRun.score``)."""

    def __init__(self, run: PoutyneRun) -> None:
        super().__init__()
        self.run = run

    def update(self, y_pred: object, y_true: object) -> None:
        return None  # scripted, not measured

    def compute(self) -> float:
        return self.run.score

    def reset(self) -> None:
        return None


class _ObservedModel:
    """Poutyne's Model, seen entering ``fit_generator``: where the loop starts and the
    callbacks ModelBundle hands it (its best-model callback among them)."""

    def __init__(self, run: PoutyneRun, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.observer = run

    def fit_generator(self, train_generator: Any, valid_generator: Any = None,
                      **kwargs: Any) -> Any:
        self.observer.on_fit(len(train_generator), int(kwargs.get("initial_epoch", 1)),
                             list(kwargs.get("callbacks") or []))
        return super().fit_generator(  # type: ignore[misc]
            train_generator, valid_generator, **kwargs)


class _Events:
    """First of the suite's callbacks (Poutyne runs ModelBundle's own before them): epoch
    starts, batches, and the end of training at the start of validation."""

    model: Any  # Poutyne's Callback provides model and params
    params: Any

    def __init__(self, run: PoutyneRun) -> None:
        super().__init__()
        self.run = run

    def on_epoch_begin(self, epoch_number: int, logs: object) -> None:
        self.run.epoch_begins(epoch_number - 1)  # Poutyne counts epochs from 1

    def on_train_batch_end(self, batch_number: int, logs: object) -> None:
        self.run.batches += 1

    def on_valid_begin(self, logs: object) -> None:
        self.run.validation_begins()


class _AfterSave:
    """After ModelBundle's checkpoints (best, last) and the periodic one, before
    EarlyStopping."""

    def __init__(self, run: PoutyneRun) -> None:
        super().__init__()
        self.run = run

    def on_epoch_end(self, epoch_number: int, logs: dict[str, Any]) -> None:
        self.run.after_save(epoch_number - 1, logs)


class _Report:
    """Last of all callbacks: every callback has acted on the epoch's validation."""

    def __init__(self, run: PoutyneRun) -> None:
        super().__init__()
        self.run = run

    def on_epoch_end(self, epoch_number: int, logs: dict[str, Any]) -> None:
        self.run.report(epoch_number - 1, logs)


class _TestEvents:
    """The test pass, on the weights ModelBundle.test evaluates."""

    def __init__(self, run: PoutyneRun) -> None:
        super().__init__()
        self.run = run

    def on_test_begin(self, logs: object) -> None:
        self.run.ctx.record(TestPass(weights=plain_weights(self.run.net.state_dict())))


class PoutyneRun:
    """One run of a scenario: builds the network, the Model and its ModelBundle, and trains."""

    def __init__(self, scenario: Scenario, ctx: RunContext) -> None:
        self.scenario, self.ctx = scenario, ctx
        self.get = scenario.get
        self.score = math.nan  # the scripted score of the epoch under way
        self.steps = 0  # optimizer steps taken in this process, counted by a hook
        self.start_steps = 0
        self.batches = 0
        self.epoch = -1
        self.trained: int | None = None  # the epoch whose training was recorded as ended
        self.held: Weights = {}  # the weights validated in the epoch under way
        self.recorded: int | None = None  # the epoch whose validation was recorded
        self.best_cb: Any = None  # ModelBundle's best ModelCheckpoint, or BestModelRestore
        self.best_before: object = None
        self.wrappers: list[Any] = []  # Poutyne's LR scheduler callbacks
        self.final: Weights = {}
        self.directory = ctx.ckpt_root / BUNDLE_DIR

    # ---------------------------------------------------------------- building the run

    def run(self) -> None:
        pt = poutyne_module()
        task, seed = self.scenario.task, int(self.get("seed"))
        pt.set_seeds(seed)  # Python's, numpy's and torch's generators, as Poutyne's docs do
        splits = task_data(task, seed)
        train = DataLoader(splits["train"], batch_size=task.batch_size, shuffle=task.shuffle,
                           collate_fn=_collate)
        self.val_loader = DataLoader(splits["val"], batch_size=task.batch_size)
        self.test_loader = DataLoader(splits["test"], batch_size=task.batch_size)
        bundle = self.build_bundle(pt)
        bundle.train(train, self.val_loader, epochs=int(self.get("num_epochs")), seed=seed,
                     batches_per_step=int(self.get("grad_accum_steps")),
                     lr_schedulers=self.schedulers(pt), callbacks=self.callbacks(pt, bundle))
        if self.get("test.enable"):
            self.score = math.nan
            bundle.test(self.test_loader, seed=seed,
                        callbacks=[_poutyne_object(pt.Callback, _TestEvents, self)])
        best = self.best_file()
        self.ctx.record(RunEnd(train_step=self.steps, final_weights=self.final,
                               best_model=self.best_model(), best_file=best))

    def build_bundle(self, pt: Any) -> Any:
        """The task's network and optimizer in a Model scoring the scripted metric, in a
        ModelBundle monitoring ``val_score``; a finetune loads the weights into it."""
        task = self.scenario.task
        self.net = task_model(task)
        self.optimizer = task_optimizer(task, self.net.parameters())
        self.optimizer.register_step_post_hook(self.count_step)
        score = _poutyne_object(pt.Metric, _ScriptedScore, self)
        self.model = model = _poutyne_object(pt.Model, _ObservedModel, self, self.net,
                                             self.optimizer, functional.cross_entropy,
                                             epoch_metrics=[("score", score)])
        load_from = self.get("ckpt.load_from")
        if self.resumes():
            self.directory = self.resume_directory(Path(load_from))
        bundle = pt.ModelBundle.from_model(
            str(self.directory), model, logging=bool(self.get("ckpt.enable")),
            monitor_metric=MONITOR, monitor_mode="min" if self.get("val.minimize") else "max")
        if load_from is not None and not self.resumes():
            path = Path(load_from)
            bundle.load_checkpoint(str(path / MODEL_FILE if path.is_dir() else path))
        return bundle

    def resumes(self) -> bool:
        return bool(self.get("ckpt.resume")) and not self.get("ckpt.model_only") \
            and self.get("ckpt.load_from") is not None

    def resume_directory(self, load_from: Path) -> Path:
        """The bundle directory a resume continues: ``ckpt.load_from`` itself, or the folder
        holding that file. A path that does not exist holds no bundle: the run then starts
        afresh in its own folder, as ModelBundle does in a new directory (without creating
        folders wherever that path points)."""
        if load_from.is_dir():
            return load_from
        if load_from.is_file():
            return load_from.parent
        return self.directory

    def schedulers(self, pt: Any) -> list[Any]:
        """The task's LR schedules as Poutyne's scheduler callbacks, which step once per epoch
        (the LinearLR from 1 to 0.1 is sized in epochs, not steps)."""
        task = self.scenario.task
        self.wrappers = []
        if task.scheduler:
            self.wrappers.append(pt.LinearLR(start_factor=1.0, end_factor=0.1,
                                             total_iters=max(1, int(self.get("num_epochs")))))
        if task.extra_scheduler:
            self.wrappers.append(pt.StepLR(step_size=3))
        return list(self.wrappers)

    def callbacks(self, pt: Any, bundle: Any) -> list[Any]:
        """The callbacks given to ``train``, which Poutyne runs after ModelBundle's own: the
        suite's first, the periodic checkpoint, the val_after_save point, EarlyStopping, and
        the suite's report last."""
        get, base = self.get, pt.Callback
        mode = "min" if get("val.minimize") else "max"
        out: list[Any] = [_poutyne_object(base, _Events, self)]
        if get("grad_clip") is not None:
            out.append(pt.ClipNorm(self.net.parameters(), float(get("grad_clip"))))
        every = get("ckpt.every_n_epochs")
        if get("ckpt.enable") and every:
            out.append(pt.ModelCheckpoint(bundle.get_path(PERIODIC_NAME), period=int(every)))
        out.append(_poutyne_object(base, _AfterSave, self))
        patience = get("val.patience")
        if patience is not None:
            out.append(pt.EarlyStopping(monitor=MONITOR, mode=mode, patience=int(patience)))
        return [*out, _poutyne_object(base, _Report, self)]

    # ------------------------------------------------------------------ Poutyne's hooks

    def count_step(self, optimizer: object, args: object, kwargs: object) -> None:
        self.steps += 1

    def on_fit(self, train_len: int, initial_epoch: int, callbacks: list[Any]) -> None:
        """ModelBundle has loaded what it resumes from and calls fit_generator."""
        pt = poutyne_module()
        self.train_len = train_len
        self.best_cb = next((cb for cb in callbacks if isinstance(cb, pt.BestModelRestore)
                             or (isinstance(cb, pt.ModelCheckpoint) and cb.save_best_only)),
                            None)
        self.final = plain_weights(self.net.state_dict())
        self.ctx.record(Setup(epoch=initial_epoch - 1, train_step=self.steps,
                              train_len=train_len))

    def epoch_begins(self, epoch: int) -> None:
        self.ctx.crash_point("train_start", epoch)
        self.epoch, self.batches, self.start_steps = epoch, 0, self.steps
        self.score = self.scenario.scores.pooled(epoch, self.ctx.world_size)
        if self.scenario.task.metric == "torchmetrics":
            total, count = self.scenario.scores.pairs(epoch, self.ctx.rank)
            self.score = pool_with_torchmetrics(total, count)
        self.best_before = self.best_value()
        schedulers = [w.scheduler for w in self.wrappers]
        self.ctx.record(TrainStart(
            epoch=epoch, train_step=self.steps,
            state=trainer_state(self.net, self.optimizer, schedulers),
            last_file_epoch=self.last_epoch(), best_file=self.best_file()))

    def validation_begins(self) -> None:
        epoch = self.epoch
        self.end_training(epoch)
        self.ctx.crash_point("val_start", epoch)
        self.held = plain_weights(self.net.state_dict())

    def end_training(self, epoch: int) -> None:
        """The epoch's training ended (Poutyne has taken any last accumulated step)."""
        if self.trained == epoch:
            return
        self.trained = epoch
        self.final = plain_weights(self.net.state_dict())
        lens: dict[str, int | None] = {"eval_loader": None, "val_loader": len(self.val_loader),
                                       "test_loader": len(self.test_loader)}
        self.ctx.record(TrainEnd(epoch=epoch, train_step=self.steps, batches=self.batches,
                                 optimizer_steps=self.steps - self.start_steps,
                                 loader_len=self.train_len,
                                 loader_batch_size=self.scenario.task.batch_size,
                                 eval_lens=lens, eval_batches=lens))
        self.ctx.crash_point("train_end", epoch)

    def after_save(self, epoch: int, logs: dict[str, Any]) -> None:
        """The val_after_save point: the best and last checkpoints of the epoch are written,
        EarlyStopping has not acted yet. A kill here leaves a last checkpoint of this epoch,
        so its validation is recorded first, with the stop verdict as it stands (none yet)."""
        if self.interrupted_here("val_after_save", epoch):
            self.report(epoch, logs)
        self.ctx.crash_point("val_after_save", epoch)

    def interrupted_here(self, where: CrashWhere, epoch: int) -> bool:
        crash = self.scenario.crash
        return crash is not None and crash.where == where and crash.epoch == epoch \
            and crash.rank == self.ctx.rank

    def report(self, epoch: int, logs: dict[str, Any]) -> None:
        self.end_training(epoch)  # no validation ran: the epoch's training ends here
        if self.recorded == epoch or MONITOR not in logs:
            return
        self.recorded = epoch
        self.ctx.record(Validation(
            epoch=epoch, phase="epoch", score=float(logs[MONITOR]),
            improved=self.best_value() is not self.best_before,
            stop=bool(self.model.stop_training), weights=self.held,
            best_file=self.best_file()))

    # ------------------------------------------------------------- the best model, files

    def best_value(self) -> object:
        """The best-model callback's incumbent: the very object it holds (a new one on each
        improvement)."""
        return None if self.best_cb is None else self.best_cb.current_best

    def best_model(self) -> Weights | None:
        """The best model as ModelBundle keeps it: the best ModelCheckpoint's file, or
        BestModelRestore's copy without logging; None before any improvement."""
        cb = self.best_cb
        if cb is None:
            return None
        if getattr(cb, "best_filename", None) is not None:
            content = load_weights(Path(cb.best_filename))
            return None if content is None else plain_weights(content)
        copy = getattr(cb, "best_weights", None)
        return None if copy is None else plain_weights(copy)

    def best_file(self) -> FileSnapshot | None:
        return snapshot(newest_best(self.directory)) if self.get("ckpt.enable") else None

    def last_epoch(self) -> int | None:
        return bundle_epoch(self.directory) if self.get("ckpt.enable") else None
