"""LOOP mutants: slips in the epoch loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.mutants.registry import mutant_of
from trainspec.reference import BaseTrainer


@mutant_of("check_loop_trains_each_epoch_once_in_order",
           expect="trained epochs [0, 1, 2], expected [0, 1, 2, 3]",
           proves=("LOOP-1.1",))
class SkipsTheLastEpoch(BaseTrainer):
    """An off-by-one in the epoch range: the final epoch never trains."""

    def _epochs(self) -> range:
        return range(self.epoch, max(self.epoch, self.cfg.num_epochs - 1))


@mutant_of("check_loop_validates_on_schedule",
           expect="validations ran after ['epoch 0', 'epoch 3'], "
                  "expected ['epoch 0', 'epoch 3', 'epoch 4']",
           proves=("LOOP-2.2",))
class SkipsTheFinalValidation(BaseTrainer):
    """Validates on the every_n_epochs grid only, forgetting the final epoch."""

    def _is_validation_due(self, epoch: int) -> bool:
        return epoch % self.cfg.val.every_n_epochs == 0


@mutant_of("check_loop_zero_epochs_is_eval_only", expect="num_epochs=0 trained epochs [0]",
           proves=("LOOP-3.1",))
class TrainsOnceWhenZeroEpochs(BaseTrainer):
    """Treats num_epochs=0 as 1: an eval-only run takes optimizer steps."""

    def _epochs(self) -> range:
        return range(self.epoch, max(self.cfg.num_epochs, 1))


@mutant_of("check_loop_tests_once_after_the_loop",
           expect="after early stop the test pass ran 0 time(s)",
           proves=("LOOP-4.2",))
class SkipsTestAfterEarlyStop(BaseTrainer):
    """Runs the test pass only when the loop ran to its end."""

    def _should_test(self) -> bool:
        return self.cfg.test.enable and not self._stopped


@mutant_of("check_loop_validates_on_schedule",
           expect="validations ran after ['epoch 1', 'epoch 3', 'epoch 4'], "
                  "expected ['epoch 0', 'epoch 2', 'epoch 4']",
           proves=("LOOP-2.1",))
class ValidatesOnOddEpochs(BaseTrainer):
    """Counts epochs from 1 for the grid: `(e + 1) % n` validates after epochs 1, 3, ..."""

    def _is_validation_due(self, epoch: int) -> bool:
        return (epoch + 1) % self.cfg.val.every_n_epochs == 0 or epoch == self.cfg.num_epochs - 1


@mutant_of("check_loop_validates_on_schedule",
           expect="validations ran after ['epoch 0', 'epoch 1'], "
                  "expected ['val.first', 'epoch 0', 'epoch 1']",
           proves=("LOOP-2.3",))
class IgnoresValFirst(BaseTrainer):
    """Guards validation with "nothing trained yet, nothing to score": val.first never runs."""

    def _validate(self) -> bool:
        if self._completed_epoch < 0:
            return False
        return super()._validate()


@mutant_of("check_patience_stops_exactly_on_time",
           expect="the val.first validation exhausted patience, yet the run went on to train "
                  "epochs [0, 1]",
           proves=("LOOP-2.5",))
class TrainsAfterStopAtValFirst(BaseTrainer):
    """Drops the val.first validation's stop verdict: the loop starts training regardless."""

    def _validate(self) -> bool:
        should_stop = super()._validate()
        if self._completed_epoch < 0:
            self._stopped = False
            return False
        return should_stop


@mutant_of("check_loop_validates_on_schedule",
           expect="the run validated before training again (val.first repeated)",
           proves=("LOOP-2.6",))
class RepeatsValFirstOnResume(BaseTrainer):
    """Clears `is_resumed` once the checkpoint is restored, so the resumed loop runs val.first."""

    def _apply_checkpoint(self, ckpt: dict[str, Any]) -> None:
        super()._apply_checkpoint(ckpt)
        self.is_resumed = False  # "the restore is done": but train() still reads it


@mutant_of("check_loop_zero_epochs_is_eval_only",
           expect="num_epochs=0 with val.first ran 0 validation(s), expected exactly the "
                  "val.first one",
           proves=("LOOP-3.2",))
class ReturnsEarlyWithNoEpochs(BaseTrainer):
    """Returns from train() at once when there is no epoch to train: no val.first, no test."""

    def train(self) -> None:
        if self.cfg.num_epochs == 0:
            self.pg.close(is_healthy=True)
            return
        super().train()


@mutant_of("check_loop_tests_once_after_the_loop",
           expect="after exhaustion the test pass ran 3 time(s), expected exactly once",
           proves=("LOOP-4.1",))
class TestsAfterEveryValidation(BaseTrainer):
    """Runs the test pass inside the loop, after each validation, instead of once after it."""

    def _validate(self) -> bool:
        should_stop = super()._validate()
        if self.cfg.test.enable:
            self.test()
        return should_stop

    def _should_test(self) -> bool:
        return False


@mutant_of("check_loop_tests_once_after_the_loop",
           expect="after an early stop at val.first the test pass ran 0 time(s)",
           proves=("LOOP-4.3",))
class SkipsTestWhenStoppedBeforeTraining(BaseTrainer):
    """Skips the test pass when the run stopped before training: "nothing was trained"."""

    def _should_test(self) -> bool:
        return self.cfg.test.enable and not (self._stopped and self._completed_epoch < 0)


@mutant_of("check_loop_tests_once_after_the_loop",
           expect="with test.enable=false the test pass ran 1 time(s), expected never",
           proves=("LOOP-4.4",))
class IgnoresTestEnable(BaseTrainer):
    """Runs the test pass whenever the trainer has a test(), whatever test.enable says."""

    def _should_test(self) -> bool:
        return True


@mutant_of("check_best_selection_matches_the_oracle",
           expect="the validation after val.first was not taken as an improvement; "
                  "expected an improvement",
           proves=("LOOP-2.4",))
class ValFirstNotTracked(BaseTrainer):
    """Logs the val.first score as a baseline but keeps it out of best tracking."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        if self._completed_epoch < 0 and not self.is_resumed:
            return False
        return super().save_if_best(score, metrics)


@mutant_of("check_loop_zero_epochs_is_eval_only",
           expect="the run raised: ZeroDivisionError: division by zero",
           proves=("LOOP-3.2",))
class AveragesOverNoEpochs(BaseTrainer):
    """Logs the steps per epoch before the test pass, dividing by num_epochs: an eval-only run
    raises and never tests."""

    def _should_test(self) -> bool:
        self.log("train/steps_per_epoch", self.train_step / self.cfg.num_epochs)
        return super()._should_test()
