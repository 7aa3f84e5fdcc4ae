"""Property checks lead with an example their own clause owns (issue 23).

A property example that fails for another clause's fault (a crash in an eval-only run, a
non-finite score taken as an improvement) is set aside for the property's clause, so that its
own fault, if any, is the evidence; the other clause's own check catches that fault in its own
right. The trainers are the seed-shaped mutants of tests/mutants/ that carry slips of several
clauses; each test runs the checks of the clauses involved (the hand-written and property
checks: the generated-runs engine has a wall-clock budget and its own tests).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import pytest

from tests.harnesses import repo_harness
from trainspec.conformance.checks import CHECKS, CheckFailed, run_check
from trainspec.conformance.checks.attribution import (
    Attempt,
    Finding,
    attribute,
    finite_control,
)
from trainspec.conformance.checks.common import make_scenario
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.run.records import Done, Validation
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import parse_rank
from trainspec.conformance.runner import judge_clauses, open_context, resolve_target
from trainspec.conformance.spec.results import CheckResult

NAN, INF = math.nan, math.inf

BEST_1 = ("check_best_needs_a_strictly_better_score", "check_best_selection_matches_the_oracle")
PAT_5 = ("check_decisions_match_the_oracle",)
LOOP_3 = ("check_loop_zero_epochs_is_eval_only",)
NAN_1_2 = ("check_nonfinite_scores_never_improve",
           "check_leading_nonfinite_scores_leave_best_clean",
           "check_nonfinite_runs_match_the_oracle")


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    with repo_harness(resolve_target("reference").adapter, timeout_s=60) as h:
        yield h


def _run(harness: Harness, trainer: str, names: Sequence[str]) -> dict[str, CheckResult]:
    target = resolve_target(base_trainer=trainer)
    results = {}
    for name in names:
        ctx, _ = open_context(target, harness, world_size=1, max_examples=40)
        results[name] = run_check(CHECKS[name], ctx)
    return results


def _verdicts(results: dict[str, CheckResult]) -> dict[str, str]:
    """Each clause's verdict on the checks run (the clauses they check and no other)."""
    checked = sorted({c for r in results.values() for c in r.clauses})
    return {c.id: c.verdict for c in judge_clauses(list(results.values()), checked, {},
                                                   world_size=1) if c.id in checked}


def test_a_crash_at_zero_epochs_and_inf_taken_are_loop_3s_and_nan_1s_not_best_1s(
        harness: Harness) -> None:
    """The crash at num_epochs=0 fails LOOP-3 and +inf taken fails NAN-1; BEST-1 and PAT-5,
    which have no fault of their own here, pass, and quote neither."""
    results = _run(harness, "tests.mutants.nan:InfWinsAndAveragesOverNoEpochs",
                   BEST_1 + PAT_5 + LOOP_3 + NAN_1_2)
    verdicts = _verdicts(results)
    assert {c: verdicts[c] for c in ("BEST-1", "PAT-5", "LOOP-3", "NAN-1")} == {
        "BEST-1": "pass", "PAT-5": "pass", "LOOP-3": "fail", "NAN-1": "fail"}, verdicts
    assert "the run raised: ZeroDivisionError" in results[LOOP_3[0]].evidence
    assert "scored inf and was taken as an improvement" in results[NAN_1_2[0]].evidence
    best, pat = results[BEST_1[1]], results[PAT_5[0]]
    assert "matched the oracle" in best.evidence
    assert "matched the oracle" in pat.evidence
    for result in (best, pat):
        assert "ZeroDivisionError" not in result.evidence
    # PAT-5 draws non-finite scores too: the examples +inf broke are counted, as NAN's
    assert "set aside as other clauses' faults (" in pat.evidence
    assert "NAN-" in pat.evidence.partition("set aside")[2]


