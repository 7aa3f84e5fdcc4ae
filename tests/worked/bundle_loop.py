"""A trainer in the shape of poutyne's ``ModelBundle.train`` (poutyne is LGPL-3.0-or-later:
its shape only, written anew from a reading of poutyne 1.19's ``framework/model_bundle.py``
and ``framework/callbacks/{checkpoint,earlystopping,lr_scheduler,periodic}.py``; no code
copied).

A loop function with callbacks: :func:`fit` runs epochs ``initial_epoch..epochs`` (1-based),
calling each callback's ``on_train_begin``, ``on_epoch_begin(epoch)``, ``on_epoch_end(epoch,
logs)`` (the logs hold the validation's score) and ``on_train_end``; a callback stops the run
by setting ``stop_training``. :func:`train_bundle` is the bundle around it: it resumes on its
own when its folder holds ``last.epoch`` (weights from ``checkpoint.ckpt``, the optimizer from
``checkpoint.optim``, the LR scheduler from ``lr_sched_0.lrsched``, the RNG states, the best
score from ``log.tsv``), and adds, in poutyne's order, the callbacks that write after every
epoch ``log.tsv``, ``checkpoint_epoch_<E>.ckpt`` for a new best (the previous one removed, the
best restored into the model at the end), ``checkpoint.ckpt``, ``checkpoint.optim``, the RNG
states and ``last.epoch``, then the LR scheduler's step and its state, then the user's
callbacks (early stopping). ``test`` evaluates the best weights.

Kept as poutyne has them: strict comparisons from +-inf, early stopping that resets its
counter and best score whenever training begins (a resume too) and stops at
``wait >= patience``, files written in place, weight files holding the bare state dict, the
epoch kept in ``last.epoch`` and in the best file's name, and the optimizer saved before the
LR scheduler steps.
"""

from __future__ import annotations

import math
import operator
import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

Logs = dict[str, Any]


class Callback:
    run: Run

    def on_train_begin(self) -> None: ...

    def on_epoch_begin(self, epoch: int) -> None: ...

    def on_epoch_end(self, epoch: int, logs: Logs) -> None: ...

    def on_train_end(self) -> None: ...


class Run:
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer, self.stop_training = model, optimizer, False


def fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader[Any],
        valid: Callable[[torch.nn.Module], float], *, epochs: int, initial_epoch: int = 1,
        callbacks: Sequence[Callback] = ()) -> None:
    run = Run(model, optimizer)
    for cb in callbacks:
        cb.run = run
        cb.on_train_begin()
    for epoch in range(initial_epoch, epochs + 1):
        for cb in callbacks:
            cb.on_epoch_begin(epoch)
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        logs = {"epoch": epoch, "val_score": valid(model)}
        for cb in callbacks:
            cb.on_epoch_end(epoch, logs)
        if run.stop_training:
            break
    for cb in callbacks:
        cb.on_train_end()


def _better(mode: str) -> Callable[[float, float], bool]:
    return operator.lt if mode == "min" else operator.gt


class Save(Callback):
    """Writes a file after every epoch (poutyne's PeriodicSaveCallback)."""

    def __init__(self, filename: str, write: Callable[[Run, str, int], object]) -> None:
        self.filename, self.write = filename, write

    def on_epoch_end(self, epoch: int, logs: Logs) -> None:
        self.write(self.run, self.filename.format(epoch=epoch), epoch)


class BestCheckpoint(Callback):
    """ModelCheckpoint(save_best_only=True, keep_only_last_best=True, restore_best=True)."""

    def __init__(self, filename: str, monitor: str, mode: str, best: float | None = None,
                 best_filename: str | None = None) -> None:
        self.filename, self.monitor, self.better = filename, monitor, _better(mode)
        self.current_best = best if best is not None else math.inf if mode == "min" else -math.inf
        self.best_filename = best_filename

    def on_epoch_end(self, epoch: int, logs: Logs) -> None:
        if self.better(logs[self.monitor], self.current_best):
            old, self.best_filename = self.best_filename, self.filename.format(epoch=epoch)
            self.current_best = logs[self.monitor]
            torch.save(self.run.model.state_dict(), self.best_filename)
            if old is not None and old != self.best_filename and os.path.exists(old):
                os.remove(old)

    def on_train_end(self) -> None:
        if self.best_filename is not None:
            self.run.model.load_state_dict(torch.load(self.best_filename))


