"""Whose fault a failing property example shows: the property's own clause, or another's.

A property check of clause C leads with an example whose failure is C's own. An example that
fails for another clause's fault is set aside for C (that clause's own check catches it), so
that C's own fault, if the trainer has one, is found and shrunk. What a clause owns follows
its sentences:

- an eval-only run (``num_epochs=0``) is LOOP-3's;
- validations made off the schedule are LOOP-2's (a property judging the schedule: PAT-5);
- a non-finite score taken as an improvement is NAN-1's (NAN-2's when it leads the run); a
  slip that needs the non-finite scores to show is NAN-1's or NAN-2's, and a stop or a raise
  it causes is NAN-3's;
- a slip on finite scores is BEST-1's (improvements) or PAT-5's (decisions);
- a run that did not carry its scenario out, or that raises on finite scores too, is judged
  by the property itself (no clause owns it, and no check may pass on it).

Whether a slip needs the non-finite scores is answered by a counterfactual: the same example
with every non-finite score replaced by a finite stand-in worse than every other score (so it
is never an improvement, except where nothing finite came before it, as the spec's incumbent
says). When that finite control slips no later than the example did, the slip shows on finite
scores alone, and the control's failure is the finite clause's evidence.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from trainspec.conformance.checks.base import CheckFailed
from trainspec.conformance.checks.common import expected_outcome, same_weights
from trainspec.conformance.run.records import Validation
from trainspec.conformance.run.scenario import Scenario, ScoreScript
from trainspec.conformance.run.trace import RankTrace
from trainspec.conformance.spec.oracle import decide, expected_validations

__all__ = ["Attempt", "Finding", "Slip", "attribute", "finite_control", "first_slip",
           "validated_scores"]

SlipKind = Literal["improved", "stop", "schedule", "best", "raised", "other"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One example run and judged: its failure (None: it matched), and rank 0's trace."""

    scenario: Scenario
    failure: CheckFailed | None
    rank: RankTrace
    raised: bool  # the run raised (its failure says so)
    lacking: bool = False  # the run did not carry its scenario out (carried_out.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class Slip:
    """Where an example first departs from the oracle: the index of the validation (the count
    of validations when it departs after them), and how."""

    index: int
    kind: SlipKind


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """The clause whose fault a failing example shows, and the attempt that shows it: the
    example's own, or its finite control's (``is_control``)."""

    clause: str
    attempt: Attempt
    is_control: bool = False


def _key(v: Validation) -> int | None:
    return None if v.phase == "first" else v.epoch


def first_slip(tried: Attempt, *, stops: bool) -> Slip:
    """The first departure from the oracle: flags only on the validations made, or (``stops``)
    flags, stops and the schedule as the oracle runs it, patience included."""
    s, r = tried.scenario, tried.rank
    if stops:
        decisions = expected_outcome(s).decisions
    else:
        seen = [(_key(v), s.scores.pooled(_key(v), 1)) for v in r.validations]
        decisions = decide(seen, minimize=s.get("val.minimize"), patience=None,
                           start_patience=0, num_epochs=s.get("num_epochs")).decisions
    for i, (v, d) in enumerate(zip(r.validations, decisions, strict=False)):
        if _key(v) != d.epoch:
            return Slip(index=i, kind="schedule")
        if v.improved != d.improved:
            return Slip(index=i, kind="improved")
        if stops and v.stop != d.stop:
            return Slip(index=i, kind="stop")
    shorter = min(len(r.validations), len(decisions))
    if tried.raised:
        return Slip(index=shorter, kind="raised")
    if stops and (len(r.validations) != len(decisions)
                  or r.epochs_trained != list(expected_outcome(s).epochs_trained)):
        return Slip(index=shorter, kind="stop")
    best = _best_index(s, r)
    if best is not None and not same_weights(r.validations[best].weights, r.best_model):
        return Slip(index=shorter, kind="best")
    return Slip(index=shorter, kind="other")


def _best_index(s: Scenario, r: RankTrace) -> int | None:
    seen = [(_key(v), s.scores.pooled(_key(v), 1)) for v in r.validations]
    return decide(seen, minimize=s.get("val.minimize"), patience=None, start_patience=0,
                  num_epochs=s.get("num_epochs")).best_index


