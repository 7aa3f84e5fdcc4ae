"""Property checks: hypothesis-generated score sequences and configs against the oracle.

A property runs inside one forked worker child, next to the trainer, and each example in a
process forked from it (one process per run, as the contract promises: a framework's
process-wide registries never carry from one example to the next), so an example costs a
trainer run and a fork (milliseconds) rather than a round trip to a new process; the whole
property is still bounded and killable like any run. Examples are derandomized: the same
trainer gets the same verdict every time. A failure comes back shrunk, with the falsifying
scenario as JSON and a ready-to-run reproducer.

A property leads with an example its own clause owns: one that fails for another clause's
fault (a crash in an eval-only run, a non-finite score handled wrong) is set aside, counted by
that clause, and left to that clause's own check (:mod:`.attribution` says whose fault it is).
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, assume, given, reject, seed, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.errors import Unsatisfiable

from trainspec.conformance.checks.attribution import Attempt, Finding, attribute
from trainspec.conformance.checks.base import CheckFailed
from trainspec.conformance.checks.carried_out import shortfall
from trainspec.conformance.checks.common import fmt_scores, label, match_decisions, same_weights
from trainspec.conformance.run.adapter import CAPABILITIES
from trainspec.conformance.run.memory import run_in_fork
from trainspec.conformance.run.records import Done
from trainspec.conformance.run.scenario import Scenario, ScoreScript
from trainspec.conformance.run.trace import Trace, parse_rank
from trainspec.conformance.spec.oracle import Outcome, decide

__all__ = ["PROPERTIES", "PropertySpec", "run_property"]

NONFINITE = (math.nan, math.inf, -math.inf)
# the draw's seed, fixed, so that the examples do not change when the code drawing or judging
# them does (derandomized draws are otherwise seeded by the test function's source)
_DRAW_SEED = 20230523
# examples set aside (another clause's fault), per example asked, before the rest are drawn
# without being run: a trainer whose every run shows another clause's fault costs a bounded time
_SET_ASIDE = 2


def _score(*, finite_only: bool = False) -> st.SearchStrategy[float]:
    # a small pool makes ties common; the rest covers signs and magnitudes. Every value is
    # exact in float32, so a trainer that pools in float32 sees the same ties and order
    finite = st.floats(-2.0, 2.0, allow_nan=False, allow_infinity=False, width=32)
    pool = st.sampled_from([0.125, 0.25, 0.375, 0.5])
    if finite_only:
        return st.one_of(pool, finite)
    return st.one_of(pool, st.sampled_from(NONFINITE), finite)


@st.composite
def scenarios(draw: st.DrawFn, *, caps: frozenset[str] = CAPABILITIES,
              nonfinite_first: bool = False, finite_only: bool = False) -> Scenario:
    """Scores, patience, start_patience, direction, val.first, the validation interval.

    Only what the target declares is drawn: a key it cannot express stays at its default.
    At least one epoch: an eval-only run (num_epochs=0) is LOOP-3's, judged by its own check.
    ``finite_only``: the property's clause judges finite scores (non-finite ones are NAN's).
    """
    num_epochs = draw(st.integers(1, 6))
    score = _score(finite_only=finite_only)
    scores = draw(st.lists(score, min_size=num_epochs, max_size=num_epochs))
    if nonfinite_first and scores:
        lead = draw(st.integers(1, len(scores)))
        scores[:lead] = draw(st.lists(st.sampled_from(NONFINITE), min_size=lead,
                                      max_size=lead))
    first = draw(st.one_of(st.none(), score)) if "val_first" in caps else None
    scenario = Scenario(name="property", scores=ScoreScript.of(scores, first))

    def maybe(capability: str, strategy: st.SearchStrategy[Any], default: Any) -> Any:
        return draw(strategy) if capability in caps else default

    return scenario.with_config(**{
        "num_epochs": num_epochs,
        "val.first": first is not None,
        "val.every_n_epochs": maybe("val_every_n", st.integers(1, 3), 1),
        "val.minimize": draw(st.booleans()),
        "val.patience": maybe("early_stopping", st.one_of(st.none(), st.integers(1, 4)), None),
        "val.start_patience": maybe("start_patience", st.integers(0, 3), 0),
        "ckpt.enable": maybe("checkpoint", st.booleans(), False),
        "test.enable": maybe("test_pass", st.booleans(), False),
    })


def _decisions(clause: str) -> Callable[[Scenario, Trace], None]:
    def judge(scenario: Scenario, trace: Trace) -> None:
        match_decisions(clause, scenario, trace)

    return judge


def _improvements(clause: str) -> Callable[[Scenario, Trace], None]:
    """Improvement flags and best weights, judged on the validations the run really made.

    When to validate and when to stop are other clauses' matters (LOOP-2, PAT): the oracle
    gets the observed sequence of scores, without patience, and only the flags are compared.
    """

    def judge(scenario: Scenario, trace: Trace) -> None:
        r = trace.rank0
        seen = [(None if v.phase == "first" else v.epoch,
                 scenario.scores.pooled(None if v.phase == "first" else v.epoch, 1))
                for v in r.validations]
        outcome: Outcome = decide(seen, minimize=scenario.get("val.minimize"), patience=None,
                                  start_patience=0, num_epochs=scenario.get("num_epochs"))
        for i, (v, d) in enumerate(zip(r.validations, outcome.decisions, strict=True)):
            if v.improved != d.improved:
                so_far = fmt_scores([score for _, score in seen[: i + 1]])
                raise CheckFailed(
                    f"{clause}: the validation after {label(d.epoch)} was "
                    f"{'taken' if v.improved else 'not taken'} as an improvement; expected "
                    f"{'an improvement' if d.improved else 'none'} (scores so far {so_far}, "
                    f"val.minimize={scenario.get('val.minimize')})")
        if outcome.best_index is None:
            return
        best = r.validations[outcome.best_index]
        if not same_weights(best.weights, r.best_model):
            raise CheckFailed(f"{clause}: best_model is not the weights of the best validation "
                              f"(after {label(best.epoch)}, score {best.score})")

    return judge


@dataclass(frozen=True, slots=True, kw_only=True)
class PropertySpec:
    """A property: its evidence's clause, what it draws, how it judges, and what it owns."""

    clause: str  # the clause its evidence names
    owns: frozenset[str]  # the clauses whose faults are its evidence (attribution.py)
    finite_owner: str  # the clause a slip on finite scores belongs to
    nonfinite_first: bool = False  # every example opens with non-finite scores
    finite_only: bool = False  # only finite scores are drawn
    is_judging_stops: bool = False  # its judge compares stops and the schedule
    judge: Callable[[Scenario, Trace], None]


