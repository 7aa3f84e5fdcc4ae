"""The one-call API: ``trainspec.check(...)`` is ``run(plan(...))``.

The plan and the option table every entry point shares live in
:mod:`trainspec.conformance.plan` and are re-exported here; :func:`run` carries a plan out,
:func:`check_matrix` checks the built-in targets side by side, :func:`replay` runs one
reproducer.

Importing this module costs no torch: the plugin reads :data:`OPTIONS` when pytest starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal

from trainspec.conformance.plan import (
    OPTIONS,
    PROFILES,
    Backend,
    Option,
    Plan,
    Profile,
    option,
    plan,
    plan_from,
)
from trainspec.conformance.spec.results import CheckResult, Report
from trainspec.conformance.targets import Target, resolve_target, with_remedies
from trainspec.errors import HarnessError

if TYPE_CHECKING:
    from trainspec.conformance.report.matrix import ConformanceMatrix

__all__ = [
    "OPTIONS",
    "PROFILES",
    "Backend",
    "Option",
    "Plan",
    "Profile",
    "Report",
    "check",
    "check_matrix",
    "option",
    "plan",
    "plan_from",
    "replay",
    "replay_generated",
    "run",
]


def run(plan: Plan, *, on_result: Callable[[CheckResult], None] | None = None) -> Report:
    """Carry out ``plan``: every selected check on its target; one report, every clause.

    ``on_result`` is called with each check's result as it completes (progress display).
    """
    from trainspec.conformance import runner

    return runner.run(plan, on_result=on_result)


def check(target: str | Target | None = None, *, base_trainer: str | None = None,
          clauses: str | None = None, world_size: int = 2, timeout_s: float = 60.0,
          deviations: Mapping[str, str] | None = None,
          on_result: Callable[[CheckResult], None] | None = None,
          workers: int | Literal["auto"] = 1, profile: Profile = "fast", fresh: bool = False,
          backend: Backend | None = None, remedies: str | None = None) -> Report:
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
        workers: families of checks run in this many parallel workers; ``"auto"``: one per
            core, bounded by memory (:func:`auto_workers`, the command line's default).
        profile: property checks generate 60 runs each (``fast``) or 250 (``ci``).
        fresh: new worker processes for every run (isolation over speed).
        backend: collective backend of the multi-rank runs, ``"gloo"`` or ``"nccl"``;
            None lets the trainer pick.
        remedies: comma-separated names of remedies the target's adapter declares, turned on
            for this run (a framework is judged at its defaults otherwise).
    """
    return run(plan(target, base_trainer=base_trainer, clauses=clauses, world_size=world_size,
                    timeout_s=timeout_s, deviations=deviations, workers=workers,
                    profile=profile, fresh=fresh, backend=backend, remedies=remedies),
               on_result=on_result)


def check_matrix(names: list[str] | None = None, *, clauses: str | None = None,
                 world_size: int = 2, timeout_s: float = 60.0,
                 workers: int | Literal["auto"] = 1, profile: Profile = "fast",
                 progress: Callable[[str], None] | None = None) -> ConformanceMatrix:
    """Check every installed built-in target (or those of ``names``) side by side; see
    :func:`trainspec.conformance.matrix_run.check_targets`."""
    from trainspec.conformance.matrix_run import check_targets

    return check_targets(names, clauses=clauses, world_size=world_size, timeout_s=timeout_s,
                         workers=workers, profile=profile, progress=progress)


def replay(target: str | None = None, *, base_trainer: str | None = None, clause: str,
           scenario: str | Mapping[str, object], remedies: str | None = None) -> None:
    """Run one scenario (a reproducer's JSON) on a target (with ``remedies`` on, when the
    failing report had them) and judge its decisions.

    Raises :class:`~trainspec.conformance.checks.CheckFailed` with the evidence on a slip.
    """
    import json

    from trainspec.conformance.checks.base import RunBroke
    from trainspec.conformance.checks.common import match_decisions
    from trainspec.conformance.run.harness import Harness
    from trainspec.conformance.run.scenario import Scenario

    data = json.loads(scenario) if isinstance(scenario, str) else scenario
    s = Scenario.from_json(data)
    resolved = resolve_target(target, base_trainer)
    with Harness((with_remedies(resolved, remedies) if remedies else resolved).adapter
                 ) as harness:
        trace = harness.run(s)
    if not trace.completed:
        raise RunBroke(trace, s)
    match_decisions(clause, s, trace)
    print(f"{clause}: the trainer matches the oracle on this scenario")


def replay_generated(target: str | None = None, *, base_trainer: str | None = None,
                     example: str | Mapping[str, object]) -> None:
    """Run one generated chain of runs again (a model-based reproducer's JSON) and judge it
    against the model of the spec.

    Raises :class:`~trainspec.conformance.checks.CheckFailed` with the evidence on a slip.
    """
    import json

    from trainspec.conformance.checks.base import CheckFailed
    from trainspec.conformance.checks.model_based import GENERATED_RUNNER
    from trainspec.conformance.run.harness import Harness

    data = json.loads(example) if isinstance(example, str) else dict(example)
    with Harness(resolve_target(target, base_trainer).adapter) as harness:
        outcome = harness.property("replay=" + json.dumps(data), runner=GENERATED_RUNNER,
                                   max_examples=1)
    if outcome.verdict == "failed":
        raise CheckFailed(outcome.evidence)
    if outcome.verdict == "broke":
        raise HarnessError(f"the replay {outcome.status}: {outcome.error}")
    print("the trainer matches the model of the spec on this generated run")
