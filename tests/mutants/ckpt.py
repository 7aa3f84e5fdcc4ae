"""CKPT mutants: slips in what checkpoint files hold and how loading them fails."""

from __future__ import annotations

from typing import Any

from trainspec.errors import CheckpointError
from trainspec.reference import BaseTrainer


class EpochCheckpointsOffByOne(BaseTrainer):
    """Writes epoch_<e>.pt when (e + 1) % every_n_epochs == 0."""

    def _write_epoch_checkpoints(self) -> None:
        if self.ckpt_dir is None:
            return
        every = self.cfg.ckpt.every_n_epochs
        if every is not None and (self.epoch + 1) % every == 0:
            self._save(f"epoch_{self.epoch}.pt")
        if self.cfg.ckpt.save_last:
            self._save("last.pt")


class LastCheckpointOnlyAtTheEnd(BaseTrainer):
    """Writes last.pt after the final epoch only."""

    def _write_epoch_checkpoints(self) -> None:
        if self.ckpt_dir is not None and self.epoch == self.cfg.num_epochs - 1:
            super()._write_epoch_checkpoints()


class CheckpointOmitsTheOptimizer(BaseTrainer):
    """Saves the model but not the other registered items."""

    def _save(self, name: str) -> None:
        items = self.ckpt_items
        self.ckpt_items = {k: v for k, v in items.items() if k == "model"}
        try:
            super()._save(name)
        finally:
            self.ckpt_items = items


class MissingCheckpointStartsFresh(BaseTrainer):
    """Treats a missing or unreadable checkpoint as no checkpoint at all."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        try:
            return super()._load_checkpoint()
        except CheckpointError:
            self.is_resumed = False
            return None


class VagueCheckpointErrors(BaseTrainer):
    """Fails on a bad checkpoint without saying which file."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        try:
            return super()._load_checkpoint()
        except CheckpointError:
            raise RuntimeError("could not load the checkpoint") from None
