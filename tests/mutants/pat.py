"""PAT mutants: slips in patience and early stopping."""

from __future__ import annotations

from collections.abc import Mapping

from tests.mutants.registry import mutant_of
from trainspec.reference import BaseTrainer


@mutant_of("check_patience_stops_exactly_on_time",
           expect="validations ran after ['epoch 0', 'epoch 1', 'epoch 2', 'epoch 3'], "
                  "expected ['epoch 0', 'epoch 1', 'epoch 2']",
           proves=("PAT-1.1", "PAT-1.3"))
class StopsOneValidationLate(BaseTrainer):
    """Stops when the counter goes below zero instead of reaching it."""

    def step_patience(self, improved: bool) -> bool:
        patience = self.cfg.val.patience
        if self.patience_left is None or patience is None:
            return False
        if improved:
            self.patience_left = patience
        elif self.epoch >= self.cfg.val.start_patience:
            self.patience_left -= 1
        return self.patience_left < 0


@mutant_of("check_improvement_refills_patience",
           expect="validations ran after ['epoch 0', 'epoch 1', 'epoch 2', 'epoch 3'], "
                  "expected ['epoch 0', 'epoch 1', 'epoch 2', 'epoch 3', 'epoch 4', 'epoch 5', "
                  "'epoch 6']",
           proves=("PAT-2.1",))
class NeverRefillsPatience(BaseTrainer):
    """Counts non-improvements since the start, not since the last improvement."""

    def step_patience(self, improved: bool) -> bool:
        left = self.patience_left
        stop = super().step_patience(improved)
        if improved and left is not None:
            self.patience_left = left
        return stop


@mutant_of("check_start_patience_delays_counting",
           expect="validations ran after ['epoch 0', 'epoch 1'], "
                  "expected ['epoch 0', 'epoch 1', 'epoch 2']",
           proves=("PAT-3.1",))
class IgnoresStartPatience(BaseTrainer):
    """Counts non-improvements from the first epoch, whatever val.start_patience says."""

    def step_patience(self, improved: bool) -> bool:
        patience = self.cfg.val.patience
        if self.patience_left is None or patience is None:
            return False
        self.patience_left = patience if improved else self.patience_left - 1
        return self.patience_left <= 0


@mutant_of("check_unset_patience_never_stops",
           expect="(pat-unset-first) "
                  "the run trained [0, 1, 2, 3] of 4 epochs and stopped after [3]",
           proves=("PAT-4.2",))
class UnsetPatienceIsNumEpochs(BaseTrainer):
    """The seed's default: unset patience becomes num_epochs, which val.first can exhaust."""

    def reset_best_tracking(self, minimize: bool | None = None) -> None:
        super().reset_best_tracking(minimize)
        if self.patience_left is None:
            self.patience_left = self.cfg.num_epochs
            self._unset_patience = self.cfg.num_epochs

    def step_patience(self, improved: bool) -> bool:
        budget = getattr(self, "_unset_patience", None)
        if budget is None:
            return super().step_patience(improved)
        assert self.patience_left is not None
        if improved:
            self.patience_left = budget
        elif self.epoch >= self.cfg.val.start_patience:
            self.patience_left -= 1
        return self.patience_left <= 0


@mutant_of("check_decisions_match_the_oracle",
           # the falsifying example depends on the Hypothesis profile (dev: at val.first; ci:
           # after epoch 1 with start_patience=1): the fragment is what both say
           expect="did not stop the run; expected a stop (patience left 0)",
           proves=("PAT-5.1", "PAT-3.4"))
class StartPatienceOffByOne(BaseTrainer):
    """Counts from the epoch after val.start_patience (> instead of >=)."""

    def step_patience(self, improved: bool) -> bool:
        patience = self.cfg.val.patience
        if self.patience_left is None or patience is None:
            return False
        if improved:
            self.patience_left = patience
        elif self.epoch > self.cfg.val.start_patience:
            self.patience_left -= 1
        return self.patience_left <= 0


@mutant_of("check_patience_stops_exactly_on_time",
           expect="validations ran after ['epoch 0', 'epoch 1'], "
                  "expected ['epoch 0', 'epoch 1', 'epoch 2'] (scores [0.5, 0.4, 0.3, 0.2, 0.1], "
                  "val.patience=2",
           proves=("PAT-1.2",))
class StopsOneValidationEarly(BaseTrainer):
    """Stops when one unit of patience is left (`<= 1`) instead of none."""

    def step_patience(self, improved: bool) -> bool:
        stop = super().step_patience(improved)
        return stop or (self.patience_left is not None and self.patience_left <= 1)


@mutant_of("check_patience_stops_exactly_on_time",
           expect="the val.first validation scored nan with val.patience=1 and did not exhaust "
                  "patience",
           proves=("PAT-1.4", "LOOP-2.4"))
class ValFirstSkipsPatience(BaseTrainer):
    """Leaves the val.first validation out of patience: "no epoch trained, nothing to count"."""

    def step_patience(self, improved: bool) -> bool:
        if self._completed_epoch < 0:
            return False
        return super().step_patience(improved)


@mutant_of("check_start_patience_delays_counting",
           expect="the validation after epoch 0 scored 0.5 and was not taken as an improvement; "
                  "an improvement before val.start_patience=2 still counts for best tracking",
           proves=("PAT-3.2",))
class IgnoresImprovementsBeforeStartPatience(BaseTrainer):
    """Leaves warm-up epochs out of best tracking as well as patience: an early best is lost."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        if self.epoch < self.cfg.val.start_patience:
            return False
        return super().save_if_best(score, metrics)


@mutant_of("check_unset_patience_never_stops",
           expect="(pat-unset) the run trained [0, 1] of 5 epochs and stopped after [1]",
           proves=("PAT-4.1", "PAT-4.3"))
class UnsetPatienceIsOne(BaseTrainer):
    """Reads unset patience as 1: the first non-improving validation stops the run."""

    def reset_best_tracking(self, minimize: bool | None = None) -> None:
        super().reset_best_tracking(minimize)
        if self.patience_left is None:
            self.patience_left = 1

    def step_patience(self, improved: bool) -> bool:
        if self.cfg.val.patience is not None or self.patience_left is None:
            return super().step_patience(improved)
        if improved:
            self.patience_left = 1
        elif self.epoch >= self.cfg.val.start_patience:
            self.patience_left -= 1
        return self.patience_left <= 0
