"""Model-based mutants: slips that show only in a combination the fixed scenarios never make.

Each is a plausible single-point slip of a correct trainer, taken from issue 22's examples:
it passed the fixed scenarios of its clause, and fails the generated family, which crosses run
kinds, config keys and score scripts and compares every run with the model of the spec (or,
where the family's draw does not reach it, a fixed case added for it: a resume that must refill
patience, RES-3).
"""

from __future__ import annotations

import math
from typing import Any

from tests.mutants import best as _best
from tests.mutants import dbg as _dbg
from tests.mutants import dist as _dist
from tests.mutants import ft as _ft
from tests.mutants import loop as _loop
from tests.mutants import nan as _nan
from tests.mutants import pat as _pat
from tests.mutants import res as _res
from tests.mutants.registry import mutant_of
from trainspec.reference import BaseTrainer


@mutant_of("check_resume_keeps_best_and_patience",
           expect="(one validation of patience 2 left, an improvement at epoch 2 next) and "
                  "resumed, the run validated (epoch, improved, stop) [(0, True, False), "
                  "(1, False, False), (2, True, False), (3, False, True)]",
           proves=("RES-3.3",))
class ResumeNeverRefillsPatience(BaseTrainer):
    """After a resume, an improvement no longer refills the patience counter."""

    def step_patience(self, improved: bool) -> bool:
        left = self.patience_left
        stop = super().step_patience(improved)
        if improved and self.is_resumed and left is not None:
            self.patience_left = left
        return stop


@mutant_of("check_generated_runs_take_strict_improvements",
           expect="the fresh run's validation 1 (after epoch 0) was not taken as an improvement; "
                  "expected an improvement (scores",
           proves=("BEST-1.1",))
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


@mutant_of("check_generated_runs_take_strict_improvements",
           expect="the fresh run's validation 1 (after epoch 0) was not taken as an improvement; "
                  "expected an improvement (scores [0.5, 0.5005])",
           proves=("BEST-1.1",))
class IgnoresGainsBelowMinDelta(BaseTrainer):
    """Takes a score as better only by more than 0.01, a library's default ``min_delta``."""

    def is_improvement(self, score: float) -> bool:
        if not math.isfinite(score):
            return False
        if not math.isfinite(self.best_score):
            return True
        gain = self.best_score - score if self.val_minimize else score - self.best_score
        return gain > 0.01


@mutant_of("check_generated_runs_pool_the_score",
           expect="the fresh run's validation 0 (after val.first) pooled the score nan; "
                  "expected inf",
           proves=("DIST-1.1",))
class PoolsFiniteRanksOnly(BaseTrainer):
    """Pools only the ranks whose total is finite: a NaN on one rank alone goes unseen."""

    def reduce_mean(self, total: float, count: float) -> float:
        finite = math.isfinite(total)
        pooled, counted = self.pg.all_sum([total if finite else 0.0, count if finite else 0.0])
        return math.nan if counted == 0 else pooled / counted


@mutant_of("check_generated_runs_resume_where_the_file_ends",
           expect="the resumed run started at epoch 0; expected 1",
           proves=("RES-1.1",))
