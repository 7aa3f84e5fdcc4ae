"""RES: a resumed run continues where the interrupted one stopped, and decides alike."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Literal

import pytest
import torch

from tests.reference.reference_helpers import (
    Counter,
    Crash,
    ScriptedTrainer,
    assert_same_state,
    assert_same_weights,
    make_config,
)
from trainspec.errors import CheckpointCorruptError, ResumeMismatchError
from trainspec.reference import TrainConfig, load_checkpoint

NAN = math.nan


def resuming(cfg: TrainConfig, path: Path, **ckpt: object) -> TrainConfig:
    """``cfg`` resuming from ``path`` (``ckpt`` overrides more ``ckpt.*`` keys)."""
    return dataclasses.replace(cfg, ckpt=dataclasses.replace(
        cfg.ckpt, load_from=str(path), resume=True, **ckpt))  # type: ignore[arg-type]


def interrupt(cfg: TrainConfig, crash_at: tuple[Literal["train", "val", "test"], int],
              **kwargs: object) -> ScriptedTrainer:
    trainer = ScriptedTrainer(cfg, crash_at=crash_at, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(Crash):
        trainer.train()
    return trainer


def last_pt(trainer: ScriptedTrainer) -> Path:
    assert trainer.ckpt_dir is not None
    return trainer.ckpt_dir / "last.pt"


@pytest.mark.clause("RES-1", "LOOP-1")
def test_a_resume_continues_at_the_next_epoch_with_the_saved_step(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, num_epochs=5)
    scores = [0.1, 0.2, 0.3, 0.4, 0.5]
    crashed = interrupt(cfg, ("train", 3), scores=scores)
    assert load_checkpoint(last_pt(crashed))["epoch"] == 2

    resumed = ScriptedTrainer(resuming(cfg, last_pt(crashed)), scores=scores)
    assert (resumed.epoch, resumed.train_step) == (3, crashed.steps_after[2])
    resumed.train()
    assert resumed.trained_epochs == [3, 4]
    assert resumed.steps_after[4] == crashed.steps_after[2] + 2 * 6


@pytest.mark.clause("RES-1")
def test_a_resume_from_an_epoch_checkpoint_repeats_and_skips_nothing(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, num_epochs=4, ckpt={"every_n_epochs": 1})
    full = ScriptedTrainer(cfg, scores=[0.1, 0.2, 0.3, 0.4])
    full.train()
    assert full.ckpt_dir is not None
    resumed = ScriptedTrainer(resuming(cfg, full.ckpt_dir / "epoch_1.pt"),
                              scores=[0.1, 0.2, 0.3, 0.4])
    resumed.train()
    assert resumed.trained_epochs == [2, 3]
    assert resumed.validated_epochs == [2, 3]
    assert resumed.steps_after == {e: full.steps_after[e] for e in (2, 3)}


@pytest.mark.clause("RES-2")
def test_every_registered_item_but_the_model_is_restored(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, num_epochs=4)
    crashed = interrupt(cfg, ("train", 2), scores=[0.1] * 4,
                        extra_items={"counter": Counter(7)})
    saved = load_checkpoint(last_pt(crashed))

    resumed = ScriptedTrainer(resuming(cfg, last_pt(crashed)), scores=[0.1] * 4,
                              extra_items={"counter": Counter(0)})
    assert resumed.optimizer.state_dict()["state"]  # AdamW moments, not a fresh optimizer
    assert_same_state(resumed.optimizer.state_dict(), saved["optimizer_state_dict"])
    assert_same_state(resumed.scheduler.state_dict(), saved["scheduler_state_dict"])
    assert resumed.ckpt_items["counter"].state_dict() == {"value": 7}
    # the model is the subclass's to load, in setup: the base hands it the checkpoint
    assert resumed.setup_ckpt is not None
    assert_same_weights(resumed.initial_weights, saved["model_state_dict"])


class IgnoresCheckpointModel(ScriptedTrainer):
    """A subclass that never loads the checkpoint's weights."""

    def setup(self, ckpt: dict[str, object] | None) -> None:
        super().setup(None)


