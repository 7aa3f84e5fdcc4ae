"""NAN mutants: slips with NaN and infinite scores."""

from __future__ import annotations

import math
from collections.abc import Mapping

from trainspec.reference import BaseTrainer


class NanWinsBest(BaseTrainer):
    """The seed's comparison without its finiteness guard: `not (score <= best)` lets NaN in."""

    def is_improvement(self, score: float) -> bool:
        sign = -1.0 if self.val_minimize else 1.0
        return not sign * score <= sign * self.best_score


class NanPoisonsIncumbent(BaseTrainer):
    """Records a NaN score as the incumbent: no later finite score can beat it."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        if math.isnan(score):
            self.best_score = score
            return False
        return super().save_if_best(score, metrics)


class NanStopsAtOnce(BaseTrainer):
    """Treats a non-finite score as fatal for patience: stops right away."""

    _last_score = 0.0

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        self._last_score = score
        return super().save_if_best(score, metrics)

    def step_patience(self, improved: bool) -> bool:
        if self.patience_left is not None and not math.isfinite(self._last_score):
            self.patience_left = 0
            return True
        return super().step_patience(improved)
