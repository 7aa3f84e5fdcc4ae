"""A trainer without crash points: each point the suite cannot reach is n/a with the reason,
never a fail, and the points it sees itself (epoch boundaries, writes) are still judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapter_runs import check_clauses

ROOT = Path(__file__).resolve().parent.parent


def test_points_the_trainer_lacks_are_not_judged(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    got = check_clauses("tests.lacking_points:WithoutCrashPoints",
                        ["RES-1", "RES-3", "RES-4", "CKPT-2"], tmp_path)
    assert {c: v["verdict"] for c, v in got.items()} == {
        "RES-1": "pass", "RES-3": "pass", "RES-4": "pass", "CKPT-2": "pass"}
    # train_start and train_end are taken from the records: only the validation points go
    for clause in ("RES-1", "RES-3"):
        evidence = got[clause]["evidence"]
        assert "not judged: val_start of epoch 2, a point the trainer does not have " \
            "(entering the validation after an epoch" in evidence
        assert "val_after_save of epoch 3, a point" in evidence
        assert "train_start of epoch 3" not in evidence
    assert "val_start of epoch 1, a point" in got["RES-4"]["evidence"]
