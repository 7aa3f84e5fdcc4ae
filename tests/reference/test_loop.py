"""LOOP: which epochs train, when validation and the test pass run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reference.reference_helpers import ScriptedTrainer, make_config

NAN = float("nan")


@pytest.mark.clause("LOOP-1")
def test_a_run_trains_every_epoch_once_in_order() -> None:
    trainer = ScriptedTrainer(make_config(num_epochs=4), scores=[0.1, 0.2, 0.3, 0.4])
    trainer.train()
    assert trainer.trained_epochs == [0, 1, 2, 3]
    assert trainer.train_step == 4 * 6  # six optimizer steps an epoch, none lost or repeated


@pytest.mark.clause("LOOP-2")
@pytest.mark.parametrize(("num_epochs", "every", "validated"), [
    (7, 3, [0, 3, 6]),
    (5, 3, [0, 3, 4]),  # the final epoch validates though 4 % 3 != 0
    (3, 1, [0, 1, 2]),
    (1, 5, [0]),
])
def test_validation_follows_every_nth_epoch_and_the_final_one(
        num_epochs: int, every: int, validated: list[int]) -> None:
    cfg = make_config(num_epochs=num_epochs, val={"every_n_epochs": every})
    trainer = ScriptedTrainer(cfg, scores=[0.5] * num_epochs)
    trainer.train()
    assert trainer.validated_epochs == validated
    for epoch in validated:  # each right after its epoch, before the next one trains
        position = trainer.events.index(f"val {epoch}")
        assert trainer.events[position - 1] == f"train {epoch}"


@pytest.mark.clause("LOOP-2")
def test_val_first_adds_one_validation_before_the_first_epoch() -> None:
    cfg = make_config(num_epochs=2, val={"first": True})
    trainer = ScriptedTrainer(cfg, scores=[0.5, 0.6], first_score=0.1)
    trainer.train()
    assert trainer.events == ["val -1", "train 0", "val 0", "train 1", "val 1", "test"]


@pytest.mark.clause("LOOP-3")
def test_zero_epochs_trains_nothing_but_still_validates_first_and_tests() -> None:
    cfg = make_config(num_epochs=0, val={"first": True})
    trainer = ScriptedTrainer(cfg, first_score=0.3)
    trainer.train()
    assert trainer.events == ["val -1", "test"]
    assert trainer.train_step == 0
    assert trainer.best_epoch == -1
    assert trainer.test_weights is not None
    for name, value in trainer.initial_weights.items():
        assert trainer.test_weights[name].equal(value)


@pytest.mark.clause("LOOP-3")
def test_zero_epochs_without_val_first_runs_only_the_test_pass() -> None:
    trainer = ScriptedTrainer(make_config(num_epochs=0))
    trainer.train()
    assert trainer.events == ["test"]
    assert trainer.train_step == 0


@pytest.mark.clause("LOOP-4")
def test_the_test_pass_runs_once_after_the_loop_is_exhausted() -> None:
    trainer = ScriptedTrainer(make_config(num_epochs=3), scores=[0.1, 0.2, 0.3])
    trainer.train()
    assert trainer.events.count("test") == 1
    assert trainer.events[-1] == "test"
    assert trainer.events[-2] == "val 2"


@pytest.mark.clause("LOOP-4")
def test_the_test_pass_runs_once_after_an_early_stop() -> None:
    cfg = make_config(num_epochs=6, val={"patience": 1})
    trainer = ScriptedTrainer(cfg, scores=[0.5, 0.4, 0.9, 0.9, 0.9, 0.9])
    trainer.train()
    assert trainer.events == ["train 0", "val 0", "train 1", "val 1", "test"]


@pytest.mark.clause("LOOP-4")
def test_the_test_pass_never_runs_when_disabled() -> None:
    cfg = make_config(num_epochs=2, test={"enable": False}, val={"patience": 1})
    for scores in ([0.1, 0.2], [0.5, 0.1]):  # exhausted, then early stop (at the final epoch)
        trainer = ScriptedTrainer(cfg, scores=scores)
        trainer.train()
        assert "test" not in trainer.events
    eval_only = ScriptedTrainer(make_config(num_epochs=0, test={"enable": False}))
    eval_only.train()
    assert eval_only.events == []


def test_an_epochs_validation_metrics_are_written_with_that_epoch(tmp_path: Path) -> None:
    trainer = ScriptedTrainer(make_config(tmp_path, num_epochs=3), scores=[0.1, 0.2, 0.3])
    trainer.train()
    assert trainer.ckpt_dir is not None
    lines = (trainer.ckpt_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    scores = {r["epoch"]: r["val/score"] for r in records if "val/score" in r}
    assert scores == {0: 0.1, 1: 0.2, 2: 0.3}
    assert any("test/passes" in r for r in records)
