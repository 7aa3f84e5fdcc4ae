"""BEST mutants: slips in best-model selection."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from tests.mutants.loop import AveragesOverNoEpochs
from tests.mutants.registry import mutant_of
from trainspec.reference import BaseTrainer


@mutant_of("check_best_needs_a_strictly_better_score",
           expect="after epoch 1 scored 0.5 and was taken as an improvement; "
                  "expected none (scores [0.5, 0.5,",
           proves=("BEST-1.3",))
@mutant_of("check_best_selection_matches_the_oracle",
           expect="was taken as an improvement; expected none (scores so far [0.125, 0.125]",
           proves=("BEST-1.3",))
class TieCountsAsImprovement(BaseTrainer):
    """Compares with >= (<= when minimizing): a tie replaces the best."""

    def is_improvement(self, score: float) -> bool:
        if not math.isfinite(score):
            return False
        return score <= self.best_score if self.val_minimize else score >= self.best_score


@mutant_of("check_best_weights_are_a_copy",
           expect="they equal the final weights: the best model aliases the live parameters",
           proves=("BEST-2.1",))
class BestModelAliasesWeights(BaseTrainer):
    """Keeps the state_dict itself, whose tensors share storage with the live parameters."""

    def _snapshot_weights(self) -> dict[str, torch.Tensor]:
        return dict(self.model.state_dict())


@mutant_of("check_best_file_follows_improvements",
           expect="epoch 2 did not improve but best.pt was rewritten",
           proves=("BEST-3.2",))
class WritesBestEveryValidation(BaseTrainer):
    """Rewrites best.pt after every validation, improved or not."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        improved = super().save_if_best(score, metrics)
        if not improved:
            self._save("best.pt")
        return improved


@mutant_of("check_test_sees_best_weights",
           expect="the test pass saw other weights than those of epoch 0, the best",
           proves=("BEST-4.1",))
class KeepsLastAsBest(BaseTrainer):
    """nanoGPT's default: the latest weights become the best model at every validation."""

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        improved = super().save_if_best(score, metrics)
        self.best_model = self._snapshot_weights()
        return improved


@mutant_of("check_best_needs_a_strictly_better_score",
           expect="the validation after epoch 2 scored 0.6 and was taken as an improvement; "
                  "expected none (scores [0.5, 0.5, 0.6, 0.4, 0.4], val.patience=None, "
                  "val.start_patience=0, val.minimize=True",
           proves=("BEST-1.1",))
class IgnoresMinimize(BaseTrainer):
    """Tracks the best as a maximum unless told otherwise: the config's val.minimize is lost."""

    def reset_best_tracking(self, minimize: bool | None = None) -> None:
        super().reset_best_tracking(minimize=bool(minimize))


@mutant_of("check_best_needs_a_strictly_better_score",
           expect="the validation after epoch 0 scored 0.5 and was not taken as an improvement; "
                  "expected an improvement (scores [0.5, 0.5, 0.6, 0.4, 0.4], "
                  "val.patience=None, val.start_patience=0, val.minimize=True",
           proves=("BEST-1.2",))
class IncumbentStartsAtZero(BaseTrainer):
    """Starts the incumbent at 0.0 ("a score is never below zero"), not at -inf / +inf."""

    def reset_best_tracking(self, minimize: bool | None = None) -> None:
        super().reset_best_tracking(minimize)
        self.best_score = 0.0


@mutant_of("check_best_file_follows_improvements",
           expect="epoch 1 improved but best.pt was not rewritten",
           proves=("BEST-3.1",))
class WritesBestOnlyOnce(BaseTrainer):
    """Never overwrites best.pt: the first improvement's file stays, later ones are lost."""

    def _save(self, name: str) -> None:
        if name == "best.pt" and self.ckpt_dir is not None and (self.ckpt_dir / name).exists():
            return
        super()._save(name)


@mutant_of("check_best_file_follows_improvements",
           expect="best.pt for epoch 1 holds other weights than the ones validated",
           proves=("BEST-3.3",))
