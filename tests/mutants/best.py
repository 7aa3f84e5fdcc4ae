"""BEST mutants: slips in best-model selection."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from trainspec.reference import BaseTrainer


class TieCountsAsImprovement(BaseTrainer):
    """Compares with >= (<= when minimizing): a tie replaces the best."""

    def is_improvement(self, score: float) -> bool:
        if not math.isfinite(score):
            return False
        return score <= self.best_score if self.val_minimize else score >= self.best_score


class BestModelAliasesWeights(BaseTrainer):
    """Keeps the state_dict itself, whose tensors share storage with the live parameters."""

    def _snapshot_weights(self) -> dict[str, torch.Tensor]:
        return dict(self.model.state_dict())


class WritesBestEveryValidation(BaseTrainer):
    """Rewrites best.pt after every validation, improved or not."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        improved = super().save_if_best(score, metrics)
        if not improved:
            self._save("best.pt")
        return improved


class KeepsLastAsBest(BaseTrainer):
    """nanoGPT's default: the latest weights become the best model at every validation."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        improved = super().save_if_best(score, metrics)
        self.best_model = self._snapshot_weights()
        return improved
