"""PAT: early stopping counts non-improving validations, exactly as the oracle says.

The property test compares the reference's decisions with the suite's own oracle
(``trainspec.conformance.spec.oracle.decide``), itself judged by tests/test_oracle.py against
tables worked by hand.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.reference.reference_helpers import ScriptedTrainer, make_config
from trainspec.conformance.spec.oracle import decide, expected_validations

NAN, INF = math.nan, math.inf


@pytest.mark.clause("PAT-1")
@pytest.mark.parametrize("patience", [1, 2, 3])
def test_training_stops_right_after_the_pth_consecutive_non_improvement(patience: int) -> None:
    cfg = make_config(num_epochs=6, val={"patience": patience})
    trainer = ScriptedTrainer(cfg, scores=[0.5, 0.1, 0.1, 0.1, 0.1, 0.1])
    trainer.train()
    assert trainer.trained_epochs == list(range(patience + 1))
    assert [v.stop for v in trainer.validations] == [False] * patience + [True]
    assert trainer.events[-1] == "test"


@pytest.mark.clause("PAT-1", "LOOP-2")
def test_val_first_can_stop_the_run_before_any_training() -> None:
    cfg = make_config(num_epochs=3, val={"first": True, "patience": 1})
    trainer = ScriptedTrainer(cfg, first_score=NAN)
    trainer.train()
    assert trainer.events == ["val -1", "test"]
    assert trainer.train_step == 0


@pytest.mark.clause("PAT-2")
def test_an_improvement_refills_the_counter() -> None:
    cfg = make_config(num_epochs=6, val={"patience": 2})
    trainer = ScriptedTrainer(cfg, scores=[0.5, 0.4, 0.6, 0.4, 0.3, 0.9])
    trainer.train()
    assert [v.patience_left for v in trainer.validations] == [2, 1, 2, 1, 0]
    assert trainer.trained_epochs == [0, 1, 2, 3, 4]


@pytest.mark.clause("PAT-3")
def test_non_improvements_before_start_patience_are_not_counted() -> None:
    cfg = make_config(num_epochs=6, val={"patience": 1, "start_patience": 3})
    trainer = ScriptedTrainer(cfg, scores=[0.5, 0.1, 0.1, 0.1, 0.1, 0.1])
    trainer.train()
    assert [v.patience_left for v in trainer.validations] == [1, 1, 1, 0]
    assert trainer.trained_epochs == [0, 1, 2, 3]


@pytest.mark.clause("PAT-4")
@pytest.mark.parametrize("first_score", [0.9, NAN], ids=["finite-first", "nan-first"])
def test_unset_patience_never_stops_even_with_val_first(first_score: float) -> None:
    cfg = make_config(num_epochs=5, val={"first": True, "patience": None})
    trainer = ScriptedTrainer(cfg, scores=[0.1, NAN, 0.1, -INF, 0.1], first_score=first_score)
    trainer.train()
    assert trainer.trained_epochs == [0, 1, 2, 3, 4]
    assert not any(v.stop for v in trainer.validations)
    assert trainer.patience_left is None


# ---------------------------------------------------------------------------- PAT-5: the oracle


SCORES = st.sampled_from([0.1, 0.2, 0.3, NAN, INF, -INF])  # few values: ties are common


@pytest.mark.clause("PAT-5")
@settings(deadline=None)
@given(scores=st.lists(SCORES, max_size=6), first=st.none() | SCORES,
       patience=st.none() | st.integers(1, 4), start_patience=st.integers(0, 4),
       minimize=st.booleans())
def test_improvements_stop_and_best_epoch_match_the_oracle(
        scores: list[float], first: float | None, patience: int | None, start_patience: int,
        minimize: bool) -> None:
    cfg = make_config(num_epochs=len(scores), test={"enable": False}, val={
        "first": first is not None, "patience": patience, "start_patience": start_patience,
        "minimize": minimize})
    trainer = ScriptedTrainer(cfg, scores=scores, first_score=NAN if first is None else first)
    trainer.train()
    due = expected_validations(num_epochs=len(scores), every_n_epochs=1, first=first is not None)
    want = decide(list(zip(due, ([] if first is None else [first]) + scores, strict=True)),
                  minimize=minimize, patience=patience, start_patience=start_patience,
                  num_epochs=len(scores))
    stops = [v.epoch for v in trainer.validations if v.stop]
    assert [v.improved for v in trainer.validations] == [d.improved for d in want.decisions]
    assert [v.patience_left for v in trainer.validations] == \
        [d.patience_left for d in want.decisions]
    assert (stops[0] if stops else None) == want.stop_epoch
    assert trainer.best_epoch == want.best_epoch
    assert trainer.trained_epochs == list(want.epochs_trained)