@pytest.mark.clause("RES-2")
def test_the_base_leaves_the_model_weights_to_the_subclass(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, num_epochs=3)
    crashed = interrupt(cfg, ("train", 2), scores=[0.1] * 3)
    fresh = ScriptedTrainer(make_config(num_epochs=3))
    resumed = IgnoresCheckpointModel(resuming(cfg, last_pt(crashed)), scores=[0.1] * 3)
    assert resumed.epoch == 2  # resumed all the same
    assert_same_weights(resumed.initial_weights, fresh.initial_weights)


# ------------------------------------------------------------------------- RES-3 and RES-4

# validations after -1 (val.first), 0, 2, 4, 6, 8: improve, improve, tie, improve, NaN, worse:
# patience 2 runs out after epoch 8, so epoch 9 never trains; the best epoch is 4
RES3_SCORES = [0.5, 9.0, 0.5, 9.0, 0.7, 9.0, NAN, 9.0, 0.6, 9.0]


def res3_config(root: Path) -> TrainConfig:
    return make_config(root, num_epochs=10, val={
        "first": True, "every_n_epochs": 2, "patience": 2})


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> ScriptedTrainer:
    trainer = ScriptedTrainer(res3_config(tmp_path_factory.mktemp("full")), scores=RES3_SCORES,
                              first_score=0.3)
    trainer.train()
    assert trainer.trained_epochs == list(range(9))
    assert trainer.best_epoch == 4
    return trainer


def newest_best_pt(*trainers: ScriptedTrainer) -> dict[str, object]:
    for trainer in reversed(trainers):
        if trainer.ckpt_dir is not None and (trainer.ckpt_dir / "best.pt").exists():
            return load_checkpoint(trainer.ckpt_dir / "best.pt")
    raise AssertionError("no best.pt in any run directory")


@pytest.mark.clause("RES-3", "RES-4")
@pytest.mark.parametrize("crash_at", [
    ("train", 1),  # right after val.first and epoch 0's improvement
    ("val", 2),  # epoch 2 trained, its validation (a tie) and checkpoint not yet done
    ("train", 5),  # patience just refilled
    ("train", 7),  # one count of patience spent on a NaN
    ("val", 8),  # before the validation that stops the run
    ("test", -1),  # after the stop, before the test pass
], ids=str)
def test_an_interrupted_and_resumed_run_decides_like_the_uninterrupted_one(
        tmp_path: Path, uninterrupted: ScriptedTrainer,
        crash_at: tuple[Literal["train", "val", "test"], int]) -> None:
    cfg = res3_config(tmp_path)
    crashed = interrupt(cfg, crash_at, scores=RES3_SCORES, first_score=0.3)
    resumed = ScriptedTrainer(resuming(cfg, last_pt(crashed)), scores=RES3_SCORES,
                              first_score=0.3)
    resumed.train()

    both = crashed.validations + resumed.validations
    assert [(v.epoch, v.improved, v.stop) for v in both] == [
        (v.epoch, v.improved, v.stop) for v in uninterrupted.validations]
    start = int(load_checkpoint(last_pt(crashed))["epoch"]) + 1
    assert resumed.trained_epochs == [e for e in uninterrupted.trained_epochs if e >= start]
    assert resumed.best_epoch == uninterrupted.best_epoch == 4
    assert resumed.best_model is not None
    assert uninterrupted.best_model is not None
    assert_same_weights(resumed.best_model, uninterrupted.best_model)
    assert resumed.test_weights is not None
    assert uninterrupted.test_weights is not None
    assert_same_weights(resumed.test_weights, uninterrupted.test_weights)
    best_pt = newest_best_pt(crashed, resumed)
    assert best_pt["epoch"] == 4
    assert_same_weights(best_pt["model_state_dict"],  # type: ignore[arg-type]
                        uninterrupted.weights_after[4])


