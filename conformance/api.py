"""The one-call API: ``trainspec.check(...) -> Report``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from trainspec.conformance.runner import resolve_target, run_checks
from trainspec.conformance.spec.results import CheckResult, Report
from trainspec.errors import UsageError

__all__ = ["PROFILES", "Report", "check", "replay"]

# generated runs per property check: a derandomized fast default, and more for CI
PROFILES = {"fast": 60, "ci": 250}


def check(target: str | None = None, *, base_trainer: str | None = None,
          clauses: str | None = None, world_size: int = 2, timeout_s: float = 60.0,
          deviations: Mapping[str, str] | None = None,
          on_result: Callable[[CheckResult], None] | None = None, workers: int = 1,
          profile: Literal["fast", "ci"] = "fast", fresh: bool = False) -> Report:
    """Check a trainer against every clause of the spec and return the report.

    Args:
        target: ``"reference"`` (default), ``"lightning"``, ``"hf"``, ``"ignite"``, ``"keras"``,
            or ``"MODULE:OBJECT"`` naming an adapter.
        base_trainer: ``"MODULE:CLASS"`` of a base class in the seed's shape (instead of target).
        clauses: comma-separated clause IDs or families (``"RES,PAT-5"``); all when None.
        world_size: ranks for the multi-rank clauses (DIST).
        timeout_s: the bound on every single run.
        deviations: clause ID -> reason, for failures the target declares.
        on_result: called with each check's result as it completes (progress display).
        workers: families of checks run in this many parallel workers.
        profile: property checks generate 60 runs each (``fast``) or 250 (``ci``).
        fresh: new worker processes for every run (isolation over speed).
    """
    if profile not in PROFILES:
        raise UsageError(f"profile: expected one of {sorted(PROFILES)}, got {profile!r}")
    return run_checks(resolve_target(target, base_trainer), clauses=clauses,
                      world_size=world_size, timeout_s=timeout_s, deviations=deviations,
                      on_result=on_result, workers=workers, fresh=fresh,
                      max_examples=PROFILES[profile])


def replay(target: str | None = None, *, base_trainer: str | None = None, clause: str,
           scenario: str | Mapping[str, object]) -> None:
    """Run one scenario (a reproducer's JSON) on a target and judge its decisions.

    Raises :class:`~trainspec.conformance.checks.CheckFailed` with the evidence on a slip.
    """
    import json

    from trainspec.conformance.checks.base import RunBroke
    from trainspec.conformance.checks.common import match_decisions
    from trainspec.conformance.run.harness import Harness
    from trainspec.conformance.run.scenario import Scenario

    data = json.loads(scenario) if isinstance(scenario, str) else scenario
    s = Scenario.from_json(data)
    with Harness(resolve_target(target, base_trainer).adapter) as harness:
        trace = harness.run(s)
    if not trace.completed:
        raise RunBroke(trace, s)
    match_decisions(clause, s, trace)
    print(f"{clause}: the trainer matches the oracle on this scenario")
