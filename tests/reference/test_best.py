"""BEST: what counts as an improvement, and what the best weights and best.pt hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.reference.reference_helpers import ScriptedTrainer, assert_same_weights, make_config
from trainspec.reference.example import MLPTrainer, main

NAN = float("nan")


@pytest.mark.clause("BEST-1")
@pytest.mark.parametrize(("minimize", "scores", "improved"), [
    (False, [0.5, 0.5, 0.6, 0.6], [True, False, True, False]),
    (True, [0.5, 0.5, 0.4, 0.4], [True, False, True, False]),
])
def test_a_tie_is_not_an_improvement(minimize: bool, scores: list[float],
                                     improved: list[bool]) -> None:
    cfg = make_config(num_epochs=4, val={"minimize": minimize})
    trainer = ScriptedTrainer(cfg, scores=scores)
    trainer.train()
    assert [v.improved for v in trainer.validations] == improved


@pytest.mark.clause("BEST-1")
@pytest.mark.parametrize(("minimize", "scores", "improved"), [
    (False, [0.5, 0.4, 0.7, 0.6, 0.8], [True, False, True, False, True]),
    (True, [0.5, 0.6, 0.3, 0.4, 0.1], [True, False, True, False, True]),
])
def test_only_a_strictly_better_score_in_the_configured_direction_improves(
        minimize: bool, scores: list[float], improved: list[bool]) -> None:
    cfg = make_config(num_epochs=5, val={"minimize": minimize})
    trainer = ScriptedTrainer(cfg, scores=scores)
    trainer.train()
    assert [v.improved for v in trainer.validations] == improved
    assert trainer.best_epoch == 4


@pytest.mark.clause("BEST-1")
@pytest.mark.parametrize(("minimize", "first"), [(False, -1e308), (True, 1e308)])
def test_any_finite_first_score_improves_on_the_empty_incumbent(minimize: bool,
                                                               first: float) -> None:
    cfg = make_config(num_epochs=1, val={"minimize": minimize})
    trainer = ScriptedTrainer(cfg, scores=[first])
    trainer.train()
    assert trainer.improved_epochs == [0]


@pytest.mark.clause("BEST-2")
def test_the_best_weights_are_a_copy_that_later_training_leaves_alone() -> None:
    trainer = ScriptedTrainer(make_config(num_epochs=4), scores=[0.2, 0.9, 0.1, 0.1])
    trainer.train()
    assert trainer.best_epoch == 1
    assert trainer.best_model is not None
    assert_same_weights(trainer.best_model, trainer.weights_after[1])
    final = trainer.weights_after[3]
    assert any(not final[k].equal(v) for k, v in trainer.weights_after[1].items())


@pytest.mark.clause("BEST-3")
def test_best_pt_is_written_on_every_improvement_and_only_then(tmp_path: Path) -> None:
    scores = [0.5, 0.4, 0.7, 0.7, NAN, 0.8]
    trainer = ScriptedTrainer(make_config(tmp_path, num_epochs=6), scores=scores)
    trainer.train()
    seen = trainer.best_pt_seen
    assert all(file is not None for file in seen)
    assert [file.epoch for file in seen if file is not None] == [0, 0, 2, 2, 2, 5]
    for i in range(1, len(seen)):
        before, after = seen[i - 1], seen[i]
        assert before is not None
        assert after is not None
        # rewritten (a new inode and mtime) exactly when this validation improved
        assert (before.stamp != after.stamp) == trainer.validations[i].improved, i


@pytest.mark.clause("BEST-3")
def test_best_pt_holds_the_improving_epochs_weights_epoch_and_step(tmp_path: Path) -> None:
    trainer = ScriptedTrainer(make_config(tmp_path, num_epochs=4), scores=[0.1, 0.3, 0.2, 0.2])
    trainer.train()
    for validation, file in zip(trainer.validations, trainer.best_pt_seen, strict=True):
        assert file is not None
        best = max(v.epoch for v in trainer.validations[: validation.epoch + 1] if v.improved)
        assert file.epoch == best
        assert file.ckpt["train_step"] == trainer.steps_after[best]
        assert_same_weights(file.ckpt["model_state_dict"], trainer.weights_after[best])


@pytest.mark.clause("BEST-3")
def test_no_best_pt_without_an_improvement_or_without_checkpointing(tmp_path: Path) -> None:
    trainer = ScriptedTrainer(make_config(tmp_path / "on", num_epochs=2), scores=[NAN, NAN])
    trainer.train()
    assert "best.pt" not in trainer.checkpoint_files()
    assert "last.pt" in trainer.checkpoint_files()
    off = ScriptedTrainer(make_config(None, num_epochs=2), scores=[0.1, 0.2])
    off.train()
    assert off.ckpt_dir is None
    assert off.improved_epochs == [0, 1]


@pytest.mark.clause("BEST-3")
def test_best_pt_of_val_first_has_epoch_minus_one_and_step_zero(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, num_epochs=2, val={"first": True})
    trainer = ScriptedTrainer(cfg, scores=[0.1, 0.2], first_score=0.5)
    trainer.train()
    file = trainer.best_pt_seen[0]
    assert file is not None
    assert (file.epoch, file.ckpt["train_step"]) == (-1, 0)
    assert_same_weights(file.ckpt["model_state_dict"], trainer.initial_weights)


@pytest.mark.clause("BEST-4")
def test_best_model_is_set_iff_a_validation_improved() -> None:
    improving = ScriptedTrainer(make_config(num_epochs=3), scores=[0.1, 0.9, 0.2])
    improving.train()
    assert improving.test_weights is not None
    assert improving.best_model is not None
    assert_same_weights(improving.test_weights, improving.weights_after[1])

    never = ScriptedTrainer(make_config(num_epochs=3), scores=[NAN, NAN, NAN])
    never.train()
    assert never.best_model is None
    assert never.best_epoch is None
    assert never.test_weights is not None
    assert_same_weights(never.test_weights, never.weights_after[2])


@pytest.mark.clause("BEST-4")
def test_the_example_trainer_tests_the_best_weights() -> None:
    trainer = MLPTrainer(make_config(num_epochs=3))
    trainer.train()
    assert trainer.best_model is not None
    assert_same_weights(trainer.model.state_dict(), trainer.best_model)
    assert trainer.test_acc == trainer.accuracy(trainer.test_loader)


def test_the_example_prints_its_best_epoch_and_test_accuracy(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--epochs", "2", "--ckpt-dir", str(tmp_path)]) == 0
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"best epoch [01] \(val acc [01]\.\d{4}\), test acc [01]\.\d{4}",
                        last_line)
    (run_dir,) = tmp_path.iterdir()
    assert {"best.pt", "last.pt"} <= {p.name for p in run_dir.iterdir()}
