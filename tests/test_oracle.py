"""The oracle against tables worked by hand from the clause texts (BEST-1, NAN-1..3, PAT-1..4,
LOOP-2), so that the one pure judge every check leans on is itself judged.

Each row lists the validations a run makes, ``(epoch, score)`` with epoch ``None`` for
``val.first``, and what the spec says follows: which improve, where the patience counter
stands after each, after which epoch the run stops (-1: at ``val.first``; ``None``: it never
stops) and whose weights are best (-1: the ``val.first`` weights). Maximizing unless a row
says otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from trainspec.conformance.spec.oracle import decide, expected_validations, is_improvement

NAN, INF = math.nan, math.inf

# (score, incumbent, minimize, improves?) -- BEST-1, NAN-1
IMPROVEMENTS = [
    pytest.param(0.4, 0.5, True, True, id="a lower score improves when minimizing"),
    pytest.param(0.6, 0.5, True, False, id="a higher score does not improve when minimizing"),
    pytest.param(0.6, 0.5, False, True, id="a higher score improves when maximizing"),
    pytest.param(0.4, 0.5, False, False, id="a lower score does not improve when maximizing"),
    pytest.param(0.5, 0.5, True, False, id="a tie is no improvement when minimizing"),
    pytest.param(0.5, 0.5, False, False, id="a tie is no improvement when maximizing"),
    pytest.param(-0.0, 0.0, True, False, id="minus zero ties zero"),
    pytest.param(2.0, INF, True, True, id="any finite score beats the +inf start when minimizing"),
    pytest.param(-2.0, -INF, False, True,
                 id="any finite score beats the -inf start when maximizing"),
    pytest.param(NAN, INF, True, False, id="nan never improves, even on the start when minimizing"),
    pytest.param(NAN, -INF, False, False,
                 id="nan never improves, even on the start when maximizing"),
    pytest.param(-INF, 0.5, True, False, id="-inf never improves when minimizing"),
    pytest.param(INF, 0.5, False, False, id="+inf never improves when maximizing"),
    pytest.param(INF, INF, False, False, id="+inf never improves on the +inf start"),
]


@pytest.mark.parametrize(("score", "best", "minimize", "improves"), IMPROVEMENTS)
def test_an_improvement_is_a_finite_strictly_better_score(score: float, best: float,
                                                          minimize: bool, improves: bool) -> None:
    assert is_improvement(score, best, minimize=minimize) is improves


# (num_epochs, every_n_epochs, val.first, start epoch, validations due) -- LOOP-2
SCHEDULES = [
    pytest.param(4, 1, False, 0, [0, 1, 2, 3], id="every epoch"),
    pytest.param(5, 3, False, 0, [0, 3, 4], id="every third epoch and the final one"),
    pytest.param(6, 2, False, 0, [0, 2, 4, 5], id="every second epoch and the final one"),
    pytest.param(4, 2, False, 0, [0, 2, 3], id="the final epoch once when it is due anyway"),
    pytest.param(3, 5, False, 0, [0, 2], id="an interval past the end: epoch 0 and the final"),
    pytest.param(2, 1, True, 0, [None, 0, 1], id="val.first once before the first epoch"),
    pytest.param(0, 1, True, 0, [None], id="no epochs with val.first: val.first alone"),
    pytest.param(0, 1, False, 0, [], id="no epochs and no val.first: no validation"),
    pytest.param(5, 3, True, 2, [3, 4], id="a resumed run does not repeat val.first"),
    pytest.param(5, 1, False, 3, [3, 4], id="a resumed run validates from its start epoch"),
]


@pytest.mark.parametrize(("num_epochs", "every", "first", "start", "due"), SCHEDULES)
def test_validations_fall_due_on_the_interval_the_final_epoch_and_val_first(
        num_epochs: int, every: int, first: bool, start: int, due: list[int | None]) -> None:
    assert expected_validations(num_epochs=num_epochs, every_n_epochs=every, first=first,
                                start=start) == due


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One hand-worked run: its config, every validation due, and the spec's verdicts."""

    shows: str  # the row's id: what it shows
    validations: tuple[tuple[int | None, float], ...]  # every one due, before any stop
    num_epochs: int
    every_n_epochs: int = 1
    patience: int | None = None
    start_patience: int = 0
    minimize: bool = False
    # what the spec says, one entry per validation that runs (none after the stop)
    improved: tuple[bool, ...]
    patience_left: tuple[int | None, ...]
    stop_epoch: int | None
    best_epoch: int | None
    trained: tuple[int, ...]


