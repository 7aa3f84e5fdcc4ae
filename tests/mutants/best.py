"""BEST mutants: slips in best-model selection."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from tests.mutants.registry import mutant_of
from trainspec.reference import BaseTrainer


@mutant_of("check_best_needs_a_strictly_better_score",
           expect="after epoch 1 scored 0.5 and was taken as an improvement; "
                  "expected none (scores [0.5, 0.5,",
           proves=("BEST-1.3",))
@mutant_of("check_best_selection_matches_the_oracle",
           expect="was taken as an improvement; expected none (scores so far [0.125, 0.125]",
           proves=("BEST-1.3",))
class TieCountsAsImprovement(BaseTrainer):
    """Compares with >= (<= when minimizing): a tie replaces the best."""

    def is_improvement(self, score: float) -> bool:
        if not math.isfinite(score):
            return False
        return score <= self.best_score if self.val_minimize else score >= self.best_score


@mutant_of("check_best_weights_are_a_copy",
           expect="they equal the final weights: the best model aliases the live parameters",
           proves=("BEST-2.1",))
class BestModelAliasesWeights(BaseTrainer):
    """Keeps the state_dict itself, whose tensors share storage with the live parameters."""

    def _snapshot_weights(self) -> dict[str, torch.Tensor]:
        return dict(self.model.state_dict())


@mutant_of("check_best_file_follows_improvements",
           expect="epoch 2 did not improve but best.pt was rewritten",
           proves=("BEST-3.2",))
class WritesBestEveryValidation(BaseTrainer):
    """Rewrites best.pt after every validation, improved or not."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        improved = super().save_if_best(score, metrics)
        if not improved:
            self._save("best.pt")
        return improved


@mutant_of("check_test_sees_best_weights",
           expect="the test pass saw other weights than those of epoch 0, the best",
           proves=("BEST-4.1",))
class KeepsLastAsBest(BaseTrainer):
    """nanoGPT's default: the latest weights become the best model at every validation."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        improved = super().save_if_best(score, metrics)
        self.best_model = self._snapshot_weights()
        return improved