def test_best_1_leads_with_its_own_tie_beside_a_crash_and_inf(harness: Harness) -> None:
    """With a tie fault of its own, BEST-1's evidence is the tie on finite scores: not the
    crash at num_epochs=0, nor +inf, which fail LOOP-3 and NAN-1."""
    results = _run(harness, "tests.mutants.best:TieAndInfWinBesideACrashAtZeroEpochs",
                   BEST_1[1:] + LOOP_3 + NAN_1_2[:1])
    assert _verdicts(results) == {"BEST-1": "fail", "LOOP-3": "fail", "NAN-1": "fail"}
    evidence = results[BEST_1[1]].evidence
    assert "was taken as an improvement; expected none (scores so far [0.125, 0.125]" in evidence
    assert "ZeroDivisionError" not in evidence
    assert "inf" not in evidence.partition(" [falsifying")[0]
    assert "the run raised: ZeroDivisionError" in results[LOOP_3[0]].evidence
    assert "scored inf and was taken as an improvement" in results[NAN_1_2[0]].evidence


def test_a_leading_nan_taken_as_an_improvement_is_nan_2s_alone(harness: Harness) -> None:
    """NAN-2 fails with the leading NaN taken; PAT-5 and BEST-1 pass without quoting it."""
    results = _run(harness, "tests.mutants.nan:FirstScoreAlwaysWins",
                   BEST_1 + PAT_5 + NAN_1_2[1:])
    verdicts = _verdicts(results)
    assert {c: verdicts[c] for c in ("BEST-1", "PAT-5", "NAN-2")} == {
        "BEST-1": "pass", "PAT-5": "pass", "NAN-2": "fail"}, verdicts
    assert "the validation after epoch 0 was taken as an improvement; expected none (scores " \
        "so far [nan]" in results[NAN_1_2[2]].evidence
    assert "after epoch 0 scored nan and was taken as an improvement" in \
        results[NAN_1_2[1]].evidence
    for name in (*BEST_1, *PAT_5):
        assert "nan" not in results[name].evidence.replace("NAN-", ""), results[name].evidence
    assert "NAN-2's" in results[PAT_5[0]].evidence


def test_a_property_whose_every_example_is_another_clauses_fault_is_not_judged(
        harness: Harness) -> None:
    """Every run with a non-finite score raises: NAN-3's fault, which its own check fails;
    the NAN-1/NAN-2 property, whose examples all open with one, judges none of them."""
    results = _run(harness, "tests.mutants.nan:RaisesOnNanScore",
                   ("check_nonfinite_runs_match_the_oracle",
                    "check_nonfinite_score_counts_once_for_patience"))
    prop = results["check_nonfinite_runs_match_the_oracle"]
    assert prop.outcome == "n/a", prop.evidence
    assert "no generated run could be judged" in prop.evidence
    assert "NAN-3's" in prop.evidence
    own = results["check_nonfinite_score_counts_once_for_patience"]
    assert own.outcome == "failed"
    assert "the run raised: ValueError: validation score is nan" in own.evidence


# ------------------------------------------------------------------ attribution alone


def _scenario(scores: Sequence[float], *, first: float | None = None,
              minimize: bool = False) -> Scenario:
    return make_scenario("attribution", scores, first=first, cfg={"val.minimize": minimize})


def _attempt(s: Scenario, flags: Sequence[bool], *, failed: bool = True,
             epochs: Sequence[int] | None = None) -> Attempt:
    """A completed run of ``s`` that took these improvement flags (after epochs 0, 1, ... or
    ``epochs``), judged failed or not."""
    after = range(len(flags)) if epochs is None else epochs
    records = [Validation(epoch=e, phase="epoch", score=s.scores.pooled(e, 1), improved=f,
                          stop=False, weights={}) for e, f in zip(after, flags, strict=True)]
    rank = parse_rank(0, [*records, Done()], "completed", "", "")
    return Attempt(scenario=s, rank=rank, raised=False,
                   failure=CheckFailed("PAT-5: a slip") if failed else None)


def _raised(s: Scenario) -> Attempt:
    rank = parse_rank(0, [], "raised", "ValueError: boom", "")
    return Attempt(scenario=s, rank=rank, raised=True,
                   failure=CheckFailed("NAN-2: the run raised ValueError: boom"))


