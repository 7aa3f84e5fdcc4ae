"""One run of a scenario through Ignite: the engines, the handlers and the suite's hooks.

The configuration and its reasons are in ``docs/frameworks/ignite.md``. Ignite is imported
inside the functions only.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional
from torch.utils.data.distributed import DistributedSampler

from trainspec.adapters.ignite.files import model_weights, newest, snapshot
from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.files import load_dict
from trainspec.conformance.run.recording import trainer_state
from trainspec.conformance.run.records import (
    FileSnapshot,
    Phase,
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
    task_optimizer,
    task_schedulers,
)
from trainspec.errors import AdapterError

__all__ = ["IgniteRun"]

MONITOR = "score"


def _score_metric(kind: str, pair_of: Callable[[], tuple[float, float]]) -> Any:
    """The validation's score as an Ignite metric: the batches go through the model, the score
    is this rank's scripted ``pair_of()`` (total, count) as total / count.

    Written as Ignite's guide to custom metrics says for distributed use (``reset`` and
    ``update`` are ``@reinit__is_reduced``); the classes are made here, where Ignite and its
    decorators are imported. ``kind`` is the task's metric: "local" leaves the score
    rank-local, "torchmetrics" pools it with torchmetrics as for every adapter, and
    "reduce_mean" has Ignite pool it: ``@sync_all_reduce("total", "count")`` sums every rank's
    total and count before ``compute`` (a NaN total makes the sum NaN; no count anywhere: NaN;
    a no-op on one process).
    """
    from ignite.metrics import Metric
    from ignite.metrics.metric import reinit__is_reduced, sync_all_reduce

    class ScriptedScore(Metric):
        @reinit__is_reduced
        def reset(self) -> None:
            self.total, self.count = 0.0, 0.0

        @reinit__is_reduced
        def update(self, output: object) -> None:
            self.total, self.count = pair_of()

        def compute(self) -> float:
            return math.nan if self.count == 0 else self.total / self.count

    class PooledScore(ScriptedScore):
        @sync_all_reduce("total", "count")
        def compute(self) -> float:
            return super().compute()

    class TorchmetricsScore(ScriptedScore):
        def compute(self) -> float:
            return pool_with_torchmetrics(self.total, self.count)

    chosen = {"local": ScriptedScore, "torchmetrics": TorchmetricsScore}.get(kind, PooledScore)
    return chosen()


def _memory_saver(store: dict[str, Mapping[str, object]]) -> Any:
    """A save handler keeping the best Checkpoint's files in ``store``, as copies (Ignite
    documents any callable as a save handler; a BaseSaveHandler also gets ``remove`` calls)."""
    from ignite.handlers.checkpoint import BaseSaveHandler

    class MemorySaver(BaseSaveHandler):
        def __call__(self, checkpoint: Mapping[str, Any], filename: str,
                     metadata: Mapping[str, Any] | None = None) -> None:
            store[filename] = copy.deepcopy(dict(checkpoint))

        def remove(self, filename: str) -> None:
            store.pop(filename, None)

    return MemorySaver()


class IgniteRun:
    """One run of a scenario: builds the engines and handlers, and runs the trainer."""

    def __init__(self, scenario: Scenario, ctx: RunContext,
                 remedies: frozenset[str] = frozenset()) -> None:
        self.scenario, self.ctx = scenario, ctx
        self.remedies = remedies  # the REMEDIES named: Ignite's defaults otherwise
        self.get = scenario.get
        self.pair = (math.nan, 1.0)  # this rank's scripted (total, count) of the validation
        self.phase: Phase = "epoch"  # of the validation under way
        self.saved_best = False  # the best Checkpoint saved during the validation under way
        self.memory: dict[str, Mapping[str, object]] | None = None  # ckpt.enable=false
        self.steps = 0  # optimizer steps taken, counted by a hook on the optimizer
        self.start_steps = 0
        self.batches = 0
        self.schedulers: list[torch.optim.lr_scheduler.LRScheduler] = []

    def run(self) -> None:
        import ignite.distributed as idist
        from ignite.engine import create_supervised_evaluator
        from ignite.utils import manual_seed

        manual_seed(int(self.get("seed")))
        train_loader = self.build_loaders()
        num_epochs = int(self.get("num_epochs"))
        if self.get("grad_clip") is not None:
            raise AdapterError("grad_clip: Ignite 0.5.5's create_supervised_trainer and "
                               "supervised_training_step take no gradient clipping argument")
        to_save = self.build_trainer(max(1, len(train_loader) * max(num_epochs, 1)))
        self.attach_events(train_loader)
        self.attach_validation(to_save)
        self.load(self.attach_checkpoints(to_save))

        self.final = plain_weights(self.net.state_dict())
        self.ctx.record(Setup(epoch=0, train_step=0, train_len=len(train_loader)))
        self.trainer.run(train_loader, max_epochs=num_epochs)
        self.final = plain_weights(self.net.state_dict())
        if self.ctx.world_size > 1:
            idist.barrier()  # the best file rank 0 wrote is complete before any rank loads it
        self.test(create_supervised_evaluator(self.model, device=self.device))
        self.ctx.record(RunEnd(train_step=int(self.trainer.state.iteration),
                               final_weights=self.final, best_model=self.best_model(),
                               best_file=self.best_snapshot()))

    def build_loaders(self) -> Any:
        """The task's splits as loaders: plain DataLoaders on one process; on several a
        DistributedSampler each, and the global batch size split over the ranks."""
        import ignite.distributed as idist

        task = self.scenario.task
        splits = task_data(task, int(self.get("seed")))
        train_loader: Any = idist.auto_dataloader(  # a DataLoader (XLA: its own loader)
            splits["train"], batch_size=task.batch_size, shuffle=task.shuffle)
        self.val_loader: Any = idist.auto_dataloader(
            splits["val"], batch_size=task.batch_size, shuffle=False)
        self.test_loader: Any = idist.auto_dataloader(
            splits["test"], batch_size=task.batch_size, shuffle=False)
        self.device = idist.device()
        self.train_batch_size = train_loader.batch_size
        return train_loader

    def build_trainer(self, total_steps: int) -> dict[str, object]:
        """The model, optimizer, trainer engine and LR schedule handlers; returns what the last
        Checkpoint saves."""
        import ignite.distributed as idist
        from ignite.engine import Events, create_supervised_trainer
        from ignite.handlers.param_scheduler import LRScheduler

        task = self.scenario.task
        self.net = task_model(task)  # the task's model; self.model is what Ignite trains
        self.model = model = idist.auto_model(self.net)  # DistributedDataParallel on >1 rank
        self.optim = optimizer = idist.auto_optim(task_optimizer(task, self.net.parameters()))
        optimizer.register_step_post_hook(self.count_step)
        self.trainer = trainer = create_supervised_trainer(
            model, optimizer, functional.cross_entropy, device=self.device,
            **self.trainer_arguments())
        to_save: dict[str, object] = {"model": model, "optimizer": optimizer}
        self.schedulers = task_schedulers(task, optimizer, total_steps)
        for i, scheduler in enumerate(self.schedulers):
            handler = LRScheduler(scheduler)
            trainer.add_event_handler(Events.ITERATION_STARTED, handler)
            to_save["lr_scheduler" if i == 0 else f"lr_scheduler{i + 1}"] = handler
        to_save["trainer"] = trainer
        return to_save

    def trainer_arguments(self) -> dict[str, Any]:
        """``create_supervised_trainer``'s keywords beyond the model, optimizer, loss and
        device: at Ignite's defaults but for the remedies named."""
        args: dict[str, Any] = {"gradient_accumulation_steps": int(self.get("grad_accum_steps"))}
        if "deterministic" in self.remedies:
            args["deterministic"] = True
        return args

    def attach_events(self, train_loader: Any) -> None:
        """The suite's own handlers, first on each trainer event: they observe what Ignite
        does next."""
        from ignite.engine import Events

        trainer = self.trainer
        trainer.add_event_handler(Events.EPOCH_STARTED, self.train_start)
        sampler = train_loader.sampler
        if isinstance(sampler, DistributedSampler):  # as setup_common_training_handlers does
            trainer.add_event_handler(Events.EPOCH_STARTED,
                                      lambda engine: sampler.set_epoch(engine.state.epoch - 1))
        trainer.add_event_handler(Events.ITERATION_COMPLETED, self.count_batch)
        trainer.add_event_handler(Events.EPOCH_COMPLETED, self.train_end)

    def attach_validation(self, to_save: dict[str, object]) -> None:
        """The evaluator, its score metric, the best Checkpoint and EarlyStopping on its
        COMPLETED (in that order, with the suite's crash point between the two), and the
        trainer's events that run it."""
        from ignite.engine import Events, create_supervised_evaluator
        from ignite.handlers import Checkpoint, EarlyStopping, global_step_from_engine
        from ignite.handlers.checkpoint import CheckpointEvents

        get, trainer = self.get, self.trainer
        score = _score_metric(self.scenario.task.metric, lambda: self.pair)
        self.evaluator = evaluator = create_supervised_evaluator(
            self.model, metrics={MONITOR: score}, device=self.device)
        evaluator.register_events(*CheckpointEvents)
        sign = -1.0 if get("val.minimize") else 1.0
        score_function = Checkpoint.get_default_score_fn(MONITOR, score_sign=sign)
        self.best_handler = Checkpoint(
            {"model": self.model}, self.best_saver(), filename_prefix="best",
            score_function=score_function, score_name=MONITOR, n_saved=1,
            global_step_transform=global_step_from_engine(trainer))
        evaluator.add_event_handler(Events.COMPLETED, self.best_handler)
        evaluator.add_event_handler(CheckpointEvents.SAVED_CHECKPOINT, self.on_saved)
        evaluator.add_event_handler(Events.COMPLETED, self.after_save)
        patience = get("val.patience")
        if patience is not None:
            stopper = EarlyStopping(patience=int(patience), score_function=score_function,
                                    trainer=trainer)
            evaluator.add_event_handler(Events.COMPLETED, stopper)
            to_save["early_stopping"] = stopper
        to_save["best_checkpoint"] = self.best_handler
        evaluator.add_event_handler(Events.COMPLETED, self.record_validation)
        if get("val.first"):
            trainer.add_event_handler(Events.STARTED, self.validate, "first")
        trainer.add_event_handler(Events.EPOCH_COMPLETED(every=int(get("val.every_n_epochs"))),
                                  self.validate, "epoch")

    def best_saver(self) -> Any:
        """Where the best Checkpoint saves: the run's folder, or memory without ckpt.enable."""
        from ignite.handlers import DiskSaver

        if self.get("ckpt.enable"):
            return DiskSaver(self.ctx.ckpt_root, require_empty=False)
        self.memory = {}
        return _memory_saver(self.memory)

    def attach_checkpoints(self, to_save: dict[str, object]) -> dict[str, object]:
        """The last and periodic Checkpoints on the trainer's EPOCH_COMPLETED, after the
        validation; returns what a resume loads."""
        from ignite.engine import Events
        from ignite.handlers import Checkpoint, DiskSaver

        get, trainer = self.get, self.trainer
        to_load = dict(to_save)
        if not get("ckpt.enable"):
            return to_load
        if get("ckpt.save_last"):
            last = Checkpoint(to_save, DiskSaver(self.ctx.ckpt_root, require_empty=False),
                              n_saved=1, include_self=True)
            trainer.add_event_handler(Events.EPOCH_COMPLETED, last)
            to_load["checkpointer"] = last
        every = get("ckpt.every_n_epochs")
        if every:
            trainer.add_event_handler(Events.EPOCH_COMPLETED(every=int(every)), Checkpoint(
                to_save, DiskSaver(self.ctx.ckpt_root, require_empty=False),
                filename_prefix="epoch", n_saved=None))
        return to_load

    def load(self, to_load: dict[str, object]) -> None:
        """Resume: every saved object back; finetune: the model's weights into a fresh run."""
        from ignite.handlers import Checkpoint

        get = self.get
        load_from = get("ckpt.load_from")
        if load_from is None:
            return
        if not get("ckpt.resume") or get("ckpt.model_only"):
            Checkpoint.load_objects(to_load={"model": self.model}, checkpoint=load_from)
            return
        # loaded first, as Ignite's resume guide does, so that the last Checkpoint restores
        # its own file list only from its own files (a periodic file holds none)
        checkpoint = torch.load(load_from, map_location="cpu", weights_only=True)
        if "checkpointer" not in checkpoint:
            to_load.pop("checkpointer", None)
        Checkpoint.load_objects(to_load=to_load, checkpoint=checkpoint)

    def test(self, tester: Any) -> None:
        """The test pass, on the best checkpoint's weights when the best Checkpoint saved one."""
        from ignite.engine import Events
        from ignite.handlers import Checkpoint

        if not self.get("test.enable"):
            return
        best = self.best_checkpoint()
        if best is not None:
            Checkpoint.load_objects(to_load={"model": self.model}, checkpoint=best)
        tester.add_event_handler(Events.STARTED, self.record_test)
        tester.run(self.test_loader)

    # the trainer's events

    def count_step(self, optimizer: object, args: object, kwargs: object) -> None:
        self.steps += 1

    def count_batch(self, engine: Any) -> None:
        self.batches += 1

    def train_start(self, engine: Any) -> None:
        epoch = int(engine.state.epoch) - 1  # Ignite counts epochs from 1
        self.ctx.crash_point("train_start", epoch)
        self.batches, self.start_steps = 0, self.steps
        # the first schedule only, as the suite has always compared it for Ignite
        state = trainer_state(self.net, self.optim, self.schedulers[:1])
        last = snapshot(newest(self.ctx.ckpt_root, "last"))
        self.ctx.record(TrainStart(epoch=epoch, train_step=int(engine.state.iteration),
                                   state=state, last_file_epoch=None if last is None
                                   else last.epoch, best_file=self.best_snapshot()))

    def train_end(self, engine: Any) -> None:
        epoch = int(engine.state.epoch) - 1
        self.final = plain_weights(self.net.state_dict())
        # Ignite draws every batch of a loader it runs on; there is no third, eval split
        lens: dict[str, int | None] = {"eval_loader": None, "val_loader": len(self.val_loader),
                                       "test_loader": len(self.test_loader)}
        self.ctx.record(TrainEnd(epoch=epoch, train_step=int(engine.state.iteration),
                                 batches=self.batches,
                                 optimizer_steps=self.steps - self.start_steps,
                                 loader_len=int(engine.state.epoch_length),
                                 loader_batch_size=self.train_batch_size,
                                 eval_lens=lens, eval_batches=lens))
        self.ctx.crash_point("train_end", epoch)

    def validate(self, engine: Any, phase: Phase) -> None:
        epoch = None if phase == "first" else engine.state.epoch - 1
        if epoch is not None:
            self.ctx.crash_point("val_start", epoch)
        self.phase, self.saved_best = phase, False
        self.pair = self.scenario.scores.pairs(epoch, self.ctx.rank)
        self.evaluator.run(self.val_loader)

    # the evaluator's events

    def on_saved(self, engine: Any) -> None:
        self.saved_best = True

    def after_save(self, engine: Any) -> None:
        if self.phase == "epoch":
            self.ctx.crash_point("val_after_save", int(self.trainer.state.epoch) - 1)

    def record_validation(self, evaluator: Any) -> None:
        """Last on the evaluator's COMPLETED: the best Checkpoint and EarlyStopping have
        acted, so ``improved`` and ``stop`` are Ignite's verdicts."""
        trainer_epoch = int(self.trainer.state.epoch)
        self.ctx.record(Validation(
            epoch=trainer_epoch if self.phase == "first" else trainer_epoch - 1,
            phase=self.phase, score=float(evaluator.state.metrics[MONITOR]),
            improved=self.saved_best, stop=bool(self.trainer.should_terminate),
            weights=plain_weights(self.net.state_dict()), best_file=self.best_snapshot()))

    def record_test(self, tester: Any) -> None:
        self.ctx.record(TestPass(weights=plain_weights(self.net.state_dict())))

    # the best model, as the best Checkpoint keeps it

    def best_checkpoint(self) -> Path | Mapping[str, object] | None:
        """The best Checkpoint's current file, or its in-memory copy; None before any save."""
        handler = self.best_handler
        if handler.last_checkpoint is None:
            return None
        if self.memory is not None:
            return self.memory.get(str(handler.last_checkpoint))
        path = Path(handler.last_checkpoint)
        return path if path.is_file() else None

    def best_snapshot(self) -> FileSnapshot | None:
        best = self.best_checkpoint()
        return snapshot(best) if isinstance(best, Path) else None

    def best_model(self) -> Weights | None:
        best = self.best_checkpoint()
        if best is None:
            return None
        if isinstance(best, Path):
            content, _ = load_dict(best)
            return None if content is None else model_weights(content)
        return model_weights(best)
