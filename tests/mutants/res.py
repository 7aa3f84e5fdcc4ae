"""RES mutants: slips in resuming an interrupted run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.mutants.registry import mutant_of
from trainspec.errors import ResumeMismatchError
from trainspec.reference import BaseTrainer


@mutant_of("check_resume_continues_at_the_next_epoch",
           expect="resumed from last.pt of epoch 1, the run trained epochs [1, 2, 3]",
           proves=("RES-1.1", "RES-1.3", "LOOP-1.3"))
@mutant_of("check_resume_continues_under_several_ranks",
           expect="resumed from epoch 2, rank 0 trained epochs [2, 3]",
           proves=("RES-1.1", "RES-1.3"))
class RepeatsTheCheckpointEpoch(BaseTrainer):
    """Resumes at the checkpoint's epoch instead of the one after it."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        ckpt = super()._load_checkpoint()
        if ckpt is not None and self.is_resumed:
            self.epoch -= 1
        return ckpt


@mutant_of("check_resume_restores_every_registered_item",
           expect="the optimizer state differs from the uninterrupted run",
           proves=("RES-2.1",))
class ForgetsOptimizerState(BaseTrainer):
    """Restores the scheduler but leaves the optimizer at its initial state."""

    def _restore_items(self, ckpt: dict[str, Any]) -> list[str]:
        optimizer = self.ckpt_items.pop("optimizer", None)
        try:
            return super()._restore_items(ckpt)
        finally:
            if optimizer is not None:
                self.ckpt_items["optimizer"] = optimizer


@mutant_of("check_resume_keeps_best_and_patience",
           expect="the run validated (epoch, improved, stop) [(0, True, False), (1, True, False), "
                  "(2, True, False)",
           proves=("RES-3.1", "RES-3.3"))
@mutant_of("check_resume_decides_alike_under_several_ranks",
           expect="(2, False, False), (3, True, False)",
           proves=("RES-3.1", "RES-3.3"))
class ForgetsBestOnResume(BaseTrainer):
    """Saves best tracking in the checkpoint but never reads it back."""

    def _restore_tracking(self, ckpt: dict[str, Any]) -> None:
        return None


@mutant_of("check_resume_keeps_best_and_patience",
           expect="(2, False, False), (3, False, False), (4, False, False), (5, False, True)]; "
                  "uninterrupted",
           proves=("RES-3.2", "RES-3.3"))
class ForgetsPatienceOnResume(BaseTrainer):
    """Restores the incumbent best but refills the patience counter on resume."""

    def _restore_tracking(self, ckpt: dict[str, Any]) -> None:
        super()._restore_tracking(ckpt)
        self.patience_left = self.cfg.val.patience


@mutant_of("check_resume_keeps_best_and_patience",
           expect="killed at val_after_save of epoch 1 and resumed from epoch 0, "
                  "the run validated (epoch, improved, stop) [(0, True, False), (1, False, False)",
           proves=("RES-3.4",))
class TakesBestScoreFromBestFile(BaseTrainer):
    """On resume, takes the incumbent best score from the best.pt beside the checkpoint: the
    newest best, which is right unless best.pt was written after that checkpoint (a kill
    between the best save and the last save of an improving epoch)."""

    def _restore_tracking(self, ckpt: dict[str, Any]) -> None:
        super()._restore_tracking(ckpt)
        load_from = self.cfg.ckpt.load_from
        best = None if load_from is None else Path(load_from).parent / "best.pt"
        if best is not None and best.is_file():
            saved = torch.load(best, map_location="cpu", weights_only=True)["trainer_state"]
            self.best_score = float(saved["best_score"])
            self.best_epoch = saved["best_epoch"]


@mutant_of("check_resume_keeps_best_and_patience",
           expect="killed at val_start of epoch 2 and resumed from epoch 2",
           proves=("RES-3.5",))
class CheckpointsBeforeValidation(BaseTrainer):
    """The seed's order: last.pt is written before the epoch's validation, so a crash in
    between resumes past a validation that never happened."""

    def _is_validation_due(self, epoch: int) -> bool:
        self._write_epoch_checkpoints()
        return super()._is_validation_due(epoch)

    def _write_epoch_checkpoints(self) -> None:
        if getattr(self, "_written", None) == self.epoch:
            return
        self._written = self.epoch
        super()._write_epoch_checkpoints()


