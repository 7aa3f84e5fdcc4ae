"""A trainer in the shape of victoresque/pytorch-template (MIT licence): ``base/base_trainer.py``
and ``trainer/trainer.py``, written anew from a reading of them, not copied.

A class with hooks: ``BaseTrainer.train`` runs epochs 1..N (1-based), calls ``_train_epoch``,
decides improvement and early stopping on the monitored metric with a patience counter kept in
a local variable, and saves ``checkpoint-epoch<N>.pth`` every ``save_period`` epochs, copying
it to ``model_best.pth`` on an improvement. ``_resume_checkpoint`` continues from a file.

Kept as the original has it: the comparison (``>=``, so a tie improves), the stop rule
(``not_improved_count > early_stop``), the save condition (``epoch % save_period == 0``, so
neither an improvement at another epoch nor the stopping epoch is saved), the file contents
(no step, no scheduler, no RNG state) and the resume (an optimizer of another type is skipped
with a warning). Left out: the tensorboard writer, the GPU set-up and the metric functions.
Kept too: every checkpoint pickles the config object (:class:`ConfigParser`, which holds the
run's folders as ``pathlib`` paths), so no checkpoint loads with ``weights_only=True`` alone.
Changed: its resume allows its own config class and ``PosixPath`` (``safe_globals``), as a
template kept working since torch 2.6 made ``torch.load`` weights-only by default does.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path, PosixPath
from typing import Any

import torch
from torch.utils.data import DataLoader

inf = math.inf


class ConfigParser:
    """The template's parsed configuration: the JSON config, the run's folders as paths."""

    def __init__(self, config: dict[str, Any], resume: str | None = None) -> None:
        self._config = config
        self.resume = None if resume is None else Path(resume)
        self._save_dir = Path(config["trainer"]["save_dir"])
        self._log_dir = self._save_dir / "log"

    def __getitem__(self, name: str) -> Any:
        return self._config[name]

    @property
    def save_dir(self) -> Path:
        return self._save_dir


class BaseTrainer:
    """Base class for all trainers."""

    def __init__(self, model: torch.nn.Module, criterion: Any, optimizer: torch.optim.Optimizer,
                 config: ConfigParser, resume: str | None = None) -> None:
        self.config = config
        self.logger = logging.getLogger("trainer")
        self.model, self.criterion, self.optimizer = model, criterion, optimizer
        cfg_trainer = config["trainer"]
        self.epochs = cfg_trainer["epochs"]
        self.save_period = cfg_trainer["save_period"]
        self.monitor = cfg_trainer.get("monitor", "off")
        if self.monitor == "off":
            self.mnt_mode, self.mnt_best = "off", 0.0
        else:
            self.mnt_mode, self.mnt_metric = self.monitor.split()
            assert self.mnt_mode in ["min", "max"]
            self.mnt_best = inf if self.mnt_mode == "min" else -inf
            self.early_stop = cfg_trainer.get("early_stop", inf)
        self.start_epoch = 1
        self.checkpoint_dir = config.save_dir
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if resume is not None:
            self._resume_checkpoint(resume)

    def _train_epoch(self, epoch: int) -> dict[str, Any]:
        raise NotImplementedError

    def train(self) -> None:
        not_improved_count = 0
        for epoch in range(self.start_epoch, self.epochs + 1):
            result = self._train_epoch(epoch)
            log = {"epoch": epoch}
            log.update(result)
            best = False
            if self.mnt_mode != "off":
                improved = (self.mnt_mode == "min" and log[self.mnt_metric] <= self.mnt_best) or \
                           (self.mnt_mode == "max" and log[self.mnt_metric] >= self.mnt_best)
                if improved:
                    self.mnt_best = log[self.mnt_metric]
                    not_improved_count = 0
                    best = True
                else:
                    not_improved_count += 1
                if not_improved_count > self.early_stop:
                    self.logger.info("Validation performance didn't improve for %s epochs. "
                                     "Training stops.", self.early_stop)
                    break
            if epoch % self.save_period == 0:
                self._save_checkpoint(epoch, save_best=best)

    def _save_checkpoint(self, epoch: int, save_best: bool = False) -> None:
        state = {"arch": type(self.model).__name__, "epoch": epoch,
                 "state_dict": self.model.state_dict(),
                 "optimizer": self.optimizer.state_dict(), "monitor_best": self.mnt_best,
                 "config": self.config}
        filename = str(self.checkpoint_dir / f"checkpoint-epoch{epoch}.pth")
        torch.save(state, filename)
        if save_best:
            torch.save(state, str(self.checkpoint_dir / "model_best.pth"))

    def _resume_checkpoint(self, resume_path: str) -> None:
        with torch.serialization.safe_globals([ConfigParser, PosixPath]):
            checkpoint = torch.load(resume_path)
        self.start_epoch = checkpoint["epoch"] + 1
        self.mnt_best = checkpoint["monitor_best"]
        if checkpoint["config"]["arch"] != self.config["arch"]:
            self.logger.warning("Architecture configuration given in config file is different "
                                "from that of checkpoint.")
        self.model.load_state_dict(checkpoint["state_dict"])
        if checkpoint["config"]["optimizer"]["type"] != self.config["optimizer"]["type"]:
            self.logger.warning("Optimizer type given in config file is different from that of "
                                "checkpoint. Optimizer parameters not being resumed.")
        else:
            self.optimizer.load_state_dict(checkpoint["optimizer"])


class Trainer(BaseTrainer):
    """The template's trainer: one pass over the data, then the validation, then the LR
    scheduler's epoch step."""

    def __init__(self, model: torch.nn.Module, criterion: Any, optimizer: torch.optim.Optimizer,
                 config: ConfigParser, data_loader: DataLoader[Any],
                 valid_data_loader: DataLoader[Any] | None = None,
                 lr_scheduler: Any = None, resume: str | None = None) -> None:
        super().__init__(model, criterion, optimizer, config, resume)
        self.data_loader, self.valid_data_loader = data_loader, valid_data_loader
        self.do_validation = valid_data_loader is not None
        self.lr_scheduler = lr_scheduler

    def _train_epoch(self, epoch: int) -> dict[str, Any]:
        self.model.train()
        total = 0.0
        for data, target in self.data_loader:
            self.optimizer.zero_grad()
            loss = self.criterion(self.model(data), target)
            loss.backward()
            self.optimizer.step()
            total += loss.item()
        log: dict[str, Any] = {"loss": total / max(1, len(self.data_loader))}
        if self.do_validation:
            log.update({"val_" + k: v for k, v in self._valid_epoch(epoch).items()})
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        return log

    def _valid_epoch(self, epoch: int) -> dict[str, Any]:
        self.model.eval()
        assert self.valid_data_loader is not None
        with torch.no_grad():
            right = sum(int((self.model(x).argmax(1) == y).sum())
                        for x, y in self.valid_data_loader)
        return {"accuracy": right / len(self.valid_data_loader.dataset)}  # type: ignore[arg-type]
