"""One run of a scenario through a skorch ``NeuralNetClassifier``: the net, its callbacks, and
the suite's hooks among them.

The configuration and its reasons are in ``docs/frameworks/skorch.md``. skorch is imported
inside the functions only: the suite's hooks are plain classes here, with skorch's
``Callback`` mixed in when a run starts (:func:`_callback`).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import torch

from trainspec.adapters.skorch.files import (
    BEST_DIR,
    LAST_DIR,
    PERIODIC_DIR,
    PERIODIC_FILES,
    checkpoint_args,
    history_steps,
    params_file,
    seen_as,
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
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.task import (
    plain_weights,
    pool_with_torchmetrics,
    task_data,
    task_model,
)
from trainspec.errors import AdapterError

__all__ = ["MONITOR", "SkorchRun"]

MONITOR = "score"  # the EpochScoring's name: skorch records "score" and "score_best"


def _callback(hooks: type, *args: object) -> Any:
    """An instance of ``hooks`` with skorch's ``Callback`` mixed in after it: ``hooks``
    overrides the base's no-op methods, and skorch calls them as it calls any callback's."""
    from skorch.callbacks import Callback  # type: ignore[import-untyped]

    return type(hooks.__name__.lstrip("_"), (hooks, Callback), {})(*args)


def _due(net: Any, every: int) -> bool:
    """The periodic Checkpoint's monitor: the zero-based epoch just ended is on the interval
    (skorch's history counts epochs from 1)."""
    return (len(net.history) - 1) % every == 0


def _rows(net: Any) -> list[object]:
    return list(net.history.to_list())


class _Events:
    """First among the suite's callbacks (after LoadInitState): the run's set-up, each epoch's
    start, the end of its training (the first validation batch), and batch counts."""

    def __init__(self, run: SkorchRun) -> None:
        self.run_ = run

    def on_train_begin(self, net: Any, **kwargs: Any) -> None:  # skorch passes X=, y=
        self.run_.begin(net, kwargs.get("X"), kwargs.get("y"))

    def on_epoch_begin(self, net: Any, dataset_train: Any = None, dataset_valid: Any = None,
                       **kwargs: Any) -> None:
        self.run_.epoch_begin(net, dataset_train, dataset_valid)

    def on_batch_begin(self, net: Any, batch: Any = None, training: Any = None,
                       **kwargs: Any) -> None:
        if not training and self.run_.train_end(net):
            self.run_.ctx.crash_point("val_start", len(net.history) - 1)

    def on_batch_end(self, net: Any, batch: Any = None, training: Any = None,
                     **kwargs: Any) -> None:
        if training:
            self.run_.batches += 1

    def on_epoch_end(self, net: Any, **kwargs: Any) -> None:
        self.run_.train_end(net)  # an epoch without validation batches


class _AfterBest:
    """Right after the best Checkpoint (the score and its best flag recorded, the best model
    saved), before the last and periodic Checkpoints and EarlyStopping."""

    def __init__(self, run: SkorchRun) -> None:
        self.run_ = run

    def on_epoch_end(self, net: Any, **kwargs: Any) -> None:
        self.run_.hold(net)


class _Report:
    """Last: every callback has acted on the epoch's score. EarlyStopping stops by raising
    KeyboardInterrupt from its on_epoch_end, which skorch's partial_fit catches: the callbacks
    after it never see that epoch's end, so a validation still held at on_train_end is the one
    EarlyStopping stopped on."""

    def __init__(self, run: SkorchRun) -> None:
        self.run_ = run

    def on_epoch_end(self, net: Any, **kwargs: Any) -> None:
        self.run_.settle(stop=False)

    def on_train_end(self, net: Any, **kwargs: Any) -> None:
        self.run_.settle(stop=True)


class SkorchRun:
    """One run of a scenario: builds the net and its callbacks, fits, tests."""

    def __init__(self, scenario: Scenario, ctx: RunContext) -> None:
        self.scenario, self.ctx = scenario, ctx
        self.get, self.task = scenario.get, scenario.task
        self.best_cp: Any = None
        self.best_seen: tuple[object, FileSnapshot | None] | None = None
        self.lr_callbacks: list[Any] = []
        self.pending: tuple[int, float, bool, Weights] | None = None  # the validation held
        self.steps = self.start_steps = self.batches = 0  # optimizer steps, by a hook
        self.ended: int | None = None  # the epoch whose training end was recorded
        self.lens: dict[str, int] = {}
        self.final: Weights = {}

    def resumes(self) -> bool:
        return bool(self.get("ckpt.resume")) and not self.get("ckpt.model_only") \
            and self.get("ckpt.load_from") is not None

    def run(self) -> None:
        import numpy

        task, seed = self.task, int(self.get("seed"))
        if int(self.get("grad_accum_steps")) != 1:
            raise AdapterError("grad_accum_steps: skorch has no gradient accumulation option "
                               "(its FAQ: 'There is no direct option to turn on gradient "
                               "accumulation'); the adapter does not declare grad_accum")
        numpy.random.seed(seed)  # as skorch's FAQ seeds, before the net is built
        torch.manual_seed(seed)
        splits = {name: data.tensors for name, data in task_data(task, seed).items()}
        net = self.build_net(splits["val"])
        load_from = self.get("ckpt.load_from")
        if load_from is not None and not self.resumes():
            # a finetune: the weights only, into an initialized net, then training goes on
            # from them with a fresh optimizer (partial_fit does not re-initialize)
            net.initialize()
            net.load_params(f_params=str(params_file(str(load_from))))
            net.partial_fit(*splits["train"])
        else:
            net.fit(*splits["train"])
        self.final = plain_weights(net.module_.state_dict())
        best = self.best_snapshot()
        train_step = history_steps(_rows(net))
        self.test(net, splits["test"][0])
        self.ctx.record(RunEnd(train_step=train_step, final_weights=self.final,
                               best_model=None if best is None else best.weights,
                               best_file=best))

    def build_net(self, val: tuple[torch.Tensor, ...]) -> Any:
        from skorch import NeuralNetClassifier  # type: ignore[import-untyped]
        from skorch.dataset import Dataset  # type: ignore[import-untyped]
        from skorch.helper import predefined_split  # type: ignore[import-untyped]

        task = self.task
        options: dict[str, Any] = {}
        if task.optimizer == "sgd":
            options["optimizer__momentum"] = 0.9
        if task.extra_param_group:  # the last tensor at half the LR, as task_param_groups
            last = [name for name, _ in task_model(task).named_parameters()][-1]
            options["optimizer__param_groups"] = [(last, {"lr": task.lr / 2})]
        if self.get("weight_decay"):
            options["optimizer__weight_decay"] = float(self.get("weight_decay"))
        return NeuralNetClassifier(
            task_model(task), criterion=torch.nn.CrossEntropyLoss,
            optimizer=torch.optim.SGD if task.optimizer == "sgd" else torch.optim.Adam,
            lr=task.lr, max_epochs=int(self.get("num_epochs")), batch_size=task.batch_size,
            iterator_train__shuffle=task.shuffle, train_split=predefined_split(Dataset(*val)),
            callbacks=self.callbacks(), verbose=0, **options)

    def callbacks(self) -> list[tuple[str, Any]]:
        """skorch calls callbacks in the order of this list, after its defaults: what depends
        on the loaded history after LoadInitState, the suite's hooks around skorch's own."""
        from skorch.callbacks import (
            Checkpoint,
            EarlyStopping,
            EpochScoring,
            LoadInitState,
        )

        get, root = self.get, self.ctx.ckpt_root
        out: list[tuple[str, Any]] = []
        if self.resumes():
            out.append(("load_state", LoadInitState(Checkpoint(**checkpoint_args(str(get(
                "ckpt.load_from")))))))
        out += [("trainspec_events", _callback(_Events, self)), *self.training_callbacks(),
                ("score", EpochScoring(self.scripted_score, lower_is_better=bool(
                    get("val.minimize")), name=MONITOR))]
        if get("ckpt.enable"):
            self.best_cp = Checkpoint(monitor=f"{MONITOR}_best", dirname=str(root / BEST_DIR))
            out.append(("checkpoint", self.best_cp))
        out.append(("trainspec_after_best", _callback(_AfterBest, self)))
        out += self.file_callbacks()
        patience = get("val.patience")
        if patience is not None:
            out.append(("early_stopping", EarlyStopping(
                monitor=MONITOR, patience=int(patience),
                lower_is_better=bool(get("val.minimize")))))
        out.append(("trainspec_report", _callback(_Report, self)))
        return out

    def training_callbacks(self) -> list[tuple[str, Any]]:
        """The task's LR schedules, stepped after every batch, and gradient clipping."""
        from skorch.callbacks import (
            GradientNormClipping,
            LRScheduler,
        )

        task = self.task
        per_epoch = math.ceil(task.n_train / task.batch_size)
        total = max(1, per_epoch * max(int(self.get("num_epochs")), 1))
        if task.scheduler:
            self.lr_callbacks.append(LRScheduler(
                policy=torch.optim.lr_scheduler.LinearLR, step_every="batch",
                start_factor=1.0, end_factor=0.1, total_iters=total))
        if task.extra_scheduler:
            self.lr_callbacks.append(LRScheduler(
                policy=torch.optim.lr_scheduler.StepLR, step_every="batch", step_size=3))
        out: list[tuple[str, Any]] = [
            (f"lr_scheduler{'' if i == 0 else i + 1}", cb)
            for i, cb in enumerate(self.lr_callbacks)]
        if self.get("grad_clip") is not None:
            out.append(("gradient_clipping", GradientNormClipping(
                gradient_clip_value=float(self.get("grad_clip")))))
        return out

    def file_callbacks(self) -> list[tuple[str, Any]]:
        """The last checkpoint after every epoch, and the periodic ones, each in its folder."""
        from skorch.callbacks import Checkpoint

        get, root = self.get, self.ctx.ckpt_root
        out: list[tuple[str, Any]] = []
        if not get("ckpt.enable"):
            return out
        if get("ckpt.save_last"):
            out.append(("last_checkpoint", Checkpoint(
                monitor=None, dirname=str(root / LAST_DIR), event_name="event_last")))
        every = get("ckpt.every_n_epochs")
        if every:
            out.append(("periodic_checkpoint", Checkpoint(
                monitor=functools.partial(_due, every=int(every)),
                dirname=str(root / PERIODIC_DIR), event_name="event_periodic",
                **PERIODIC_FILES)))
        return out

    def scripted_score(self, net: Any, x: Any = None, y: Any = None) -> float:
        """The EpochScoring's scoring function: this rank's scripted (total, count) for the
        epoch under validation, as the task's metric pools it."""
        total, count = self.scenario.scores.pairs(len(net.history) - 1, self.ctx.rank)
        if self.task.metric == "torchmetrics":
            return pool_with_torchmetrics(total, count)
        return math.nan if count == 0 else total / count

    # the hooks' side

    def begin(self, net: Any, x: Any, y: Any) -> None:
        net.optimizer_.register_step_post_hook(self.count_step)
        self.lens["train"] = len(net.get_iterator(net.get_dataset(x, y), training=True))
        self.ctx.record(Setup(epoch=len(net.history), train_step=history_steps(_rows(net)),
                              train_len=self.lens["train"]))

    def count_step(self, optimizer: object, args: object, kwargs: object) -> None:
        self.steps += 1

    def epoch_begin(self, net: Any, dataset_train: Any, dataset_valid: Any) -> None:
        epoch = len(net.history) - 1  # skorch's on_epoch_begin appended this epoch's row
        self.ctx.crash_point("train_start", epoch)
        self.batches, self.start_steps, self.ended = 0, self.steps, None
        self.lens["train"] = len(net.get_iterator(dataset_train, training=True))
        self.lens["val"] = 0 if dataset_valid is None else len(net.get_iterator(dataset_valid))
        schedulers = [cb.lr_scheduler_ for cb in self.lr_callbacks]
        last = seen_as(self.ctx.ckpt_root / LAST_DIR) if self.get("ckpt.enable") else None
        self.ctx.record(TrainStart(
            epoch=epoch, train_step=history_steps(_rows(net)[:-1]),
            state=trainer_state(net.module_, net.optimizer_, schedulers),
            last_file_epoch=None if last is None else last[2],
            best_file=self.best_snapshot()))

    def train_end(self, net: Any) -> bool:
        """Record the end of the epoch's training once; whether it was recorded now."""
        epoch = len(net.history) - 1
        if self.ended == epoch:
            return False
        self.ended = epoch
        self.final = plain_weights(net.module_.state_dict())
        test = math.ceil(self.task.n_test / self.task.batch_size)
        lens: dict[str, int | None] = {"eval_loader": None, "val_loader": self.lens["val"],
                                       "test_loader": test}
        self.ctx.record(TrainEnd(epoch=epoch, train_step=history_steps(_rows(net)),
                                 batches=self.batches,
                                 optimizer_steps=self.steps - self.start_steps,
                                 loader_len=self.lens["train"],
                                 loader_batch_size=int(net.batch_size), eval_lens=lens,
                                 eval_batches=lens))
        self.ctx.crash_point("train_end", epoch)
        return True

    def hold(self, net: Any) -> None:
        """The epoch's validation, scored and (with checkpoints on) saved if best."""
        epoch, row = len(net.history) - 1, net.history[-1]
        if MONITOR not in row:
            return
        self.pending = (epoch, float(row[MONITOR]), bool(row.get(f"{MONITOR}_best")),
                        plain_weights(net.module_.state_dict()))
        self.ctx.crash_point("val_after_save", epoch)

    def settle(self, *, stop: bool) -> None:
        if self.pending is None:
            return
        epoch, score, improved, weights = self.pending
        self.pending = None
        self.ctx.record(Validation(epoch=epoch, phase="epoch", score=score, improved=improved,
                                   stop=stop, weights=weights, best_file=self.best_snapshot()))

    # the best model, as the best Checkpoint keeps it

    def best_path(self) -> Path | None:
        path = self.ctx.ckpt_root / BEST_DIR
        return path if self.best_cp is not None and (path / "params.pt").is_file() else None

    def best_snapshot(self) -> FileSnapshot | None:
        """The best checkpoint as seen now, read again only when it changed."""
        path = self.best_path()
        seen = None if path is None else seen_as(path)
        if seen is None:
            return None
        if self.best_seen is None or self.best_seen[0] != seen:
            self.best_seen = (seen, snapshot(path))
        return self.best_seen[1]

    def test(self, net: Any, x_test: torch.Tensor) -> None:
        """The test pass: the best checkpoint loaded as skorch's docs load one to predict
        (``net.load_params(checkpoint=cp)``) when it saved one, then ``predict``."""
        if not self.get("test.enable"):
            return
        if self.best_path() is not None:
            net.load_params(checkpoint=self.best_cp)
        self.ctx.record(TestPass(weights=plain_weights(net.module_.state_dict())))
        net.predict(x_test)
