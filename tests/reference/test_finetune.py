"""FT: a finetune takes a checkpoint's weights and nothing else."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from tests.reference.reference_helpers import (
    Counter,
    ScriptedTrainer,
    assert_same_weights,
    make_config,
)
from trainspec.reference import TrainConfig, load_checkpoint


def from_checkpoint(cfg: TrainConfig, path: Path, *, resume: bool = False,
                    model_only: bool = False) -> TrainConfig:
    return dataclasses.replace(cfg, ckpt=dataclasses.replace(
        cfg.ckpt, load_from=str(path), resume=resume, model_only=model_only))


@pytest.fixture
def finished(tmp_path: Path) -> tuple[TrainConfig, Path]:
    """A 3-epoch run that improved at epoch 1 and spent one count of patience: its last.pt."""
    cfg = make_config(tmp_path, num_epochs=3, val={"patience": 3})
    trainer = ScriptedTrainer(cfg, scores=[0.8, 0.9, 0.1], extra_items={"counter": Counter(4)})
    trainer.train()
    assert trainer.ckpt_dir is not None
    return cfg, trainer.ckpt_dir / "last.pt"


def assert_fresh_run_from_weights(trainer: ScriptedTrainer, path: Path) -> None:
    saved = load_checkpoint(path)
    assert (trainer.epoch, trainer.train_step, trainer.is_resumed) == (0, 0, False)
    assert_same_weights(trainer.initial_weights, saved["model_state_dict"])
    assert trainer.optimizer.state_dict()["state"] == {}
    assert trainer.scheduler.state_dict()["last_epoch"] == 0
    assert (trainer.best_epoch, trainer.best_model, trainer.best_score) == (None, None,
                                                                           float("-inf"))
    assert trainer.patience_left == trainer.cfg.val.patience


@pytest.mark.clause("FT-1")
def test_a_finetune_starts_at_epoch_zero_from_the_weights_with_fresh_state(
        finished: tuple[TrainConfig, Path]) -> None:
    cfg, path = finished
    trainer = ScriptedTrainer(from_checkpoint(cfg, path), scores=[0.1, 0.2, 0.3])
    assert_fresh_run_from_weights(trainer, path)
    trainer.train()
    assert trainer.trained_epochs == [0, 1, 2]
    assert trainer.train_step == 3 * 6


@pytest.mark.clause("FT-2")
def test_model_only_restores_nothing_but_weights_even_with_resume(
        finished: tuple[TrainConfig, Path]) -> None:
    cfg, path = finished
    counter = Counter(0)
    trainer = ScriptedTrainer(from_checkpoint(cfg, path, resume=True, model_only=True),
                              scores=[0.1, 0.2, 0.3], extra_items={"counter": counter})
    assert_fresh_run_from_weights(trainer, path)
    assert counter.value == 0
    trainer.train()
    assert trainer.trained_epochs == [0, 1, 2]


@pytest.mark.clause("FT-3")
@pytest.mark.parametrize(("optimizer", "param_groups"), [("sgd", 1), ("adamw", 2), ("sgd", 2)])
def test_a_finetune_works_with_another_optimizer_or_param_groups(
        finished: tuple[TrainConfig, Path], optimizer: str, param_groups: int) -> None:
    cfg, path = finished
    trainer = ScriptedTrainer(from_checkpoint(cfg, path), scores=[0.1, 0.2, 0.3],
                              optimizer=optimizer, param_groups=param_groups)  # type: ignore[arg-type]
    assert_fresh_run_from_weights(trainer, path)
    trainer.train()
    assert trainer.trained_epochs == [0, 1, 2]


@pytest.mark.clause("FT-3")
def test_a_finetune_works_from_a_file_of_bare_weights(tmp_path: Path) -> None:
    source = ScriptedTrainer(make_config(num_epochs=1), scores=[0.1])
    source.train()
    path = tmp_path / "weights.pt"
    torch.save({"model_state_dict": source.final_weights()}, path)
    trainer = ScriptedTrainer(from_checkpoint(make_config(tmp_path, num_epochs=1), path),
                              scores=[0.1])
    assert_same_weights(trainer.initial_weights, source.final_weights())
    trainer.train()
    assert trainer.trained_epochs == [0]


@pytest.mark.clause("FT-4")
def test_best_tracking_and_patience_start_fresh_in_a_finetune(
        finished: tuple[TrainConfig, Path]) -> None:
    cfg, path = finished  # its best score 0.9 beats everything below; 2 of 3 patience left
    trainer = ScriptedTrainer(from_checkpoint(cfg, path), scores=[0.3, 0.2, 0.1])
    trainer.train()
    assert [v.improved for v in trainer.validations] == [True, False, False]
    assert [v.patience_left for v in trainer.validations] == [3, 2, 1]
    assert trainer.best_epoch == 0
    assert trainer.trained_epochs == [0, 1, 2]  # a carried-over counter would have stopped
