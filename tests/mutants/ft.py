"""FT mutants: slips in finetuning from a checkpoint."""

from __future__ import annotations

from typing import Any

from trainspec.reference import BaseTrainer


class RestoresStateOnFinetune(BaseTrainer):
    """Restores optimizer and scheduler even when the run is a finetune."""

    def _apply_checkpoint(self, ckpt: dict[str, Any]) -> None:
        if self.is_resumed:
            super()._apply_checkpoint(ckpt)
        else:
            self._restore_items(ckpt)


class FinetuneKeepsTheEpoch(BaseTrainer):
    """Takes epoch and step from the checkpoint on a finetune too."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        ckpt = super()._load_checkpoint()
        if ckpt is not None and not self.is_resumed:
            self.epoch, self.train_step = int(ckpt["epoch"]) + 1, int(ckpt["train_step"])
        return ckpt


class ModelOnlyIgnored(BaseTrainer):
    """Resumes whenever ckpt.resume is set, whatever ckpt.model_only says."""

    def _is_resume(self) -> bool:
        return self.cfg.ckpt.resume


class FinetuneKeepsBest(BaseTrainer):
    """Carries the checkpoint's best score and patience counter into a finetune."""

    def _apply_checkpoint(self, ckpt: dict[str, Any]) -> None:
        super()._apply_checkpoint(ckpt)
        if not self.is_resumed:
            self._restore_tracking(ckpt)


class FinetuneKeepsPatience(BaseTrainer):
    """Carries only the checkpoint's patience counter into a finetune; best tracking starts
    fresh, so only a run whose first validation does not improve shows the slip."""

    def _apply_checkpoint(self, ckpt: dict[str, Any]) -> None:
        super()._apply_checkpoint(ckpt)
        saved = ckpt.get("trainer_state", {})
        if not self.is_resumed and saved and self.cfg.val.patience is not None:
            self.patience_left = saved["patience_left"]
