"""FT mutants: slips in finetuning from a checkpoint."""

from __future__ import annotations

from typing import Any

from tests.mutants.registry import mutant_of
from trainspec.reference import BaseTrainer


@mutant_of("check_finetune_starts_a_new_run",
           expect="started with a restored optimizer state, not a fresh one",
           proves=("FT-1.3",))
@mutant_of("check_finetune_accepts_a_new_optimizer",
           expect="the finetune (ckpt.resume=false) from last.pt raised ResumeMismatchError",
           proves=("FT-3.1",))
class RestoresStateOnFinetune(BaseTrainer):
    """Restores optimizer and scheduler even when the run is a finetune."""

    def _apply_checkpoint(self, ckpt: dict[str, Any]) -> None:
        if self.is_resumed:
            super()._apply_checkpoint(ckpt)
        else:
            self._restore_items(ckpt)


@mutant_of("check_finetune_starts_a_new_run",
           expect="the finetune (ckpt.resume=false) started at epoch 3, train_step 18",
           proves=("FT-1.2", "LOOP-1.2"))
class FinetuneKeepsTheEpoch(BaseTrainer):
    """Takes epoch and step from the checkpoint on a finetune too."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        ckpt = super()._load_checkpoint()
        if ckpt is not None and not self.is_resumed:
            self.epoch, self.train_step = int(ckpt["epoch"]) + 1, int(ckpt["train_step"])
        return ckpt


@mutant_of("check_model_only_restores_weights_only",
           expect="the ckpt.model_only=true run (with ckpt.resume=true) started at epoch 3, "
                  "train_step 18",
           proves=("FT-2.1",))
class ModelOnlyIgnored(BaseTrainer):
    """Resumes whenever ckpt.resume is set, whatever ckpt.model_only says."""

    def _is_resume(self) -> bool:
        return self.cfg.ckpt.resume


@mutant_of("check_finetune_tracks_best_afresh",
           expect="decided (epoch, improved, stop) [(0, False, True)]; the same scores from "
                  "scratch [(0, True, False)",
           proves=("FT-4.1",))
class FinetuneKeepsBest(BaseTrainer):
    """Carries the checkpoint's best score and patience counter into a finetune."""

    def _apply_checkpoint(self, ckpt: dict[str, Any]) -> None:
        super()._apply_checkpoint(ckpt)
        if not self.is_resumed:
            self._restore_tracking(ckpt)


@mutant_of("check_finetune_tracks_best_afresh",
           expect="decided (epoch, improved, stop) [(0, False, True)]; the same scores from "
                  "scratch [(0, False, False)",
           proves=("FT-4.2",))
class FinetuneKeepsPatience(BaseTrainer):
    """Carries only the checkpoint's patience counter into a finetune; best tracking starts
    fresh, so only a run whose first validation does not improve shows the slip."""

    def _apply_checkpoint(self, ckpt: dict[str, Any]) -> None:
        super()._apply_checkpoint(ckpt)
        saved = ckpt.get("trainer_state", {})
        if not self.is_resumed and saved and self.cfg.val.patience is not None:
            self.patience_left = saved["patience_left"]


@mutant_of("check_finetune_starts_a_new_run",
           expect="the finetune (ckpt.resume=false) did not start from the weights of the "
                  "checkpoint it loaded",
           proves=("FT-1.1",))
class FinetuneSkipsWeights(BaseTrainer):
    """Hands setup the checkpoint only on a resume: a finetune starts from a fresh model."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        ckpt = super()._load_checkpoint()
        return ckpt if self.is_resumed else None


@mutant_of("check_finetune_accepts_a_new_optimizer",
           expect="from last.pt raised ValueError: loaded state dict has a different number "
                  "of parameter groups",
           proves=("FT-3.1",))
class FinetuneLoadsAMatchingOptimizerClass(BaseTrainer):
    """On a finetune, restores the optimizer whenever its class matches the checkpoint's,
    whatever its parameter groups: a new head in a second group crashes the load."""

    def _apply_checkpoint(self, ckpt: dict[str, Any]) -> None:
        super()._apply_checkpoint(ckpt)
        optimizer = self.ckpt_items.get("optimizer")
        if not self.is_resumed and optimizer is not None and \
                ckpt.get("optimizer_class") == f"{type(optimizer).__module__}." \
                f"{type(optimizer).__qualname__}":
            optimizer.load_state_dict(ckpt["optimizer_state_dict"])