def off_schedule(s: Scenario, r: RankTrace) -> bool:
    """The run validated after other epochs than the schedule says (LOOP-2), as opposed to
    stopping earlier or later than the oracle (a stop decision): a validation made where none
    was due, or one skipped in epochs the run trained."""
    want = [d.epoch for d in expected_outcome(s).decisions]
    seen = [_key(v) for v in r.validations]
    if any(a != b for a, b in zip(seen, want, strict=False)):
        return True
    missing = want[len(seen):]
    return bool(missing) and not any(v.stop for v in r.validations) \
        and all(e is not None and e in r.epochs_trained for e in missing)


def validated_scores(s: Scenario) -> list[float]:
    due = expected_validations(num_epochs=s.get("num_epochs"),
                               every_n_epochs=s.get("val.every_n_epochs"),
                               first=s.get("val.first"))
    return [s.scores.pooled(e, s.world_size) for e in due]


def finite_control(s: Scenario) -> Scenario:
    """``s`` with every non-finite score replaced by a finite stand-in worse than every other
    score (an improvement only where nothing finite came before it)."""
    n = s.world_size
    scores = [s.scores.pooled(e, n) for e in range(len(s.scores.epochs))]
    first = None if s.scores.first is None else s.scores.pooled(None, n)
    # the k-th stand-in: a whole number (exact in float32) beyond every finite score, each
    # worse than the one before it, so never a tie
    beyond = math.ceil(max((abs(x) for x in [*scores, first or 0.0] if math.isfinite(x)),
                           default=0.0)) + 2
    sign = 1.0 if s.get("val.minimize") else -1.0
    count = 0

    def stand_in(value: float) -> float:
        nonlocal count
        if math.isfinite(value):
            return value
        count += 1
        return sign * float(beyond + count - 1)

    first_in = None if first is None else stand_in(first)  # val.first validates first
    return s.replace(scores=ScoreScript.of([stand_in(x) for x in scores], first_in))


def _nan_clause(tried: Attempt, slip: Slip) -> str:
    """Which NAN clause a slip caused by non-finite scores breaks."""
    if slip.kind in ("raised", "stop"):
        return "NAN-3"  # a non-finite score crashed the run or miscounted for patience
    before = [v.score for v in tried.rank.validations[: slip.index]]
    return "NAN-2" if all(not math.isfinite(x) for x in before) else "NAN-1"


def _takes_nonfinite(tried: Attempt, slip: Slip) -> bool:
    """The slip is a non-finite score taken as an improvement: NAN-1's by its sentence alone."""
    vs = tried.rank.validations
    return slip.kind == "improved" and slip.index < len(vs) and vs[slip.index].improved \
        and not math.isfinite(vs[slip.index].score)


def attribute(tried: Attempt, *, own: str, finite_owner: str, owns: frozenset[str],
              stops: bool, judges_schedule: bool,
              rerun: Callable[[Scenario], Attempt]) -> Finding:
    """The clause whose fault the failing ``tried`` shows, and the attempt that shows it.

    ``own`` is the clause the property's evidence names, ``owns`` all its clauses;
    ``finite_owner`` owns slips on finite scores; ``stops``: the property judges stops (the
    slip is found as its judge finds it); ``judges_schedule``: it judges when validations
    run; ``rerun`` runs and judges another example (the finite control)."""
    s = tried.scenario
    if s.get("num_epochs") == 0:
        return Finding(clause="LOOP-3", attempt=tried)
    if tried.lacking:  # not carried out: no clause's fault to charge, and no pass either
        return Finding(clause=own, attempt=tried)
    if judges_schedule and not tried.raised and off_schedule(s, tried.rank):
        return Finding(clause="LOOP-2", attempt=tried)
    if all(math.isfinite(x) for x in validated_scores(s)):
        # a crash on finite scores is no other clause's: the property's own evidence
        return Finding(clause=own if tried.raised else finite_owner, attempt=tried)
    slip = first_slip(tried, stops=stops)
    takes = _takes_nonfinite(tried, slip)
    if takes and "NAN-1" in owns:
        return Finding(clause=_nan_clause(tried, slip), attempt=tried)
    control = rerun(finite_control(s))
    if control.failure is None:  # the slip needs the non-finite scores
        return Finding(clause=_nan_clause(tried, slip), attempt=tried)
    if not takes and first_slip(control, stops=stops).index > slip.index:
        # the example slipped before the control did: the non-finite scores caused it
        return Finding(clause=_nan_clause(tried, slip), attempt=tried)
    # the trainer slips on finite scores alone: the control's failure is the evidence
    inner = attribute(control, own=own, finite_owner=finite_owner, owns=owns, stops=stops,
                      judges_schedule=judges_schedule, rerun=rerun)
    return Finding(clause=inner.clause, attempt=inner.attempt, is_control=True)