@mutant_of("check_resume_is_bitwise_exact",
           expect="the final weights differ from the uninterrupted run",
           proves=("RES-4.1", "RES-4.2", "RES-4.3"))
class ForgetsRngState(BaseTrainer):
    """Saves RNG states but does not restore them: the data order changes after a resume."""

    def _restore_rng(self, ckpt: dict[str, Any]) -> None:
        return None


@mutant_of("check_resume_refuses_state_that_does_not_fit",
           expect="resuming with another optimizer class (Adam -> SGD) went on silently",
           proves=("RES-5.1",))
class SkipsStateThatDoesNotFit(BaseTrainer):
    """The seed's leniency: an item whose state is missing or does not load is left at init."""

    def _restore_items(self, ckpt: dict[str, Any]) -> list[str]:
        loaded = []
        for name, item in self.ckpt_items.items():
            key = f"{name}_state_dict"
            if name == "model" or key not in ckpt:
                continue
            try:
                item.load_state_dict(ckpt[key])
            except (ValueError, RuntimeError, KeyError):
                continue
            loaded.append(name)
        return loaded


@mutant_of("check_resume_is_bitwise_exact",
           expect="the final weights match, but at the resume point the numpy RNG state differed",
           proves=("RES-4.2",))
class RestoresTorchRngOnly(BaseTrainer):
    """Restores torch's generator but not python's or numpy's."""

    def _restore_rng(self, ckpt: dict[str, Any]) -> None:
        rng = ckpt.get("rng")
        if isinstance(rng, list) and self.rank < len(rng):
            torch.set_rng_state(rng[self.rank]["torch"])


@mutant_of("check_resume_continues_at_the_next_epoch",
           expect="the last.pt of epoch 1 says train_step 11, but the run had taken 12",
           proves=("RES-1.2",))
class SavesAStaleStepCount(BaseTrainer):
    """Writes last.pt with a step counter one optimizer step behind."""

    def _save(self, name: str) -> None:
        step = self.train_step
        self.train_step = step - 1 if name == "last.pt" else step
        try:
            super()._save(name)
        finally:
            self.train_step = step


@mutant_of("check_resume_keeps_best_and_patience",
           expect="killed at val_start of epoch 2 and resumed from epoch 1, the run validated "
                  "(epoch, improved, stop) [(0, True, False), (1, True, False), (2, True, False)",
           proves=("RES-3.6",))
class SavesTrackingFromBeforeValidation(BaseTrainer):
    """Writes last.pt after the validation, but with the best score, epoch and patience it
    captured before it: the checkpoint of epoch e does not carry e's outcome."""

    def _validate(self) -> bool:
        self._tracking_before = (self.best_score, self.best_epoch, self.patience_left)
        return super()._validate()

    def _save(self, name: str) -> None:
        before = getattr(self, "_tracking_before", None)
        if name == "best.pt" or before is None:
            super()._save(name)
            return
        now = (self.best_score, self.best_epoch, self.patience_left)
        self.best_score, self.best_epoch, self.patience_left = before
        try:
            super()._save(name)
        finally:
            self.best_score, self.best_epoch, self.patience_left = now


@mutant_of("check_resume_refuses_state_that_does_not_fit",
           expect="resuming with another optimizer class (Adam -> SGD) failed without naming "
                  "'optimizer'",
           proves=("RES-5.2",))
class MismatchErrorWithoutItem(BaseTrainer):
    """Refuses state that does not fit, but says only that the checkpoint does not fit."""

    def _resume_error(self, message: str) -> ResumeMismatchError:
        return ResumeMismatchError(
            f"resuming {self.ckpt_path}: the checkpoint does not fit this run. Pass "
            "ckpt.model_only=true or ckpt.resume=false to finetune from it instead.")


@mutant_of("check_resume_refuses_state_that_does_not_fit",
           expect="resuming with another optimizer class (Adam -> SGD) failed without naming "
                  "the way out",
           proves=("RES-5.3",))
class MismatchErrorWithoutWayOut(BaseTrainer):
    """Names the item that does not fit, but not how to go on (a finetune)."""

    def _resume_error(self, message: str) -> ResumeMismatchError:
        return ResumeMismatchError(f"resuming {self.ckpt_path}: {message}")