class WritesPreviousBestWeights(BaseTrainer):
    """Writes best.pt from the incumbent it replaces: the weights are the previous best's."""

    _previous_best: dict[str, torch.Tensor] | None = None

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        self._previous_best = self.best_model
        return super().save_if_best(score, metrics)

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        if path.name == "best.pt" and self._previous_best is not None:
            state = {**state, "model_state_dict": self._previous_best}
        super()._write_file(path, state)


@mutant_of("check_best_file_follows_improvements",
           expect="best.pt written for the improvement at epoch 0 says epoch 1, expected 0",
           proves=("BEST-3.4",))
class BestFileEpochPlusOne(BaseTrainer):
    """Stamps best.pt with the epoch to resume from (completed + 1), as if it were last.pt."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        if path.name == "best.pt":
            state = {**state, "epoch": self._completed_epoch + 1}
        super()._write_file(path, state)


@mutant_of("check_best_file_follows_improvements",
           expect="best.pt written for the improvement at val.first says epoch 0, expected -1",
           proves=("BEST-3.5",))
class BestFileEpochZeroForValFirst(BaseTrainer):
    """Stamps best.pt with `self.epoch`, which is 0, not -1, at the val.first validation."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        if path.name == "best.pt":
            state = {**state, "epoch": self.epoch}
        super()._write_file(path, state)


@mutant_of("check_best_file_follows_improvements",
           expect="best.pt for epoch 0 says train_step 0, expected 6",
           proves=("BEST-3.6",))
class BestFileStaleStep(BaseTrainer):
    """Stamps best.pt with the step last logged, the previous epoch's, not the current one."""

    _logged_step = 0

    def _push_epoch_metrics(self) -> None:
        super()._push_epoch_metrics()
        self._logged_step = self.train_step

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        if path.name == "best.pt":
            state = {**state, "train_step": self._logged_step}
        super()._write_file(path, state)


@mutant_of("check_test_sees_best_weights",
           expect="every validation scored NaN, so no improvement could be recorded, yet the "
                  "test pass saw other weights than the final ones",
           proves=("BEST-4.2",))
class TestsInitialWeightsWithoutImprovement(BaseTrainer):
    """Seeds best_model with the initial weights so test() always has one: a run that never
    improved tests its untrained model."""

    def train(self) -> None:
        if self.best_model is None:
            self.best_model = self._snapshot_weights()
        super().train()


@mutant_of("check_best_file_follows_improvements",
           expect="epoch 1 improved but best.pt was not rewritten",
           proves=("BEST-3.1",))
class WritesBestOnlyWithThePeriodicSave(BaseTrainer):
    """Writes best.pt only at epochs the periodic save fires (``ckpt.every_n_epochs``): an
    improvement at a skipped epoch is never written, so the best model is lost."""

    def _save(self, name: str) -> None:
        every = self.cfg.ckpt.every_n_epochs
        if name == "best.pt" and every is not None and self._completed_epoch % every != 0:
            return
        super()._save(name)


@mutant_of("check_best_file_follows_improvements",
           expect="epoch 1 improved but best.pt was not rewritten",
           proves=("BEST-3.1", "BEST-3.6"))
class StaleStepAndBestLostOnThePeriod(BestFileStaleStep, WritesBestOnlyWithThePeriodicSave):
    """Two slips in one clause: best.pt carries a stale step from the first improvement on,
    and an improvement at an epoch the periodic save skips is never written. The lost best
    model is the graver and leads the evidence; the stale step is reported too."""


@mutant_of("check_best_selection_matches_the_oracle",
           expect="was taken as an improvement; expected none (scores so far [0.125, 0.125]",
           proves=("BEST-1.3",))
class TieAndInfWinBesideACrashAtZeroEpochs(AveragesOverNoEpochs):
    """Compares with >= and guards against NaN only: a tie and +inf count as improvements;
    and an eval-only run divides by zero. BEST-1's evidence is the tie, its own fault, never
    the crash (LOOP-3's) nor +inf (NAN-1's) (tests/test_attribution.py)."""

    def is_improvement(self, score: float) -> bool:
        if math.isnan(score):
            return False
        return score <= self.best_score if self.val_minimize else score >= self.best_score
