"""PAT mutants: slips in patience and early stopping."""

from __future__ import annotations

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
           proves=("PAT-5.1", "PAT-3.3"))
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
