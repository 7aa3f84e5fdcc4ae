"""NAN: non-finite scores never win, never poison best tracking, and count for patience."""

from __future__ import annotations

import math

import pytest

from tests.reference.reference_helpers import ScriptedTrainer, make_config

NAN, INF = math.nan, math.inf
NON_FINITE = [NAN, INF, -INF]


@pytest.mark.clause("NAN-1")
@pytest.mark.parametrize("minimize", [False, True])
@pytest.mark.parametrize("bad", NON_FINITE, ids=["nan", "+inf", "-inf"])
def test_a_non_finite_score_never_improves(minimize: bool, bad: float) -> None:
    cfg = make_config(num_epochs=3, val={"minimize": minimize})
    trainer = ScriptedTrainer(cfg, scores=[0.5, bad, bad])
    trainer.train()
    assert [v.improved for v in trainer.validations] == [True, False, False]
    assert (trainer.best_epoch, trainer.best_score) == (0, 0.5)


@pytest.mark.clause("NAN-1")
@pytest.mark.parametrize("minimize", [False, True])
def test_a_run_of_only_non_finite_scores_has_no_best(minimize: bool) -> None:
    cfg = make_config(num_epochs=3, val={"minimize": minimize, "first": True})
    trainer = ScriptedTrainer(cfg, scores=NON_FINITE, first_score=-INF if minimize else INF)
    trainer.train()
    assert not any(v.improved for v in trainer.validations)
    assert trainer.best_epoch is None
    assert trainer.best_model is None


@pytest.mark.clause("NAN-2")
@pytest.mark.parametrize("minimize", [False, True])
def test_the_first_finite_score_after_non_finite_ones_improves(minimize: bool) -> None:
    # a tracker poisoned by NaN (best = nan) would compare False with everything after it
    sign = -1.0 if minimize else 1.0  # +1: higher is better
    cfg = make_config(num_epochs=6, val={"minimize": minimize})
    scores = [NAN, INF, -INF, sign * -1e6, sign * -2e6, sign * 5.0]
    trainer = ScriptedTrainer(cfg, scores=scores)
    trainer.train()
    assert trainer.improved_epochs == [3, 5]
    assert trainer.best_epoch == 5


@pytest.mark.clause("NAN-3")
def test_a_non_finite_score_counts_once_for_patience_without_a_refill() -> None:
    cfg = make_config(num_epochs=6, val={"patience": 2})
    trainer = ScriptedTrainer(cfg, scores=[1.0, NAN, 2.0, INF, -INF, 3.0])
    trainer.train()
    left = [v.patience_left for v in trainer.validations]
    assert left == [2, 1, 2, 1, 0]
    assert trainer.trained_epochs == [0, 1, 2, 3, 4]
    assert [v.stop for v in trainer.validations] == [False] * 4 + [True]


@pytest.mark.clause("NAN-3")
def test_a_single_non_finite_score_does_not_stop_a_patient_run() -> None:
    cfg = make_config(num_epochs=3, val={"patience": 2})
    trainer = ScriptedTrainer(cfg, scores=[NAN, 0.1, NAN])
    trainer.train()
    assert trainer.trained_epochs == [0, 1, 2]
    assert trainer.best_epoch == 1