class RetrainsTheCheckpointEpoch(BaseTrainer):
    """A resume starts at the checkpoint's epoch rather than the next: every resume trains
    that epoch again."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        ckpt = super()._load_checkpoint()
        if self.is_resumed:
            self.epoch -= 1
        return ckpt


@mutant_of("check_generated_runs_resume_the_decisions",
           expect="expected [] [resumed; from a source run run to its end",
           proves=("RES-3.3",))
class ResumeForgetsTheStop(BaseTrainer):
    """Restores best and patience but not the early stop: a resume from the checkpoint of
    the epoch that stopped the run trains on."""

    def _restore_tracking(self, ckpt: dict[str, Any]) -> None:
        super()._restore_tracking(ckpt)
        self._stopped = False


@mutant_of("check_generated_runs_validate_on_schedule",
           expect="the finetuned run's validation 0 (after val.first) ran after epoch 0; expected "
                  "the validations after",
           proves=("LOOP-2.3",))
class SkipsValFirstWhenLoading(BaseTrainer):
    """Skips the val.first validation whenever a checkpoint was loaded, a finetune too."""

    def train(self) -> None:
        if self.cfg.ckpt.load_from is not None:
            self.is_resumed = True  # read by train() only, after the restore is done
        super().train()


@mutant_of("check_generated_runs_leave_the_model_files",
           expect="the resumed run left no epoch_4.pt; expected one of epoch 4",
           proves=("CKPT-1.3",))
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


@mutant_of("check_generated_runs_test_the_best_weights",
           expect="the fresh run's test pass did not evaluate the best weights",
           proves=("BEST-4.1",))
class TestsTheFinalWeights(BaseTrainer):
    """Tests whatever the model holds when the loop ends, though an improvement was kept."""

    def _should_test(self) -> bool:
        should = super()._should_test()
        if should:
            self._kept, self.best_model = self.best_model, None
        return should

    def log_training_results(self) -> None:
        self.best_model = getattr(self, "_kept", self.best_model)


@mutant_of("check_generated_runs_train_each_epoch_once",
           expect="the fresh run raised: IndexError: validation history index out of range",
           proves=("LOOP-1.1",))
class CountsValidationsByTheInterval(BaseTrainer):
    """Keeps one slot of validation history per ``val.every_n_epochs`` epochs: the
    ``val.first`` validation and the final epoch's own one, due off the interval, find none,
    and the run raises (on any scores: a crash of the loop, not a non-finite score's)."""

    def _validate(self) -> bool:
        slots = self.cfg.num_epochs // self.cfg.val.every_n_epochs
        self._made = getattr(self, "_made", 0) + 1
        if self._made > slots:
            raise IndexError("validation history index out of range")
        return super()._validate()


# Mutants of other families that the generated runs catch too, declared here (their
# evidence is this family's): each check of the family needs one that fails it.
mutant_of("check_generated_runs_write_best_on_improvement",
          expect="the fresh run's best.pt holds epoch 0, step 2; expected epoch 3, step 8",
          proves=("BEST-3.4",))(_best.WritesBestOnlyOnce)
mutant_of("check_generated_runs_keep_the_best_weights",
          expect="the fresh run's best weights are not those validated after val.first, the best "
                 "score",
          proves=("BEST-2.1",))(_best.BestModelAliasesWeights)
mutant_of("check_generated_runs_resume_the_decisions",
          expect="the resumed run's validation 0 (after epoch",
          proves=("RES-3.3",))(_res.ForgetsPatienceOnResume)
mutant_of("check_generated_runs_test_once",
          expect="the fresh run ran the test pass 0 times; expected 1",
          proves=("LOOP-4.2",))(_loop.SkipsTestAfterEarlyStop)
mutant_of("check_generated_runs_never_improve_on_nonfinite",
          expect="the fresh run's validation 0 (after val.first) was taken as an improvement; "
                 "expected none (scores",
          proves=("NAN-1.1",))(_nan.NanWinsBest)
mutant_of("check_generated_runs_stop_as_the_model",
          expect="did not stop the run; expected a stop [fresh;",
          proves=("PAT-5.1",))(_pat.StopsOneValidationLate)
mutant_of("check_generated_runs_finetune_from_epoch_zero",
          expect="the finetuned run started at epoch ",
          proves=("FT-1.2",))(_ft.FinetuneKeepsTheEpoch)
mutant_of("check_generated_runs_cap_debug_epochs",
          expect="the debug run validated after",
          proves=("DBG-2.1",))(_dbg.DebugKeepsAllEpochs)
mutant_of("check_generated_runs_write_nothing_in_debug",
          expect="the debug run wrote",
          proves=("DBG-3.1",))(_dbg.DebugWritesCheckpoints)
# the multi-rank runs (a check of several ranks draws them): slips a single rank never shows
mutant_of("check_generated_runs_pool_the_score",
          expect="rank 0 of 4: the fresh 4-rank run's validation 0 (after epoch 0) pooled the "
                 "score 0.375;",
          proves=("DIST-1.1",))(_dist.MeanOfRankMeans)
mutant_of("check_generated_runs_stop_and_end_together",
          expect="did not stop the run; expected a stop [multi-rank;",
          proves=("DIST-2.1",))(_dist.StopVerdictOnRankZeroOnly)
# handed rank-local scores, every rank compares the last rank's: they agree, on another score
mutant_of("check_generated_runs_agree_on_the_best",
          expect="own scores give, not rank 0's [multi-rank;",
          proves=("DIST-3.3",))(_dist.ComparesTheLastRanksScore)
# a resume on several ranks (a multi-rank chain from a file its fresh run left): rank 1 tracks
# afresh, and holds no best weights where rank 0 holds the source's
mutant_of("check_generated_runs_agree_on_the_best",
          expect="rank 1 of 4: the resumed run's best weights are not those validated after "
                 "epoch 0, the best score: observed no weights [multi-rank; 4 ranks; resumed;",
          proves=("DIST-3.2",))(_dist.RestoresTrackingOnRankZeroOnly)
mutant_of("check_generated_runs_take_one_debug_batch",
          expect="the debug run ended epoch 0 at train_step 2; expected 1",
          proves=("DBG-1.1",))(_dbg.DebugDoesNotTruncate)


@mutant_of("check_generated_runs_agree_on_the_best",
           # the shrunk example's first validation was val.first's in one run and epoch 0's in
           # another (when parted ranks are cut varies): both are rank 1's first validation
           expect="DIST-3.1: rank 1 of 2: the fresh 2-rank run's validation 0 (after ",
           proves=("DIST-3.1",))
class ImprovementOnlyWhereBestIsWritten(BaseTrainer):
    """Returns an improvement only on the rank that writes best.pt (rank 0): the other ranks
    hold the best weights, yet count every validation against their patience."""

    def save_if_best(self, score: float, metrics: Any = None) -> bool:
        improved = super().save_if_best(score, metrics)
        return improved and self.rank == 0
