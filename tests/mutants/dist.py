"""DIST mutants: slips that only show on several ranks."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from tests.mutants.registry import mutant_of
from trainspec.reference import BaseTrainer, save_checkpoint
from trainspec.reference.distributed import ProcessGroup


@mutant_of("check_pooled_mean_is_sum_over_counts",
           expect="pooled 1.66667 from the (total, count) shards [(3.0, 1.0), (1.0, 3.0)]",
           proves=("DIST-1.1",))
@mutant_of("check_ranks_decide_as_one_rank",
           expect="scored through reduce_mean, rank 0 of 2 decided (epoch, improved, stop) "
                  "[(0, True, False), (1, False, False)",
           proves=("DIST-6.1",))
class MeanOfRankMeans(BaseTrainer):
    """Averages each rank's local mean: wrong whenever ranks count different numbers."""

    def reduce_mean(self, total: float, count: float) -> float:
        local = total / count if count else 0.0
        (summed,) = self.pg.all_sum([local])
        return summed / self.world_size if count or summed else math.nan


@mutant_of("check_ranks_stop_together", expect="the ranks stopped after epochs {0: 1, 1: None}",
           proves=("DIST-2.1",))
class StopVerdictOnRankZeroOnly(BaseTrainer):
    """Early stopping decided on rank 0 alone: the other ranks train on into a dead world."""

    def _validate(self) -> bool:
        should_stop = bool(self.val_epoch())
        self._stopped = self._stopped or should_stop
        return should_stop

    def step_patience(self, improved: bool) -> bool:
        stop = super().step_patience(improved)
        return stop if self.rank == 0 else False


@mutant_of("check_ranks_agree_on_best",
           expect="rank 1 holds other best weights than rank 0: observed no weights",
           proves=("DIST-3.2",))
class BestWeightsOnRankZeroOnly(BaseTrainer):
    """Keeps best weights on rank 0 only; the other ranks test their final weights."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        improved = super().save_if_best(score, metrics)
        if self.rank != 0:
            self.best_model = None
        return improved


@mutant_of("check_only_rank_zero_writes", expect="rank 1 wrote ", proves=("DIST-4.1",))
class EveryRankWritesCheckpoints(BaseTrainer):
    """Forgets the rank guard: every rank writes every checkpoint file."""

    def _save(self, name: str) -> None:
        rank = self.rank
        self.rank = 0
        try:
            super()._save(name)
        finally:
            self.rank = rank


@mutant_of("check_only_rank_zero_writes",
           expect="while last.pt still said epoch None: the file of epoch 0 was not complete",
           proves=("DIST-4.2",))
class WritesCheckpointsInBackground(BaseTrainer):
    """Writes checkpoints on a thread and moves on: the next epoch may start before the file."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        threading.Thread(target=save_checkpoint, args=(path, state), daemon=True).start()


@mutant_of("check_a_lost_rank_fails_every_rank_in_time",
           expect="stalled at epoch 1 and rank 0 errored only",
           proves=("DIST-5.1",))
class NoProcessGroupTimeout(BaseTrainer):
    """Ignores ddp.timeout_s: the group keeps torch's 30-minute default."""

    def _join_process_group(self) -> ProcessGroup:
        return ProcessGroup.join(self.rank, self.world_size,
                                 dataclasses.replace(self.cfg.ddp, timeout_s=1800.0))


# rank 1, whose own scores fall, alone stops at epoch 1 (DIST-2) and sees no improvement (DIST-3)
@mutant_of("check_ranks_stop_together_on_rank_local_scores",
           expect="1: [(0, False), (1, True)]}: one verdict per rank",
           proves=("DIST-2.1",))
@mutant_of("check_ranks_agree_on_best_on_rank_local_scores",
           expect="1: [(0, True), (1, False)]}: one verdict per rank",
           proves=("DIST-3.1", "DIST-3.3"))
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


# the same split, only where a launch script made the process group before the trainer
@mutant_of("check_ranks_stop_together_on_rank_local_scores",
           expect="inside a process group made before the trainer, handed rank-local scores, "
                  "the ranks' (epoch, stop) were {0: [(0, False), (1, False), (2, False), "
                  "(3, False)], 1: [(0, False), (1, True)]}",
           proves=("DIST-2.1",))
@mutant_of("check_ranks_agree_on_best_on_rank_local_scores",
           expect="inside a process group made before the trainer, handed rank-local scores, "
                  "the ranks' (epoch, improved) were {0: [(0, True), (1, True), (2, True), "
                  "(3, True)], 1: [(0, True), (1, False)]}",
           proves=("DIST-3.1", "DIST-3.3"))
