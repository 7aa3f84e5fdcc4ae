"""Model-based mutants: slips that show only in a combination the fixed scenarios never make.

Each is a plausible single-point slip of a correct trainer, taken from issue 22's examples:
it passes the fixed scenarios of its clause, and fails the generated family, which crosses run
kinds, config keys and score scripts and compares every run with the model of the spec.
"""

from __future__ import annotations

import math
from typing import Any

from tests.mutants.registry import mutant_of
from trainspec.reference import BaseTrainer


class ResumeNeverRefillsPatience(BaseTrainer):
    """After a resume, an improvement no longer refills the patience counter."""

    def step_patience(self, improved: bool) -> bool:
        left = self.patience_left
        stop = super().step_patience(improved)
        if improved and self.is_resumed and left is not None:
            self.patience_left = left
        return stop


class OneImprovementPerEpochNumber(BaseTrainer):
    """Records at most one improvement per value of ``self.epoch``: the val.first validation
    and epoch 0's share epoch 0, so an improvement right after val.first is ignored."""

    def save_if_best(self, score: float, metrics: Any = None) -> bool:
        if getattr(self, "_improved_at", None) == self.epoch:
            return False
        improved = super().save_if_best(score, metrics)
        if improved:
            self._improved_at = self.epoch
        return improved


class IgnoresGainsBelowMinDelta(BaseTrainer):
    """Takes a score as better only by more than 0.01, a library's default ``min_delta``."""

    def is_improvement(self, score: float) -> bool:
        if not math.isfinite(score):
            return False
        if not math.isfinite(self.best_score):
            return True
        gain = self.best_score - score if self.val_minimize else score - self.best_score
        return gain > 0.01


class PoolsFiniteRanksOnly(BaseTrainer):
    """Pools only the ranks whose total is finite: a NaN on one rank alone goes unseen."""

    def reduce_mean(self, total: float, count: float) -> float:
        finite = math.isfinite(total)
        pooled, counted = self.pg.all_sum([total if finite else 0.0, count if finite else 0.0])
        return math.nan if counted == 0 else pooled / counted


class RetrainsTheCheckpointEpoch(BaseTrainer):
    """A resume starts at the checkpoint's epoch rather than the next: every resume trains
    that epoch again."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        ckpt = super()._load_checkpoint()
        if self.is_resumed:
            self.epoch -= 1
        return ckpt


class SkipsValFirstWhenLoading(BaseTrainer):
    """Skips the val.first validation whenever a checkpoint was loaded, a finetune too."""

    def train(self) -> None:
        if self.cfg.ckpt.load_from is not None:
            self.is_resumed = True  # read by train() only, after the restore is done
        super().train()


class EpochFilesCountFromTheStart(BaseTrainer):
    """Writes ``epoch_<e>.pt`` every n epochs of this run, counted from where it started: a
    resumed run's numbered files fall on other epochs."""

    def _write_epoch_checkpoints(self) -> None:
        every = self.cfg.ckpt.every_n_epochs
        start = getattr(self, "_run_start", None)
        if start is None:
            start = self._run_start = self.epoch
        if every is not None and self.ckpt_dir is not None and (self.epoch - start) % every == 0:
            self._save(f"epoch_{self.epoch}.pt")
        if self.cfg.ckpt.save_last:
            self._save("last.pt")


_ = mutant_of  # declarations follow, once their evidence is measured