def _as_the_nan_property(tried: Attempt, rerun: Callable[[Scenario], Attempt]) -> Finding:
    return attribute(tried, own="NAN-2", finite_owner="BEST-1",
                     owns=frozenset({"NAN-1", "NAN-2"}), stops=False, judges_schedule=False,
                     rerun=rerun)


def test_the_finite_control_stands_worse_finite_scores_in_for_non_finite_ones() -> None:
    s = _scenario([NAN, 0.5, INF, -INF], first=NAN)
    control = finite_control(s)
    assert [control.scores.pooled(e, 1) for e in (None, 0, 1, 2, 3)] == \
        [-3.0, -4.0, 0.5, -5.0, -6.0]
    minimized = finite_control(_scenario([-1.5, NAN], minimize=True))
    assert [minimized.scores.pooled(e, 1) for e in (0, 1)] == [-1.5, 4.0]
    assert finite_control(_scenario([0.5, 0.25])) == _scenario([0.5, 0.25])


def test_a_slip_that_needs_the_non_finite_score_is_nan_1s() -> None:
    """0.4 after a NaN taken as an improvement; without the NaN the trainer does not slip."""
    s = _scenario([0.5, NAN, 0.4])
    found = attribute(_attempt(s, [True, False, True]), own="PAT-5", finite_owner="PAT-5",
                      owns=frozenset({"PAT-5"}), stops=False, judges_schedule=False,
                      rerun=lambda c: _attempt(c, [True, False, False], failed=False))
    assert (found.clause, found.is_control) == ("NAN-1", False)


def test_a_slip_that_shows_on_finite_scores_alone_is_the_clauses_own_with_its_control() -> None:
    """A tie taken after a NaN, and again in the finite control: the control is the evidence."""
    s = _scenario([0.5, NAN, 0.5])
    found = attribute(_attempt(s, [True, False, True]), own="PAT-5", finite_owner="PAT-5",
                      owns=frozenset({"PAT-5"}), stops=False, judges_schedule=False,
                      rerun=lambda c: _attempt(c, [True, False, True]))
    assert (found.clause, found.is_control) == ("PAT-5", True)
    assert found.attempt.scenario == finite_control(s)


def test_a_non_finite_score_taken_is_the_nan_propertys_own_without_a_control() -> None:
    def no_rerun(c: Scenario) -> Attempt:
        raise AssertionError("a non-finite score taken needs no control run")

    found = _as_the_nan_property(_attempt(_scenario([NAN, 0.5]), [True, False]), no_rerun)
    assert found.clause == "NAN-2"  # a leading one


def test_an_eval_only_example_is_loop_3s() -> None:
    s = _scenario([]).with_config(**{"val.first": True})
    found = attribute(_attempt(s, []), own="BEST-1", finite_owner="BEST-1",
                      owns=frozenset({"BEST-1"}),
                      stops=False, judges_schedule=False, rerun=lambda c: _attempt(c, []))
    assert found.clause == "LOOP-3"


def test_a_crash_is_nan_3s_only_where_the_finite_control_runs_clean() -> None:
    s = _scenario([NAN, 0.5])
    clean = _as_the_nan_property(_raised(s), lambda c: _attempt(c, [True, True], failed=False))
    assert clean.clause == "NAN-3"
    everywhere = _as_the_nan_property(_raised(s), _raised)
    assert (everywhere.clause, everywhere.is_control) == ("NAN-2", True)


def test_validations_off_the_schedule_are_loop_2s_where_the_property_judges_it() -> None:
    s = _scenario([0.5, 0.4, 0.3])
    skipped = _attempt(s, [True, False], epochs=[1, 2])  # epoch 0's validation never ran
    found = attribute(skipped, own="PAT-5", finite_owner="PAT-5", owns=frozenset({"PAT-5"}),
                      stops=True, judges_schedule=True, rerun=_raised)
    assert found.clause == "LOOP-2"