class EarlyStopping(Callback):
    def __init__(self, *, monitor: str, mode: str, patience: int, min_delta: float = 0.0) -> None:
        self.monitor, self.mode, self.patience = monitor, mode, patience
        self.min_delta = -min_delta if mode == "min" else min_delta
        self.better, self.wait, self.best = _better(mode), 0, 0.0

    def on_train_begin(self) -> None:
        self.wait, self.best = 0, math.inf if self.mode == "min" else -math.inf

    def on_epoch_end(self, epoch: int, logs: Logs) -> None:
        current = logs[self.monitor]
        if self.better(current - self.min_delta, self.best):
            self.best, self.wait = current, 0
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.run.stop_training = True


class SchedulerStep(Callback):
    def __init__(self, scheduler: Any, filename: str) -> None:
        self.scheduler, self.filename = scheduler, filename

    def on_epoch_end(self, epoch: int, logs: Logs) -> None:
        self.scheduler.step()
        torch.save(self.scheduler.state_dict(), self.filename)


class CSVLog(Callback):
    def __init__(self, filename: str) -> None:
        self.filename = filename

    def on_epoch_end(self, epoch: int, logs: Logs) -> None:
        with open(self.filename, "a", encoding="utf-8") as f:
            f.write(f"{epoch}\t{logs['val_score']!r}\n")


def train_bundle(directory: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: Any, loader: DataLoader[Any],
                 valid: Callable[[torch.nn.Module], float], *, epochs: int, monitor_mode: str,
                 callbacks: Sequence[Callback] = ()) -> None:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    initial_epoch, best, best_file = 1, None, None
    if (d / "last.epoch").is_file():  # resume
        initial_epoch = int((d / "last.epoch").read_text()) + 1
        model.load_state_dict(torch.load(d / "checkpoint.ckpt"))
        optimizer.load_state_dict(torch.load(d / "checkpoint.optim"))
        rng = torch.load(d / "checkpoint.randomstate", weights_only=False)  # its own pickle
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        scheduler.load_state_dict(torch.load(d / "lr_sched_0.lrsched"))
        rows = [(int(e), float(s)) for e, s in (line.split("\t") for line in
                                                  (d / "log.tsv").read_text().splitlines())]
        scored = [r for r in rows if not math.isnan(r[1])]  # as pandas' idxmin/idxmax skip NaN
        if scored:
            pick = min if monitor_mode == "min" else max
            epoch, best = pick(scored, key=lambda r: r[1])
            best_file = str(d / f"checkpoint_epoch_{epoch}.ckpt")
    fit(model, optimizer, loader, valid, epochs=epochs, initial_epoch=initial_epoch, callbacks=[
        CSVLog(str(d / "log.tsv")),
        BestCheckpoint(str(d / "checkpoint_epoch_{epoch}.ckpt"), "val_score", monitor_mode, best,
                       best_file),
        Save(str(d / "checkpoint.ckpt"), lambda r, f, e: torch.save(r.model.state_dict(), f)),
        Save(str(d / "checkpoint.optim"), lambda r, f, e: torch.save(r.optimizer.state_dict(), f)),
        Save(str(d / "checkpoint.randomstate"), lambda r, f, e: torch.save(
            {"torch": torch.get_rng_state(), "python": random.getstate()}, f)),
        Save(str(d / "last.epoch"), lambda r, f, e: Path(f).write_text(f"{e}\n")),
        SchedulerStep(scheduler, str(d / "lr_sched_0.lrsched")), *callbacks])