RUNS = [
    # PAT-1: the counter starts at p, each counted non-improvement takes one off, 0 stops
    Run(shows="patience 2 stops right after the second non-improvement",
        validations=((0, 0.5), (1, 0.4), (2, 0.3), (3, 0.2), (4, 0.1)), num_epochs=5,
        patience=2,
        improved=(True, False, False), patience_left=(2, 1, 0), stop_epoch=2, best_epoch=0,
        trained=(0, 1, 2)),
    Run(shows="patience 1 stops at the first non-improvement",
        validations=((0, 0.5), (1, 0.4), (2, 0.9)), num_epochs=3, patience=1,
        improved=(True, False), patience_left=(1, 0), stop_epoch=1, best_epoch=0,
        trained=(0, 1)),
    Run(shows="a run whose counter never reaches 0 trains every epoch",
        validations=((0, 0.1), (1, 0.2), (2, 0.1), (3, 0.3)), num_epochs=4, patience=2,
        improved=(True, True, False, True), patience_left=(2, 2, 1, 2), stop_epoch=None,
        best_epoch=3, trained=(0, 1, 2, 3)),
    # PAT-2
    Run(shows="an improvement refills the counter to p",
        validations=((0, 0.5), (1, 0.4), (2, 0.6), (3, 0.4), (4, 0.3), (5, 0.9)), num_epochs=6,
        patience=2,
        improved=(True, False, True, False, False), patience_left=(2, 1, 2, 1, 0),
        stop_epoch=4, best_epoch=2, trained=(0, 1, 2, 3, 4)),
    # BEST-1: strictly better, in the configured direction
    Run(shows="a tie is no improvement and counts for patience",
        validations=((0, 0.5), (1, 0.5), (2, 0.5)), num_epochs=3, patience=2,
        improved=(True, False, False), patience_left=(2, 1, 0), stop_epoch=2, best_epoch=0,
        trained=(0, 1, 2)),
    Run(shows="maximizing keeps the highest score",
        validations=((0, 0.5), (1, 0.4), (2, 0.6)), num_epochs=3,
        improved=(True, False, True), patience_left=(None, None, None), stop_epoch=None,
        best_epoch=2, trained=(0, 1, 2)),
    Run(shows="minimizing keeps the lowest score",
        validations=((0, 0.5), (1, 0.4), (2, 0.6)), num_epochs=3, minimize=True,
        improved=(True, True, False), patience_left=(None, None, None), stop_epoch=None,
        best_epoch=1, trained=(0, 1, 2)),
    Run(shows="a tie is no improvement when minimizing: the earlier epoch stays best",
        validations=((0, 0.3), (1, 0.2), (2, 0.2), (3, 0.25)), num_epochs=4, minimize=True,
        improved=(True, True, False, False), patience_left=(None,) * 4, stop_epoch=None,
        best_epoch=1, trained=(0, 1, 2, 3)),
    # NAN-1, NAN-3: never an improvement, one counted non-improvement each
    Run(shows="nan never improves and counts once for patience",
        validations=((0, 0.5), (1, NAN), (2, NAN), (3, 0.4), (4, 0.3), (5, 0.2)), num_epochs=6,
        patience=3,
        improved=(True, False, False, False), patience_left=(3, 2, 1, 0), stop_epoch=3,
        best_epoch=0, trained=(0, 1, 2, 3)),
    Run(shows="-inf, +inf and nan never improve when minimizing",
        validations=((0, 0.5), (1, -INF), (2, INF), (3, NAN), (4, 0.4)), num_epochs=5,
        minimize=True,
        improved=(True, False, False, False, True), patience_left=(None,) * 5,
        stop_epoch=None, best_epoch=4, trained=(0, 1, 2, 3, 4)),
    Run(shows="+inf never improves when maximizing",
        validations=((0, INF), (1, 0.1), (2, INF)), num_epochs=3,
        improved=(False, True, False), patience_left=(None,) * 3, stop_epoch=None,
        best_epoch=1, trained=(0, 1, 2)),
    Run(shows="-inf when maximizing is one non-improvement",
        validations=((0, 0.5), (1, -INF), (2, 0.6)), num_epochs=3, patience=1,
        improved=(True, False), patience_left=(1, 0), stop_epoch=1, best_epoch=0,
        trained=(0, 1)),
    Run(shows="+inf counts once, a finite score refills, a tie counts when minimizing",
        validations=((0, INF), (1, 0.3), (2, INF), (3, 0.3), (4, 0.1)), num_epochs=5,
        patience=2, minimize=True,
        improved=(False, True, False, False), patience_left=(1, 2, 1, 0), stop_epoch=3,
        best_epoch=1, trained=(0, 1, 2, 3)),
    Run(shows="a nan right after a refill counts once",
        validations=((0, 0.1), (1, 0.2), (2, NAN), (3, 0.3), (4, NAN), (5, NAN)), num_epochs=6,
        patience=2,
        improved=(True, True, False, True, False, False), patience_left=(2, 2, 1, 2, 1, 0),
        stop_epoch=5, best_epoch=3, trained=(0, 1, 2, 3, 4, 5)),
    # NAN-2: the incumbent stays at its start until a finite score
    Run(shows="leading nan and +inf leave the incumbent clean for the first finite score",
        validations=((0, NAN), (1, INF), (2, 0.1), (3, 0.05)), num_epochs=4,
        improved=(False, False, True, False), patience_left=(None,) * 4, stop_epoch=None,
        best_epoch=2, trained=(0, 1, 2, 3)),
    Run(shows="leading nan and -inf leave the incumbent clean when minimizing",
        validations=((0, NAN), (1, -INF), (2, 0.1), (3, 0.05)), num_epochs=4, minimize=True,
        improved=(False, False, True, True), patience_left=(None,) * 4, stop_epoch=None,
        best_epoch=3, trained=(0, 1, 2, 3)),
    Run(shows="only non-finite scores: no best epoch",
        validations=((0, NAN), (1, -INF)), num_epochs=2,
        improved=(False, False), patience_left=(None, None), stop_epoch=None, best_epoch=None,
        trained=(0, 1)),
    # PAT-3: non-improvements below start_patience are not counted; val.first is at epoch 0
    Run(shows="non-improvements before start_patience are not counted",
        validations=((0, 0.5), (1, 0.1), (2, 0.1), (3, 0.1), (4, 0.1), (5, 0.1)), num_epochs=6,
        patience=1, start_patience=3,
        improved=(True, False, False, False), patience_left=(1, 1, 1, 0), stop_epoch=3,
        best_epoch=0, trained=(0, 1, 2, 3)),
    Run(shows="an improvement before start_patience still counts for best",
        validations=((0, 0.5), (1, 0.6), (2, 0.1), (3, 0.1)), num_epochs=4, patience=1,
        start_patience=2,
        improved=(True, True, False), patience_left=(1, 1, 0), stop_epoch=2, best_epoch=1,
        trained=(0, 1, 2)),
    Run(shows="a tie at start_patience is counted, one before it is not",
        validations=((0, 0.5), (1, 0.5), (2, 0.5)), num_epochs=3, patience=1,
        start_patience=2,
        improved=(True, False, False), patience_left=(1, 1, 0), stop_epoch=2, best_epoch=0,
        trained=(0, 1, 2)),
    Run(shows="val.first counts at epoch 0 and can stop the run before training",
        validations=((None, NAN), (0, 0.5), (1, 0.4)), num_epochs=2, patience=1,
        improved=(False,), patience_left=(0,), stop_epoch=-1, best_epoch=None, trained=()),
    Run(shows="val.first below start_patience is not counted",
        validations=((None, NAN), (0, 0.5), (1, 0.4)), num_epochs=2, patience=1,
        start_patience=1,
        improved=(False, True, False), patience_left=(1, 1, 0), stop_epoch=1, best_epoch=0,
        trained=(0, 1)),
    # LOOP-2: val.first is an ordinary validation; validations follow every_n_epochs
    Run(shows="val.first's weights stay best when nothing beats them",
        validations=((None, 0.9), (0, 0.5), (1, 0.9)), num_epochs=2,
        improved=(True, False, False), patience_left=(None,) * 3, stop_epoch=None,
        best_epoch=-1, trained=(0, 1)),
    Run(shows="no epochs with val.first: an eval-only run",
        validations=((None, 0.5),), num_epochs=0,
        improved=(True,), patience_left=(None,), stop_epoch=None, best_epoch=-1, trained=()),
    Run(shows="patience counts validations, not epochs, with every_n_epochs 2",
        validations=((0, 0.5), (2, 0.4), (4, 0.3), (5, 0.2)), num_epochs=6, every_n_epochs=2,
        patience=2,
        improved=(True, False, False), patience_left=(2, 1, 0), stop_epoch=4, best_epoch=0,
        trained=(0, 1, 2, 3, 4)),
    # PAT-4: unset patience never stops, with val.first and never-improving scores
    Run(shows="unset patience never stops, with val.first and no improvement after epoch 0",
        validations=((None, NAN), (0, 0.1), (1, NAN), (2, 0.05), (3, -INF)), num_epochs=4,
        improved=(False, True, False, False, False), patience_left=(None,) * 5,
        stop_epoch=None, best_epoch=0, trained=(0, 1, 2, 3)),
]