@mutant_of("check_resume_refuses_state_that_does_not_fit",
           expect="after the refused resume the optimizer and scheduler were restored and "
                  "scheduler2 was not: half-restored",
           proves=("RES-5.4",))
class RestoresItemsOneByOne(BaseTrainer):
    """Checks and loads each item in turn: an item that does not fit is found only after the
    ones before it were restored, and the refused resume leaves those restored."""

    def _restore_items(self, ckpt: dict[str, Any]) -> list[str]:
        loaded = []
        for name, item in _items(self):
            _refuse_unfit(self, ckpt, name, item)
            _load(self, ckpt, name, item)
            loaded.append(name)
        return loaded


@mutant_of("check_resume_keeps_best_and_patience",
           expect="interrupted at train_start of epoch 1, the trainer's resume from last.pt "
                  "raised KeyError: 'best_model_state_dict holds no weights'",
           proves=("RES-3.4",))
class ExpectsABestInEveryFile(BaseTrainer):
    """A resume reads the best score and weights as if every checkpoint held them: one
    written before any improvement (no best yet) stores none, and the resume fails on it."""

    def _save(self, name: str) -> None:
        if self.best_model is None and self.best_epoch is None:
            self.best_model = {}  # "no best yet" written as an empty set of weights
            try:
                super()._save(name)
            finally:
                self.best_model = None
            return
        super()._save(name)

    def _restore_tracking(self, ckpt: dict[str, Any]) -> None:
        super()._restore_tracking(ckpt)
        if not self.best_model:
            raise KeyError("best_model_state_dict holds no weights")


@mutant_of("check_resume_refuses_state_that_does_not_fit",
           expect="resuming with an extra optimizer param group, after the scheduler was "
                  "restored raised, but after the refused resume the scheduler was restored "
                  "and optimizer was not: half-restored",
           proves=("RES-5.4",))
class KeepsWhatLoadedBeforeAFailure(BaseTrainer):
    """Checks every item before loading any, but a load that raises part-way leaves the
    items loaded before it restored (it never puts them back)."""

    def _restore_items(self, ckpt: dict[str, Any]) -> list[str]:
        for name, item in _items(self):
            _refuse_unfit(self, ckpt, name, item)
        for name, item in _items(self):
            _load(self, ckpt, name, item)
        return [name for name, _ in _items(self)]


def _items(trainer: BaseTrainer) -> list[tuple[str, Any]]:
    """The registered items a resume restores (all but the model), in registration order."""
    return [(n, i) for n, i in trainer.ckpt_items.items() if n != "model"]


def _refuse_unfit(trainer: BaseTrainer, ckpt: dict[str, Any], name: str, item: Any) -> None:
    """The reference's refusal of an item the checkpoint lacks or holds of another class."""
    if f"{name}_state_dict" not in ckpt:
        raise trainer._resume_error(f"'{name}' is registered but the checkpoint carries "
                                    f"no {name}_state_dict")
    here = f"{type(item).__module__}.{type(item).__qualname__}"
    if ckpt.get(f"{name}_class", here) != here:
        raise trainer._resume_error(f"'{name}' is a {here} but the checkpoint holds a "
                                    f"{ckpt[f'{name}_class']}")


def _load(trainer: BaseTrainer, ckpt: dict[str, Any], name: str, item: Any) -> None:
    """Load one item, a failure raised as the reference's resume error (nothing put back)."""
    try:
        item.load_state_dict(ckpt[f"{name}_state_dict"])
    except (ValueError, RuntimeError, KeyError, TypeError) as e:
        raise trainer._resume_error(f"cannot restore '{name}': {e}") from None


@mutant_of("check_resume_is_bitwise_exact_under_several_ranks",
           expect="resumed, rank 1's state where it resumed differed: the numpy RNG state "
                  "differed",
           proves=("RES-4.2",))
class RestoresRngOnRankZeroOnly(BaseTrainer):
    """Saves every rank's RNG states but restores them on rank 0 alone: the other ranks
    resume with the generators of a fresh start."""

    def _restore_rng(self, ckpt: dict[str, Any]) -> None:
        if self.rank == 0:
            super()._restore_rng(ckpt)