@pytest.mark.clause("RES-4")
@pytest.mark.parametrize("crash_epoch", [1, 3])
def test_crash_and_resume_ends_bitwise_equal_to_the_uninterrupted_run(
        tmp_path: Path, crash_epoch: int) -> None:
    cfg = make_config(tmp_path, num_epochs=4, grad_accum_steps=2)
    scores = [0.1, 0.2, 0.3, 0.4]
    full = ScriptedTrainer(cfg, scores=scores)
    full.train()
    crashed = interrupt(cfg, ("train", crash_epoch), scores=scores)
    resumed = ScriptedTrainer(resuming(cfg, last_pt(crashed)), scores=scores)
    resumed.train()
    for epoch in range(crash_epoch, 4):  # every epoch after the resume, not only the last
        assert_same_weights(resumed.weights_after[epoch], full.weights_after[epoch])
    assert_same_state(resumed.optimizer.state_dict(), full.optimizer.state_dict())
    assert_same_state(resumed.scheduler.state_dict(), full.scheduler.state_dict())
    assert resumed.train_step == full.train_step


# ------------------------------------------------------------------------------- RES-5


@pytest.fixture
def checkpoint(tmp_path: Path) -> tuple[TrainConfig, Path]:
    cfg = make_config(tmp_path, num_epochs=3)
    crashed = interrupt(cfg, ("train", 1), scores=[0.1] * 3, extra_items={"counter": Counter(5)})
    return cfg, last_pt(crashed)


@pytest.mark.clause("RES-5")
def test_a_resume_into_another_optimizer_class_names_it_and_the_way_out(
        checkpoint: tuple[TrainConfig, Path]) -> None:
    cfg, path = checkpoint
    with pytest.raises(ResumeMismatchError, match=r"'optimizer' is a torch\.optim\.sgd\.SGD.*"
                       r"AdamW.*ckpt\.model_only=true or ckpt\.resume=false"):
        ScriptedTrainer(resuming(cfg, path), optimizer="sgd", extra_items={"counter": Counter()})


@pytest.mark.clause("RES-5")
def test_a_registered_item_missing_from_the_checkpoint_is_named(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, num_epochs=3)
    crashed = interrupt(cfg, ("train", 1), scores=[0.1] * 3)
    with pytest.raises(ResumeMismatchError, match=r"'counter' is registered.*no "
                       r"counter_state_dict.*ckpt\.model_only=true"):
        ScriptedTrainer(resuming(cfg, last_pt(crashed)), extra_items={"counter": Counter()})


@pytest.mark.clause("RES-5")
def test_a_failed_restore_puts_back_the_items_already_restored(
        checkpoint: tuple[TrainConfig, Path]) -> None:
    cfg, path = checkpoint
    counter = Counter(0)  # registered first, so restored before the optimizer fails
    with pytest.raises(ResumeMismatchError, match=r"cannot restore 'optimizer'.*"
                       r"ckpt\.model_only=true"):
        ScriptedTrainer(resuming(cfg, path), param_groups=2, extra_items={"counter": counter})
    assert counter.value == 0


@pytest.mark.clause("RES-5")
def test_a_resume_that_flips_the_score_direction_is_refused(
        checkpoint: tuple[TrainConfig, Path]) -> None:
    cfg, path = checkpoint
    flipped = dataclasses.replace(cfg, val=dataclasses.replace(cfg.val, minimize=True))
    with pytest.raises(ResumeMismatchError, match=r"val\.minimize is True.*minimize=False"):
        ScriptedTrainer(resuming(flipped, path), extra_items={"counter": Counter()})


@pytest.mark.clause("RES-5")
def test_a_checkpoint_without_an_epoch_cannot_be_resumed(tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"model_state_dict": ScriptedTrainer(make_config()).initial_weights}, path)
    with pytest.raises(CheckpointCorruptError, match=r"weights\.pt: cannot resume.*no epoch "
                       r"or train_step.*ckpt\.resume=false"):
        ScriptedTrainer(resuming(make_config(tmp_path), path))