@pytest.mark.parametrize("run", RUNS, ids=[r.shows for r in RUNS])
def test_each_hand_worked_run_validates_when_loop_2_says(run: Run) -> None:
    first = bool(run.validations) and run.validations[0][0] is None
    assert expected_validations(num_epochs=run.num_epochs, every_n_epochs=run.every_n_epochs,
                                first=first) == [e for e, _ in run.validations]


@pytest.mark.parametrize("run", RUNS, ids=[r.shows for r in RUNS])
def test_the_oracle_decides_hand_worked_runs_as_the_spec_says(run: Run) -> None:
    out = decide(run.validations, minimize=run.minimize, patience=run.patience,
                 start_patience=run.start_patience, num_epochs=run.num_epochs)
    ran = run.validations[:len(run.improved)]
    # validations after the stop are dropped (repr: nan equals nan)
    assert [(d.epoch, repr(d.score)) for d in out.decisions] == [(e, repr(s)) for e, s in ran]
    assert tuple(d.improved for d in out.decisions) == run.improved
    assert tuple(d.patience_left for d in out.decisions) == run.patience_left
    assert [d.stop for d in out.decisions] == \
        [False] * (len(ran) - 1) + [run.stop_epoch is not None]
    assert out.stop_epoch == run.stop_epoch
    assert out.best_epoch == run.best_epoch
    assert out.epochs_trained == run.trained


def test_the_hand_tables_cover_every_kind_of_row() -> None:
    kinds = {
        "a tie": any(s == t for r in RUNS for (_, s), (_, t)
                     in zip(r.validations, r.validations[1:], strict=False)),
        "nan": any(math.isnan(s) for r in RUNS for _, s in r.validations),
        "+inf": any(s == INF for r in RUNS for _, s in r.validations),
        "-inf": any(s == -INF for r in RUNS for _, s in r.validations),
        "start_patience": any(r.start_patience > 0 for r in RUNS),
        "unset patience": any(r.patience is None for r in RUNS),
        "minimize": any(r.minimize for r in RUNS),
        "maximize": any(not r.minimize for r in RUNS),
        "val.first": any(r.validations and r.validations[0][0] is None for r in RUNS),
        "every_n_epochs": any(r.every_n_epochs > 1 for r in RUNS),
        "a stop": any(r.stop_epoch is not None for r in RUNS),
    }
    assert [k for k, covered in kinds.items() if not covered] == []
