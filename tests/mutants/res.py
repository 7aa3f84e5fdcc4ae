"""RES mutants: slips in resuming an interrupted run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainspec.reference import BaseTrainer


class RepeatsTheCheckpointEpoch(BaseTrainer):
    """Resumes at the checkpoint's epoch instead of the one after it."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        ckpt = super()._load_checkpoint()
        if ckpt is not None and self.is_resumed:
            self.epoch -= 1
        return ckpt


class ForgetsOptimizerState(BaseTrainer):
    """Restores the scheduler but leaves the optimizer at its initial state."""

    def _restore_items(self, ckpt: dict[str, Any]) -> list[str]:
        optimizer = self.ckpt_items.pop("optimizer", None)
        try:
            return super()._restore_items(ckpt)
        finally:
            if optimizer is not None:
                self.ckpt_items["optimizer"] = optimizer


class ForgetsBestOnResume(BaseTrainer):
    """Saves best tracking in the checkpoint but never reads it back."""

    def _restore_tracking(self, ckpt: dict[str, Any]) -> None:
        return None


class ForgetsPatienceOnResume(BaseTrainer):
    """Restores the incumbent best but refills the patience counter on resume."""

    def _restore_tracking(self, ckpt: dict[str, Any]) -> None:
        super()._restore_tracking(ckpt)
        self.patience_left = self.cfg.val.patience


class TakesBestScoreFromBestFile(BaseTrainer):
    """On resume, takes the incumbent best score from the best.pt beside the checkpoint: the
    newest best, which is right unless best.pt was written after that checkpoint (a kill
    between the best save and the last save of an improving epoch)."""

    def _restore_tracking(self, ckpt: dict[str, Any]) -> None:
        super()._restore_tracking(ckpt)
        load_from = self.cfg.ckpt.load_from
        best = None if load_from is None else Path(load_from).parent / "best.pt"
        if best is not None and best.is_file():
            saved = torch.load(best, map_location="cpu", weights_only=True)["trainer_state"]
            self.best_score = float(saved["best_score"])
            self.best_epoch = saved["best_epoch"]


class CheckpointsBeforeValidation(BaseTrainer):
    """The seed's order: last.pt is written before the epoch's validation, so a crash in
    between resumes past a validation that never happened."""

    def _is_validation_due(self, epoch: int) -> bool:
        self._write_epoch_checkpoints()
        return super()._is_validation_due(epoch)

    def _write_epoch_checkpoints(self) -> None:
        if getattr(self, "_written", None) == self.epoch:
            return
        self._written = self.epoch
        super()._write_epoch_checkpoints()


class ForgetsRngState(BaseTrainer):
    """Saves RNG states but does not restore them: the data order changes after a resume."""

    def _restore_rng(self, ckpt: dict[str, Any]) -> None:
        return None


class SkipsStateThatDoesNotFit(BaseTrainer):
    """The seed's leniency: an item whose state is missing or does not load is left at init."""

    def _restore_items(self, ckpt: dict[str, Any]) -> list[str]:
        loaded = []
        for name, item in self.ckpt_items.items():
            key = f"{name}_state_dict"
            if name == "model" or key not in ckpt:
                continue
            try:
                item.load_state_dict(ckpt[key])
            except (ValueError, RuntimeError, KeyError):
                continue
            loaded.append(name)
        return loaded


class RestoresTorchRngOnly(BaseTrainer):
    """Restores torch's generator but not python's or numpy's."""

    def _restore_rng(self, ckpt: dict[str, Any]) -> None:
        rng = ckpt.get("rng")
        if isinstance(rng, list) and self.rank < len(rng):
            torch.set_rng_state(rng[self.rank]["torch"])


class SavesAStaleStepCount(BaseTrainer):
    """Writes last.pt with a step counter one optimizer step behind."""

    def _save(self, name: str) -> None:
        step = self.train_step
        self.train_step = step - 1 if name == "last.pt" else step
        try:
            super()._save(name)
        finally:
            self.train_step = step
