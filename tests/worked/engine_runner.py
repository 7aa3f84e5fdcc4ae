"""A trainer in the shape of a training engine's runner (the shape of open-mmlab/mmengine's
``Runner``, ``EpochBasedTrainLoop``, ``CheckpointHook`` and ``EarlyStoppingHook``), written anew
from a reading of their documented behaviour, not copied.

A runner object: a train loop object that calls hooks sorted by priority; a process-wide message
hub registered under the run's name (a timestamp by default); a checkpoint hook that writes
``epoch_<n>.pth`` in ``after_train_epoch`` (before that epoch's validation) recording in
``meta`` the *next* epoch, keeps the best file as ``best_score_epoch_<n>.pth`` (deleting the
previous one) and writes ``last_checkpoint`` naming the newest file; an early-stopping hook that
stops on a NaN at once, counts gains under ``min_delta`` (0.1 by default) as no improvement,
and keeps its counter in itself (it is never saved). Its checkpoints hold framework objects:
the message hub's ``HistoryBuffer`` values, rebuilt on unpickling through a bound class method
(``getattr``).

Changed from the original: its loader passes ``weights_only=False`` (the original leaves
``torch.load`` at its default, which torch 2.6 made weights-only, so that it cannot load its
own files). Left out: configs, registries of models and datasets, distributed wrappers,
visualizers and the logger.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import torch

PRIORITY = {"HIGHEST": 0, "VERY_HIGH": 10, "HIGH": 30, "NORMAL": 50, "LOW": 70, "VERY_LOW": 90,
            "LOWEST": 100}


class HistoryBuffer:
    """A logged scalar's history (the message hub's values)."""

    def __init__(self, values: Iterable[float] = ()) -> None:
        self.values = list(values)

    @classmethod
    def rebuild(cls, values: list[float]) -> HistoryBuffer:
        return cls(values)

    def __reduce__(self) -> tuple[Any, tuple[list[float]]]:
        return (HistoryBuffer.rebuild, (self.values,))  # a bound method: getattr on unpickling


class MessageHub:
    """Process-wide hubs by name; the newest is the current one."""

    _instances: ClassVar[dict[str, MessageHub]] = {}

    def __init__(self) -> None:
        self.log_scalars: dict[str, HistoryBuffer] = {}
        self.runtime_info: dict[str, Any] = {}

    @classmethod
    def get_instance(cls, name: str) -> MessageHub:
        hub = cls._instances.setdefault(name, cls())  # the same name: the same hub
        cls._instances[name] = cls._instances.pop(name)  # newest last
        return hub

    def update_scalar(self, key: str, value: float) -> None:
        self.log_scalars.setdefault(key, HistoryBuffer()).values.append(value)

    def state_dict(self) -> dict[str, Any]:
        return {"log_scalars": dict(self.log_scalars), "runtime_info": dict(self.runtime_info)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.log_scalars, self.runtime_info = state["log_scalars"], state["runtime_info"]


class Hook:
    """Every event is a no-op unless a hook overrides it."""

    priority = "NORMAL"

    def before_train(self, runner: Runner) -> None: ...
    def before_train_epoch(self, runner: Runner) -> None: ...
    def after_train_epoch(self, runner: Runner) -> None: ...
    def before_val_epoch(self, runner: Runner) -> None: ...
    def after_val_epoch(self, runner: Runner, metrics: dict[str, float]) -> None: ...
    def after_train(self, runner: Runner) -> None: ...
    def after_test_epoch(self, runner: Runner, metrics: dict[str, float]) -> None: ...


class CheckpointHook(Hook):
    priority = "VERY_LOW"

    def __init__(self, interval: int = 1, save_best: str | None = None, rule: str = "greater"):
        self.interval, self.save_best, self.rule = interval, save_best, rule

    def after_train_epoch(self, runner: Runner) -> None:
        if (runner.epoch + 1) % self.interval == 0 or runner.epoch + 1 == runner.max_epochs:
            path = runner.save_checkpoint(f"epoch_{runner.epoch + 1}.pth")
            (runner.work_dir / "last_checkpoint").write_text(str(path))

    def after_val_epoch(self, runner: Runner, metrics: dict[str, float]) -> None:
        if self.save_best is None:
            return
        score, info = metrics[self.save_best], runner.message_hub.runtime_info
        best = info.get("best_score", -math.inf if self.rule == "greater" else math.inf)
        if (score > best) if self.rule == "greater" else (score < best):
            old = info.get("best_ckpt")
            if old and Path(old).exists():
                Path(old).unlink()
            info["best_score"] = score
            info["best_ckpt"] = str(runner.save_checkpoint(
                f"best_{self.save_best}_epoch_{runner.epoch + 1}.pth"))


class EarlyStoppingHook(Hook):
    priority = "LOW"

    def __init__(self, monitor: str, rule: str = "greater", min_delta: float = 0.1,
                 patience: int = 5) -> None:
        self.monitor, self.rule, self.min_delta, self.patience = monitor, rule, min_delta, patience
        self.best_score, self.wait_count = (-math.inf if rule == "greater" else math.inf), 0

    def after_val_epoch(self, runner: Runner, metrics: dict[str, float]) -> None:
        score = metrics[self.monitor]
        if not math.isfinite(score):
            runner.train_loop.stop_training = True  # "monitored metric is infinite or NaN"
            return
        better = (score - self.min_delta > self.best_score) if self.rule == "greater" else \
            (score + self.min_delta < self.best_score)
        if better:
            self.best_score, self.wait_count = score, 0
        else:
            self.wait_count += 1
            if self.wait_count >= self.patience:
                runner.train_loop.stop_training = True


class EpochBasedTrainLoop:
    def __init__(self, runner: Runner, max_epochs: int, val_interval: int = 1) -> None:
        self.runner, self.max_epochs, self.val_interval = runner, max_epochs, val_interval
        self.stop_training = False

    def run(self) -> None:
        r = self.runner
        r.call_hook("before_train")
        while r.epoch < self.max_epochs and not self.stop_training:
            r.call_hook("before_train_epoch")
            r.model.train()
            for x, y in r.train_dataloader:
                r.optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(r.model(x), y)
                loss.backward()  # type: ignore[no-untyped-call]
                r.optimizer.step()
                r.iter += 1
            for scheduler in r.param_schedulers:
                scheduler.step()
            r.call_hook("after_train_epoch")
            done = r.epoch + 1  # hooks see the epoch just trained until it is validated
            if done % self.val_interval == 0 or done == self.max_epochs:
                r.call_hook("before_val_epoch")
                r.call_hook("after_val_epoch", metrics=r.val_step())
            r.epoch = done
        r.call_hook("after_train")


class Runner:
    def __init__(self, model: torch.nn.Module, work_dir: str, train_dataloader: Any,
                 val_dataloader: Any, optimizer: torch.optim.Optimizer,
                 param_schedulers: list[Any], max_epochs: int, val_interval: int = 1,
                 hooks: Iterable[Hook] = (), load_from: str | None = None, resume: bool = False,
                 experiment_name: str | None = None, cfg: dict[str, Any] | None = None) -> None:
        self.model, self.optimizer, self.param_schedulers = model, optimizer, param_schedulers
        self.work_dir = Path(work_dir)
        self.train_dataloader, self.val_dataloader = train_dataloader, val_dataloader
        self.load_from, self.resume, self.cfg = load_from, resume, cfg or {}
        self.experiment_name = experiment_name or time.strftime("%Y%m%d_%H%M%S")
        self.message_hub = MessageHub.get_instance(self.experiment_name)
        self.epoch, self.iter = 0, 0
        self.max_epochs = max_epochs
        self.train_loop = EpochBasedTrainLoop(self, max_epochs, val_interval)
        self._hooks: list[Hook] = []
        for hook in hooks:
            self.register_hook(hook)

    def register_hook(self, hook: Hook, priority: str | None = None) -> None:
        hook.priority = priority or hook.priority  # stable: equal priorities keep their order
        self._hooks.append(hook)
        self._hooks.sort(key=lambda h: PRIORITY[h.priority])

    def call_hook(self, event: str, **kwargs: Any) -> None:
        for hook in self._hooks:
            getattr(hook, event)(self, **kwargs)

    def val_step(self) -> dict[str, float]:
        self.model.eval()
        with torch.no_grad():
            right = sum(int((self.model(x).argmax(1) == y).sum()) for x, y in self.val_dataloader)
        score = right / len(self.val_dataloader.dataset)
        self.message_hub.update_scalar("val/score", score)
        return {"score": score}

    def save_checkpoint(self, filename: str) -> Path:
        path = self.work_dir / filename  # meta records the next epoch to run
        meta = {"epoch": self.epoch + 1, "iter": self.iter,
                "cfg": self.cfg, "experiment_name": self.experiment_name}
        torch.save({"meta": meta, "state_dict": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "param_schedulers": [s.state_dict() for s in self.param_schedulers],
                    "message_hub": self.message_hub.state_dict()}, path)
        return path

    def train(self) -> torch.nn.Module:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self.load_from is not None:
            ckpt = torch.load(self.load_from, weights_only=False)
            self.model.load_state_dict(ckpt["state_dict"])
            if self.resume:
                self.epoch, self.iter = ckpt["meta"]["epoch"], ckpt["meta"]["iter"]
                self.optimizer.load_state_dict(ckpt["optimizer"])
                for scheduler, state in zip(self.param_schedulers, ckpt["param_schedulers"],
                                            strict=True):
                    scheduler.load_state_dict(state)
                self.message_hub.load_state_dict(ckpt["message_hub"])
        self.train_loop.run()
        return self.model
