"""The adapter for PyTorch Lightning (``trainspec check lightning``).

Lightning trains the suite's task configured as its documentation tells a user to for the
scenario's keys (``ModelCheckpoint``, ``EarlyStopping``, ``Trainer``), and a callback reports its
hooks as records. Which key maps to what, and why: ``docs/frameworks/lightning.md``.
Lightning is imported inside functions only: importing this module never imports it.
"""

from __future__ import annotations

import datetime
import functools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainspec.adapters.lightning import causes as lightning_causes
from trainspec.adapters.lightning import files as lightning_files
from trainspec.adapters.lightning.causes import REMEDIES
from trainspec.adapters.lightning.module import MONITOR, TaskModule, module_class
from trainspec.conformance.run.adapter import Capability, RunContext, chosen_remedies
from trainspec.conformance.run.files import FileRecord, describe_files
from trainspec.conformance.run.recording import (
    PendingValidation,
    snapshot_file,
    trainer_state,
)
from trainspec.conformance.run.records import (
    FileSnapshot,
    RunEnd,
    Setup,
    TestPass,
    TrainEnd,
    TrainStart,
    Weights,
)
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.task import plain_weights, task_data
from trainspec.conformance.spec.causes import Remedy, RootCause

__all__ = ["REMEDIES", "LightningAdapter"]


class LightningAdapter:
    """Runs scenarios through ``lightning.Trainer`` on one CPU process or on each rank of a
    world launched as torchrun launches one, at Lightning's defaults but for the remedies
    named (:data:`REMEDIES`)."""

    name = "lightning"

    def __init__(self, *remedies: str) -> None:
        self.applied = chosen_remedies("lightning", remedies, REMEDIES)

    def capabilities(self) -> frozenset[Capability]:
        # not declared: start_patience (EarlyStopping cannot express it), val_first (a
        # validation before fit is not seen by ModelCheckpoint or EarlyStopping, so it cannot
        # count), eval_only (needs val_first)
        return frozenset({"checkpoint", "resume", "finetune", "early_stopping", "val_every_n",
                          "test_pass", "debug", "grad_accum", "multi_rank"})

    def framework_sources(self) -> dict[str, str]:
        """Where in Lightning 2.6 the behaviour behind each failing clause comes from (read in
        the installed sources; paths relative to site-packages)."""
        return dict(lightning_causes.SOURCES)

    def root_causes(self) -> tuple[RootCause, ...]:
        return lightning_causes.ROOT_CAUSES

    def remedies(self) -> tuple[Remedy, ...]:
        return REMEDIES

    def environment(self) -> dict[str, str | None]:
        import lightning

        return {"framework": f"lightning {lightning.__version__}"}

    def describe_checkpoints(self, root: Path) -> list[FileRecord]:
        """Every file under ``root``: last.ckpt, best.ckpt and epoch=N-step=M.ckpt mapped to
        the roles "last", "best" and "epoch". ``epoch`` is Lightning's stored ``epoch`` field
        as is (trainer.current_epoch at save time) and ``step`` its ``global_step``."""
        return describe_files(root, lightning_files.role, lightning_files.describe)

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        _Run(scenario, ctx, self.applied).run()


class _Hooks:
    """Lightning's hooks, reported as records by the run (the body :func:`_callback_class`
    mixes into Lightning's ``Callback``)."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.batches = self.start_step = 0
        self.ended: int | None = None  # the epoch whose end was recorded

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.run.best_before = self.run.best_state()  # as restored by a resume

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.run.start_epoch(trainer, pl_module)
        self.batches, self.start_step, self.ended = 0, int(trainer.global_step), None

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.batches += 1

    def end_epoch(self, trainer: Any, pl_module: Any) -> None:
        """Record the epoch's end once: at its validation's start, or at its end without one."""
        epoch = int(trainer.current_epoch)
        if self.ended != epoch:
            self.ended = epoch
            self.run.end_epoch(trainer, pl_module, self.batches,
                               int(trainer.global_step) - self.start_step)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        self.end_epoch(trainer, pl_module)
        self.run.ctx.crash_point("val_start", int(trainer.current_epoch))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        logged = trainer.callback_metrics.get(MONITOR)
        self.run.pending.hold(epoch=int(trainer.current_epoch), phase="epoch",
                              score=math.nan if logged is None else float(logged),
                              weights=pl_module.net)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.end_epoch(trainer, pl_module)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.run.settle(trainer)

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self.run.ctx.record(TestPass(weights=plain_weights(pl_module.net.state_dict())))


@functools.cache
def _callback_class() -> type[_Hooks]:
    from lightning.pytorch.callbacks import Callback

    class Hooks(_Hooks, Callback):
        """The run's hooks as a Lightning callback."""

    return Hooks