PROPERTIES: dict[str, PropertySpec] = {
    "decisions": PropertySpec(clause="PAT-5", owns=frozenset({"PAT-5"}), finite_owner="PAT-5",
                              is_judging_stops=True, judge=_decisions("PAT-5")),
    # BEST-1 judges improvements on finite scores; non-finite ones are NAN-1's and NAN-2's
    "improvements": PropertySpec(clause="BEST-1", owns=frozenset({"BEST-1"}),
                                 finite_owner="BEST-1", finite_only=True,
                                 judge=_improvements("BEST-1")),
    "nonfinite": PropertySpec(clause="NAN-2", owns=frozenset({"NAN-1", "NAN-2"}),
                              finite_owner="BEST-1", nonfinite_first=True,
                              judge=_improvements("NAN-2")),
}


def _attempt(spec: PropertySpec, adapter: Any, scenario: Scenario) -> Attempt:
    """Run one example in a process forked for it and judge it."""
    root = Path(tempfile.mkdtemp(prefix="trainspec-prop-"))
    try:
        # one process per example, forked from this warm one: no example sees another's
        # process state (registries keyed by time, patched functions)
        run = run_in_fork(adapter, scenario, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if run.error is not None:
        rank = parse_rank(0, run.records, "raised", run.error, run.traceback)
        return Attempt(scenario=scenario, rank=rank, raised=True, failure=CheckFailed(
            f"{spec.clause}: the run raised {run.error}"))
    # the adapter's run returned: Done, as a child records it
    rank = parse_rank(0, [*run.records, Done()], "completed", "", "")
    trace = Trace(scenario_name=scenario.name, ranks=(rank,))
    lacking = shortfall(scenario, trace)  # a match with nothing recorded is no match
    try:
        spec.judge(scenario, trace)
        if lacking is not None:
            raise CheckFailed(f"{spec.clause}: the run {lacking}")
    except CheckFailed as e:
        return Attempt(scenario=scenario, rank=rank, raised=False, failure=e,
                       lacking=lacking is not None)
    return Attempt(scenario=scenario, rank=rank, raised=False, failure=None)


def _owner(spec: PropertySpec, adapter: Any, tried: Attempt) -> Finding:
    return attribute(tried, own=spec.clause, finite_owner=spec.finite_owner, owns=spec.owns,
                     stops=spec.is_judging_stops, judges_schedule=spec.is_judging_stops,
                     rerun=lambda s: _attempt(spec, adapter, s))


def run_property(name: str, adapter: Any, *, max_examples: int) -> dict[str, Any]:
    """Run a property in this process; the result is JSON-able.

    An example failing for another clause's fault is set aside (``set_aside`` counts them by
    clause), so the evidence, if any, is the property's own clause's; ``judged`` counts the
    examples judged for it."""
    spec = PROPERTIES[name]
    failure: dict[str, Any] = {}
    aside: Counter[str] = Counter()
    count = 0

    def run_once(scenario: Scenario) -> None:
        nonlocal count
        # past this many examples set aside, the rest would be too: draw on, run nothing more
        assume(aside.total() < _SET_ASIDE * max_examples or bool(failure))
        count += 1
        tried = _attempt(spec, adapter, scenario)
        if tried.failure is None:
            return
        found = _owner(spec, adapter, tried)
        if found.clause not in spec.owns:
            aside[found.clause] += 1
            reject()  # not this clause's evidence: its own check judges it
        error = found.attempt.failure
        assert error is not None  # a finding is a failure
        evidence = error.evidence
        if found.is_control:
            evidence += _CONTROL_NOTE
        # hypothesis shrinks: the last failure recorded is the minimal example
        error.evidence = _with_config(evidence, found.attempt.scenario)
        failure.update(evidence=error.evidence, scenario=found.attempt.scenario.to_json())
        raise error

    return _draw(spec, adapter, run_once, max_examples, failure, aside, lambda: count)


_CONTROL_NOTE = (" [shown with the drawn example's non-finite scores replaced by finite ones "
                 "worse than every other score: the slip needs no non-finite score]")


def _draw(spec: PropertySpec, adapter: Any, once: Callable[[Scenario], None], max_examples: int,
          failure: dict[str, Any], aside: Counter[str], count: Callable[[], int]
          ) -> dict[str, Any]:
    """Run ``once`` on up to ``max_examples`` derandomized examples; the JSON result."""
    test = seed(_DRAW_SEED)(settings(
        max_examples=max_examples, derandomize=True, database=None, deadline=None,
        suppress_health_check=list(HealthCheck), print_blob=False)(
        given(scenarios(caps=frozenset(adapter.capabilities()),
                        nonfinite_first=spec.nonfinite_first,
                        finite_only=spec.finite_only))(once)))
    home = tempfile.mkdtemp(prefix="trainspec-hypothesis-")
    set_hypothesis_home_dir(home)  # its caches go there, never into the user's folder
    try:
        test()
    except Unsatisfiable:  # every example run was set aside: none was this clause's
        pass
    except Exception as e:  # CheckFailed, or a group of distinct failures hypothesis found
        if not failure:
            raise
        if isinstance(e, BaseExceptionGroup):
            others = [x.evidence for x in e.exceptions
                      if isinstance(x, CheckFailed) and x.evidence != failure["evidence"]]
            failure["evidence"] += "".join(f" (another distinct failure: {x})" for x in others)
            if len(others) < len(e.exceptions) - 1:
                failure["evidence"] += (f" (and {len(e.exceptions) - 1 - len(others)} other "
                                        "distinct failure(s))")
    finally:
        set_hypothesis_home_dir(None)
        shutil.rmtree(home, ignore_errors=True)
    return {"passed": not failure, "examples": count(), **failure,
            "judged": {spec.clause: count() - aside.total()},
            "set_aside": dict(sorted(aside.items()))}


# the keys a generated scenario draws (see ``scenarios``): a failure names them all, since
# which one matters depends on the trainer (e.g. a framework tracking the best model only when
# checkpointing is on)
_DRAWN = ("num_epochs", "val.first", "val.every_n_epochs", "val.minimize", "val.patience",
          "val.start_patience", "ckpt.enable", "test.enable")


def _with_config(evidence: str, scenario: Scenario) -> str:
    """The evidence, with the drawn config keys it does not name yet."""
    missing = [f"{key}={scenario.get(key)}" for key in _DRAWN if f"{key}=" not in evidence]
    if not missing:
        return evidence
    return f"{evidence} [config: {', '.join(missing)}]"
