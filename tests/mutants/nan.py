"""NAN mutants: slips with NaN and infinite scores."""

from __future__ import annotations

import math
from collections.abc import Mapping

from tests.mutants.loop import AveragesOverNoEpochs
from tests.mutants.registry import mutant_of
from trainspec.reference import BaseTrainer


@mutant_of("check_nonfinite_scores_never_improve",
           expect="after epoch 1 scored nan and was taken as an improvement",
           proves=("NAN-1.1",))
@mutant_of("check_nonfinite_runs_match_the_oracle",
           expect="was taken as an improvement; expected none (scores so far [nan]",
           proves=("NAN-1.1",))
class NanWinsBest(BaseTrainer):
    """The seed's comparison without its finiteness guard: `not (score <= best)` lets NaN in."""

    def is_improvement(self, score: float) -> bool:
        sign = -1.0 if self.val_minimize else 1.0
        return not sign * score <= sign * self.best_score


@mutant_of("check_leading_nonfinite_scores_leave_best_clean",
           expect="after epoch 2 scored 0.1 and was not taken as an improvement; "
                  "expected an improvement (scores [nan, inf, 0.1,",
           proves=("NAN-2.1",))
@mutant_of("check_nonfinite_runs_match_the_oracle",
           expect="was not taken as an improvement; expected an improvement "
                  "(scores so far [nan, 0.125]",
           proves=("NAN-2.1",))
class NanPoisonsIncumbent(BaseTrainer):
    """Records a NaN score as the incumbent: no later finite score can beat it."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        if math.isnan(score):
            self.best_score = score
            return False
        return super().save_if_best(score, metrics)


@mutant_of("check_nonfinite_score_counts_once_for_patience",
           expect="validations ran after ['epoch 0', 'epoch 1'], "
                  "expected ['epoch 0', 'epoch 1', 'epoch 2', 'epoch 3']",
           proves=("NAN-3.1", "NAN-3.4"))
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


@mutant_of("check_nonfinite_score_counts_once_for_patience",
           expect="the run raised: ValueError: validation score is nan",
           proves=("NAN-3.2",))
class RaisesOnNanScore(BaseTrainer):
    """Guards save_if_best with a raise: one non-finite validation ends the whole run."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        if not math.isfinite(score):
            raise ValueError(f"validation score is {score}; check the model for divergence")
        return super().save_if_best(score, metrics)


@mutant_of("check_nonfinite_score_counts_once_for_patience",
           expect="validations ran after ['epoch 0', 'epoch 1', 'epoch 2', 'epoch 3', "
                  "'epoch 4', 'epoch 5'], expected ['epoch 0', 'epoch 1', 'epoch 2', "
                  "'epoch 3'] (scores [0.5, nan, nan, 0.4, 0.3, 0.2], val.patience=3",
           proves=("NAN-3.3",))
class NanRefillsPatience(BaseTrainer):
    """Reads a non-finite score as "no information" and refills the counter on it."""

    _last_score = 0.0

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        self._last_score = score
        return super().save_if_best(score, metrics)

    def step_patience(self, improved: bool) -> bool:
        return super().step_patience(improved or not math.isfinite(self._last_score))


@mutant_of("check_nonfinite_score_counts_once_for_patience",
           expect="expected ['epoch 0', 'epoch 1', 'epoch 2'] (scores [0.5, -inf, inf, 0.7, "
                  "0.1], val.patience=2",
           proves=("NAN-3.1", "NAN-3.3"))
class InfRefillsPatience(BaseTrainer):
    """Guards against NaN only: +inf beats any incumbent, so it counts as an improvement and
    refills the patience counter."""

    def is_improvement(self, score: float) -> bool:
        if math.isnan(score):
            return False
        return score < self.best_score if self.val_minimize else score > self.best_score


@mutant_of("check_nonfinite_runs_match_the_oracle",
           expect="the validation after epoch 0 was taken as an improvement; expected none "
                  "(scores so far [nan]",
           proves=("NAN-1.1", "NAN-2.1"))
class FirstScoreAlwaysWins(BaseTrainer):
    """Takes the first validation as the best whatever it scored ("nothing to compare with
    yet"): a leading NaN becomes the incumbent."""

    def is_improvement(self, score: float) -> bool:
        return self.best_model is None or super().is_improvement(score)


@mutant_of("check_nonfinite_scores_never_improve",
           expect="after epoch 2 scored inf and was taken as an improvement",
           proves=("NAN-1.1",))
@mutant_of("check_loop_zero_epochs_is_eval_only",
           expect="the run raised: ZeroDivisionError: division by zero",
           proves=("LOOP-3.2",))
class InfWinsAndAveragesOverNoEpochs(AveragesOverNoEpochs, InfRefillsPatience):
    """Two slips of two clauses: +inf beats any incumbent (NAN-1), and an eval-only run
    divides by zero (LOOP-3). Neither is BEST-1's or PAT-5's evidence
    (tests/test_attribution.py)."""