class _Run:
    """One run of a scenario: the module, the callbacks, the Trainer; fit, then test."""

    def __init__(self, scenario: Scenario, ctx: RunContext,
                 remedies: frozenset[str] = frozenset()) -> None:
        self.scenario, self.ctx, self.get = scenario, ctx, scenario.get
        self.remedies = remedies  # the REMEDIES named: Lightning's defaults otherwise
        self.load_from = self.get("ckpt.load_from")
        self.resume = bool(self.get("ckpt.resume")) and not self.get("ckpt.model_only") \
            and self.load_from is not None
        self.pending = PendingValidation(ctx)
        self.best_cb: Any = None  # the ModelCheckpoint keeping the best model, if any
        self.best_before: tuple[str, str] = ("", "")
        self.final: Weights = {}
        self.loaders: dict[str, DataLoader[tuple[torch.Tensor, ...]]] = {}

    def run(self) -> None:
        seed = self.seed()
        self.loaders = self.build_loaders(task_data(self.scenario.task, seed))
        module = self.build_module()
        self.final = plain_weights(module.net.state_dict())
        trainer = self.build_trainer(self.build_callbacks())
        self.ctx.record(Setup(epoch=0, train_step=0, train_len=len(self.loaders["train"])))
        self.fit(trainer, module)
        self.test(trainer, module)
        best = self.best_snapshot()
        self.ctx.record(RunEnd(train_step=int(trainer.global_step), final_weights=self.final,
                               best_model=None if best is None else best.weights,
                               best_file=best))

    def seed(self) -> int:
        """Seed as a Lightning script does, at the start of every process (and with
        ``workers=True`` under the ``deterministic`` remedy); returns the seed."""
        import lightning

        seed = int(self.get("seed"))
        lightning.seed_everything(seed, workers="deterministic" in self.remedies, verbose=False)
        return seed

    def build_loaders(self, splits: Mapping[str, TensorDataset]
                      ) -> dict[str, DataLoader[tuple[torch.Tensor, ...]]]:
        task = self.scenario.task
        return {"train": DataLoader(splits["train"], batch_size=task.batch_size,
                                    shuffle=task.shuffle),
                "val": DataLoader(splits["val"], batch_size=task.batch_size),
                "test": DataLoader(splits["test"], batch_size=task.batch_size)}

    def build_module(self) -> TaskModule:
        """The task's module; for a finetune, with the checkpoint's weights (a fresh run)."""
        num_epochs = int(self.get("num_epochs"))
        total_steps = max(1, len(self.loaders["train"]) * max(num_epochs, 1))
        built = module_class()
        if self.load_from is not None and not self.resume:
            loader: Any = built  # LightningModule.load_from_checkpoint: untyped here
            module: TaskModule = loader.load_from_checkpoint(
                self.load_from, map_location="cpu", scenario=self.scenario, rank=self.ctx.rank,
                total_steps=total_steps)
            return module
        return built(self.scenario, self.ctx.rank, total_steps)

    def build_callbacks(self) -> list[Any]:
        """The hooks first, then ModelCheckpoint(s) and EarlyStopping as the keys ask, and the
        remedies' callbacks."""
        from lightning.pytorch.callbacks import (
            EarlyStopping,
            ModelCheckpoint,
            OnExceptionCheckpoint,
        )

        mode = "min" if self.get("val.minimize") else "max"
        callbacks: list[Any] = [_callback_class()(self)]
        if self.get("ckpt.enable"):
            root = self.ctx.ckpt_root
            self.best_cb = ModelCheckpoint(dirpath=root, filename="best", monitor=MONITOR,
                                           mode=mode, save_last=bool(self.get("ckpt.save_last")))
            callbacks.append(self.best_cb)
            if "on_exception_checkpoint" in self.remedies:  # on_exception.ckpt: role "last"
                callbacks.append(OnExceptionCheckpoint(root))
            every = self.get("ckpt.every_n_epochs")
            if every:
                callbacks.append(ModelCheckpoint(dirpath=root, every_n_epochs=every,
                                                 save_top_k=-1))
        patience = self.get("val.patience")
        if patience is not None:
            finite: dict[str, bool] = {"check_finite": False} \
                if "check_finite" in self.remedies else {}
            callbacks.append(EarlyStopping(monitor=MONITOR, mode=mode, patience=patience,
                                           **finite))
        return callbacks

    def build_trainer(self, callbacks: list[Any]) -> Any:
        import lightning

        return lightning.Trainer(**self.trainer_arguments(callbacks))

    def trainer_arguments(self, callbacks: list[Any]) -> dict[str, Any]:
        """The ``Trainer`` keywords for the scenario's keys, at Lightning's defaults but for
        the remedies named."""
        strategy: Any = "auto"
        if self.ctx.world_size > 1:  # launched as torchrun does; Lightning joins, spawns nothing
            from lightning.pytorch.strategies import DDPStrategy

            timeout = datetime.timedelta(seconds=float(self.get("ddp.timeout_s")))
            strategy = DDPStrategy(timeout=timeout)
        deterministic = {"deterministic": True} if "deterministic" in self.remedies else {}
        return dict(
            max_epochs=int(self.get("num_epochs")), strategy=strategy,
            devices=self.ctx.world_size,
            check_val_every_n_epoch=int(self.get("val.every_n_epochs")),
            num_sanity_val_steps=0, accumulate_grad_batches=int(self.get("grad_accum_steps")),
            gradient_clip_val=self.get("grad_clip"), accelerator="cpu", logger=False,
            enable_progress_bar=False, enable_model_summary=False,
            enable_checkpointing=bool(self.get("ckpt.enable")), callbacks=callbacks,
            default_root_dir=self.ctx.ckpt_root, fast_dev_run=bool(self.get("debug")),
            **deterministic)

    def fit(self, trainer: Any, module: TaskModule) -> None:
        trainer.fit(module, train_dataloaders=self.loaders["train"],
                    val_dataloaders=self.loaders["val"],
                    ckpt_path=self.load_from if self.resume else None)
        self.settle(trainer)

    def test(self, trainer: Any, module: TaskModule) -> None:
        """The test pass on the best checkpoint when there is one, else on the final weights."""
        has_best = self.best_path() is not None
        if self.get("test.enable"):
            trainer.test(module, dataloaders=self.loaders["test"],
                         ckpt_path="best" if has_best else None)

    def start_epoch(self, trainer: Any, pl_module: Any) -> None:
        self.settle(trainer)
        epoch = int(trainer.current_epoch)
        self.ctx.crash_point("train_start", epoch)
        schedulers = [c.scheduler for c in trainer.lr_scheduler_configs]
        last = snapshot_file(self.ctx.ckpt_root / "last.ckpt", lightning_files.content_of)
        self.ctx.record(TrainStart(
            epoch=epoch, train_step=int(trainer.global_step),
            state=trainer_state(pl_module.net, trainer.optimizers[0], schedulers),
            last_file_epoch=None if last is None else last.epoch,
            best_file=self.best_snapshot()))

    def end_epoch(self, trainer: Any, pl_module: Any, batches: int, steps: int) -> None:
        epoch = int(trainer.current_epoch)
        self.final = plain_weights(pl_module.net.state_dict())
        planned = self.planned(trainer)
        self.ctx.record(TrainEnd(
            epoch=epoch, train_step=int(trainer.global_step), batches=batches,
            optimizer_steps=steps, loader_len=int(trainer.num_training_batches),
            loader_batch_size=self.scenario.task.batch_size, eval_lens=planned,
            eval_batches=planned))
        self.ctx.crash_point("train_end", epoch)

    def planned(self, trainer: Any) -> dict[str, int | None]:
        """How many batches Lightning will draw from each evaluation loader: its length, cut
        to the trainer's ``limit_val_batches``/``limit_test_batches`` (fast_dev_run sets them
        to 1). Lightning has no third, eval split: ``eval_loader`` is None."""
        out: dict[str, int | None] = {"eval_loader": None}
        for name, limit in (("val", trainer.limit_val_batches),
                            ("test", trainer.limit_test_batches)):
            n = len(self.loaders[name])
            out[f"{name}_loader"] = min(n, limit) if isinstance(limit, int) else int(n * limit)
        return out

    def best_state(self) -> tuple[str, str]:
        """ModelCheckpoint's best score and path, comparable across validations."""
        cb = self.best_cb
        if cb is None:
            return "", ""
        score = cb.best_model_score
        return ("" if score is None else repr(float(score))), str(cb.best_model_path)

    def best_path(self) -> Path | None:
        path = self.best_state()[1]
        return Path(path) if path and Path(path).is_file() else None

    def best_snapshot(self) -> FileSnapshot | None:
        return snapshot_file(self.best_path(), lightning_files.content_of)

    def settle(self, trainer: Any) -> None:
        """Record the pending validation once every callback has acted on it: its
        ``improved`` is whether ModelCheckpoint's best moved, its ``stop`` the Trainer's.

        Lightning's EarlyStopping runs before its ModelCheckpoint (checkpoint callbacks go
        last): the nearest point after the save is after both, the next epoch's start or the
        end of training."""
        if not self.pending.is_pending:
            return
        now = self.best_state()
        improved, self.best_before = now != self.best_before, now
        self.pending.settle(improved=improved, stop=bool(trainer.should_stop),
                            best_file=self.best_snapshot())
