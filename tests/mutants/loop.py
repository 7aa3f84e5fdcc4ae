"""LOOP mutants: slips in the epoch loop."""

from __future__ import annotations

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