class ExistingGroupIsOneRank(BaseTrainer):
    """Built inside a process group that already exists (a launch script made it), takes the
    run for a one-rank run: no pooling, no broadcast, every rank decides alone."""

    def _join_process_group(self) -> ProcessGroup:
        if dist.is_initialized():
            group = ProcessGroup.join(self.rank, 1, self.cfg.ddp)
            group.world_size = self.world_size
            return group
        return super()._join_process_group()


@mutant_of("check_pooled_mean_is_sum_over_counts",
           expect="after epoch 0 rank 1 pooled 0.333333 from the (total, count) shards "
                  "[(3.0, 1.0), (1.0, 3.0)]",
           proves=("DIST-1.2",))
class PoolsOnRankZeroOnly(BaseTrainer):
    """Reduces to rank 0 (a reduce, not an all-reduce): the other ranks keep their local mean."""

    def reduce_mean(self, total: float, count: float) -> float:
        pooled = super().reduce_mean(total, count)
        if self.rank == 0:
            return pooled
        return math.nan if count == 0 else total / count


@mutant_of("check_pooled_mean_is_sum_over_counts",
           expect="after epoch 1 rank 0 pooled 0 from the (total, count) shards "
                  "[(0.0, 0.0), (0.0, 0.0)]; expected sum/sum = nan (nothing counted: NaN)",
           proves=("DIST-1.3",))
class EmptyPoolIsZero(BaseTrainer):
    """Guards the division by a zero count with 0.0: a split nobody counted scores 0."""

    def reduce_mean(self, total: float, count: float) -> float:
        total, count = self.pg.all_sum([float(total), float(count)])
        return total / max(count, 1.0)


class _LeftTheLoop(Exception):
    pass


@mutant_of("check_ranks_stop_together",
           expect="every rank stopped after epoch 1, but the run did not end on every rank: "
                  "rank 1 ",
           proves=("DIST-2.2",))
class RankZeroLeavesAfterStop(BaseTrainer):
    """On a stop verdict every rank shares, rank 0 returns from train() at once: the other
    ranks still enter the epoch's checkpoint write and barrier, and wait there for it."""

    def _validate(self) -> bool:
        should_stop = super()._validate()
        if should_stop and self.rank == 0:
            raise _LeftTheLoop
        return should_stop

    def train(self) -> None:
        try:
            super().train()
        except _LeftTheLoop:
            return


class AlwaysMakesItsOwnGroup(BaseTrainer):
    """Not a mutant: a correct trainer that calls init_process_group whatever exists, so it
    cannot be built inside a group made before it (the DIST checks leave that case unjudged)."""

    def _join_process_group(self) -> ProcessGroup:
        if self.world_size > 1 and dist.is_initialized():
            raise ValueError("trying to initialize the default process group twice!")
        return super()._join_process_group()


@mutant_of("check_ranks_agree_on_best_on_rank_local_scores",
           expect="handed rank-local scores, the ranks took (epoch, improved) [(0, True), "
                  "(1, False)]; rank 0's scores",
           proves=("DIST-3.3",))
class ComparesTheLastRanksScore(BaseTrainer):
    """Broadcasts the score from the last rank, not rank 0: every rank agrees, on another
    rank's score."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        if self.is_distributed:
            tensor = torch.tensor([float(score)], dtype=torch.float64)
            dist.broadcast(tensor, src=self.world_size - 1)
            score = float(tensor.item())
        return super().save_if_best(score, metrics)


class RestoresTrackingOnRankZeroOnly(BaseTrainer):
    """On resume, the best score, best epoch, best weights and patience counter come back on
    rank 0 alone: the other ranks track afresh from the file's epoch on."""

    def _restore_tracking(self, ckpt: dict[str, Any]) -> None:
        if self.rank == 0:
            super()._restore_tracking(ckpt)



@mutant_of("check_pooled_mean_is_sum_over_counts",
           expect="after epoch 3 rank 0 pooled inf from the (total, count) shards "
                  "[(0.25, 1.0), (0.0, 0.0)]; expected sum/sum = 0.25",
           proves=("DIST-1.1",))
class CountPooledAsIntegerMean(BaseTrainer):
    """Pools the count as a framework's "mean" sync of an integer does (a sum, divided by the
    world size in place: truncated); right only where the counts sum to a multiple of the
    world size."""

    def reduce_mean(self, total: float, count: float) -> float:
        summed_total, summed_count = self.pg.all_sum([total, count])
        mean_count = int(summed_count) // self.world_size
        if mean_count == 0:
            return math.nan if summed_count == 0 else math.inf
        return (summed_total / self.world_size) / mean_count
