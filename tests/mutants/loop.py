"""LOOP mutants: slips in the epoch loop."""

from __future__ import annotations

from trainspec.reference import BaseTrainer


class SkipsTheLastEpoch(BaseTrainer):
    """An off-by-one in the epoch range: the final epoch never trains."""

    def _epochs(self) -> range:
        return range(self.epoch, max(self.epoch, self.cfg.num_epochs - 1))


class SkipsTheFinalValidation(BaseTrainer):
    """Validates on the every_n_epochs grid only, forgetting the final epoch."""

    def _is_validation_due(self, epoch: int) -> bool:
        return epoch % self.cfg.val.every_n_epochs == 0


class TrainsOnceWhenZeroEpochs(BaseTrainer):
    """Treats num_epochs=0 as 1: an eval-only run takes optimizer steps."""

    def _epochs(self) -> range:
        return range(self.epoch, max(self.cfg.num_epochs, 1))


class SkipsTestAfterEarlyStop(BaseTrainer):
    """Runs the test pass only when the loop ran to its end."""

    def _should_test(self) -> bool:
        return self.cfg.test.enable and not self._stopped
