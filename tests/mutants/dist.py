"""DIST mutants: slips that only show on several ranks."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainspec.reference import BaseTrainer, save_checkpoint
from trainspec.reference.distributed import ProcessGroup


class MeanOfRankMeans(BaseTrainer):
    """Averages each rank's local mean: wrong whenever ranks count different numbers."""

    def reduce_mean(self, total: float, count: float) -> float:
        local = total / count if count else 0.0
        (summed,) = self.pg.all_sum([local])
        return summed / self.world_size if count or summed else math.nan


class StopVerdictOnRankZeroOnly(BaseTrainer):
    """Early stopping decided on rank 0 alone: the other ranks train on into a dead world."""

    def _validate(self) -> bool:
        should_stop = bool(self.val_epoch())
        self._stopped = self._stopped or should_stop
        return should_stop

    def step_patience(self, improved: bool) -> bool:
        stop = super().step_patience(improved)
        return stop if self.rank == 0 else False


class BestWeightsOnRankZeroOnly(BaseTrainer):
    """Keeps best weights on rank 0 only; the other ranks test their final weights."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        improved = super().save_if_best(score, metrics)
        if self.rank != 0:
            self.best_model = None
        return improved


class EveryRankWritesCheckpoints(BaseTrainer):
    """Forgets the rank guard: every rank writes every checkpoint file."""

    def _save(self, name: str) -> None:
        rank = self.rank
        self.rank = 0
        try:
            super()._save(name)
        finally:
            self.rank = rank


class WritesCheckpointsInBackground(BaseTrainer):
    """Writes checkpoints on a thread and moves on: the next epoch may start before the file."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        threading.Thread(target=save_checkpoint, args=(path, state), daemon=True).start()


class NoProcessGroupTimeout(BaseTrainer):
    """Ignores ddp.timeout_s: the group keeps torch's 30-minute default."""

    def _join_process_group(self) -> ProcessGroup:
        return ProcessGroup.join(self.rank, self.world_size,
                                 dataclasses.replace(self.cfg.ddp, timeout_s=1800.0))


class DecidesOnLocalScore(BaseTrainer):
    """Takes each rank's own score for best selection: ranks given different scores diverge."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        if not self.is_improvement(score):
            return False
        self.best_score = score
        self.best_epoch = self._completed_epoch
        self.best_model = self._snapshot_weights()
        self._save("best.pt")
        return True

    def _validate(self) -> bool:
        should_stop = bool(self.val_epoch())
        self._stopped = self._stopped or should_stop
        return should_stop
