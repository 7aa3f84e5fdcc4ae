"""The runner: carry out a plan (its checks on its target) and judge every clause.

Every clause of the spec appears in every report: a clause without a check comes out ``error``
("no check yet"), a clause not selected comes out ``n/a`` ("not selected"), and a clause whose
checks all need a capability the target lacks comes out ``n/a`` with that reason. A declared
deviation turns a ``fail`` (or ``timeout``) into ``deviation``; a declared deviation that passes is
flagged so it can be removed.
"""

from __future__ import annotations

import contextlib
import platform
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import trainspec
from trainspec.conformance.checks import (
    CHECKS,
    CheckContext,
    CheckSpec,
    run_check,
    selected_checks,
)
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.run.protocol import Description, InvalidDescription
from trainspec.conformance.run.session import abort_all, is_aborted, reset_abort
from trainspec.conformance.schedule import Families, TorchImport, in_parallel
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.links import docs_link
from trainspec.conformance.spec.results import (
    SEVERITIES,
    CheckOutcome,
    CheckResult,
    ClauseResult,
    Report,
    Verdict,
    common_cause,
    to_verdict,
    worst_verdict,
)
from trainspec.conformance.targets import BUILTIN_TARGETS, Target, resolve_target
from trainspec.errors import AdapterError

if TYPE_CHECKING:
    from trainspec.conformance.plan import Plan

__all__ = [
    "BUILTIN_TARGETS",
    "Interrupted",
    "Target",
    "judge_clauses",
    "open_context",
    "resolve_target",
    "run",
    "run_checks",
    "selected_checks",
]

# what a target's factory must give; quoted when the adapter breaks its protocol
_PROTOCOL = ("its factory must be importable from the current directory (or the environment) "
             "and return an adapter: an object with name, capabilities() (a set of capability "
             "names), environment() (a dict of names to version strings) and "
             "run(scenario, ctx); see trainspec.conformance.run.adapter.Adapter")


def open_context(target: Target, harness: Harness, *, world_size: int = 2,
                 max_examples: int = 60) -> tuple[CheckContext, Description]:
    """The context checks of ``target`` run in, and what its adapter said of itself.

    Raises:
        AdapterError: the adapter cannot be imported or built, or describes itself wrongly
            (unknown capabilities, an environment that is not a dict of strings); the message
            names the target and, after its first line, holds the worker's traceback.
    """
    try:
        described = harness.describe(target.adapter)
    except InvalidDescription as e:  # built, but it says something wrong of itself
        raise AdapterError(f"target {target.label}: {e}") from None
    except AdapterError as e:
        head, _, trace = str(e).partition("\n")
        head = head.removeprefix(f"{target.factory}: ").removeprefix("AdapterError: ")
        raise AdapterError(f"target {target.label}: the adapter could not be built or could "
                           f"not describe itself: {head.rstrip('.')}. Expected: {_PROTOCOL}."
                           + (f"\n{trace.rstrip()}" if trace.strip() else "")) from None
    ctx = CheckContext(runs=harness.using(target.adapter), capabilities=described.capabilities,
                       world_size=world_size, target_args=target.reproducer_args,
                       max_examples=max_examples)
    return ctx, described


def run(plan: Plan, *, on_result: Callable[[CheckResult], None] | None = None,
        harness: Harness | None = None) -> Report:
    """Run every check of ``plan`` on its target; one report, every clause.

    A ``harness`` passed in is reused (and left open): several targets can share its workers.
    ``plan.workers`` > 1 runs families of checks in that many lanes, each with its own harness,
    taking the families in turn (:mod:`trainspec.conformance.schedule`). Past
    ``plan.deadline_s``, or after repeated identical timeouts, the checks not yet run come out
    ``timeout``. An interrupt (KeyboardInterrupt, also SIGTERM through the CLI) stops every
    worker at once and leaves as :class:`Interrupted` with the report of what was done.
    """
    started = time.monotonic()
    reset_abort()
    specs = list(plan.checks)
    families = Families(specs)
    lanes = 1 if plan.workers == 1 or harness is not None else min(plan.workers, len(families))
    state = _Lanes(plan, started, on_result, parallel=lanes > 1)
    try:
        if lanes == 1:
            state.lane(harness, specs, lambda: None)
        else:
            in_parallel(lanes, lambda: state.lane(None, families.take(), families.take))
    except KeyboardInterrupt:
        abort_all()  # workers die now; threads waiting on them wake up and end
        done = state.results()
        rest = [_not_run(s, "error", "the check was interrupted (SIGINT or SIGTERM)")
                for s in specs if s.name not in {r.name for r in done}]
        raise Interrupted(_report(plan, [*done, *rest], state.described, started,
                                  lanes)) from None
    finally:
        state.importing.join()
    order = {spec.name: i for i, spec in enumerate(specs)}
    return _report(plan, sorted(state.results(), key=lambda r: order[r.name]), state.described,
                   started, lanes)


class _Lanes:
    """What the lanes of one run share: the plan, the gate, the results, the torch import."""

    def __init__(self, plan: Plan, started: float,
                 on_result: Callable[[CheckResult], None] | None, *, parallel: bool) -> None:
        self.plan, self.parallel, self.on_result = plan, parallel, on_result
        self.gate = _Gate(plan, started)
        self.importing = TorchImport()
        self.described: list[Description] = []
        self._finished: list[CheckResult] = []
        self._lock = threading.Lock()

    def results(self) -> list[CheckResult]:
        with self._lock:
            return list(self._finished)

    def report(self, result: CheckResult) -> None:
        with self._lock:
            if is_aborted():
                return  # a check that an interrupt cut short: not a result
            self._finished.append(result)
            if self.on_result is not None:
                self.on_result(result)

    def lane(self, shared: Harness | None, first: Sequence[CheckSpec] | None,
             more: Callable[[], Sequence[CheckSpec] | None]) -> None:
        """Run ``first``, then what ``more()`` gives until it gives None, on one harness."""
        if not first:
            return
        plan = self.plan
        with contextlib.ExitStack() as stack:
            own = shared if shared is not None else stack.enter_context(
                Harness(plan.target.adapter, timeout_s=plan.timeout_s, fresh=plan.fresh,
                        backend=plan.backend, deadline=self.gate.deadline,
                        ckpt_root=plan.ckpt_root))
            ctx = self._open(own, first)
            checks: Sequence[CheckSpec] | None = first
            while checks:
                for spec in sorted(checks, key=lambda s: s.multi_rank):  # multi-rank ones last
                    own.hand_over()
                    reason = self.gate.stop_reason()
                    self.report(_not_run(spec, "timeout", reason) if reason else
                                self.gate.note(run_check(spec, ctx)))
                if any(s.multi_rank for s in checks):
                    own.release_unused(plan.world_size)  # all n/a: their ranks never ran
                checks = more()

    def _open(self, harness: Harness, checks: Sequence[CheckSpec]) -> CheckContext:
        """Start the lane's workers and open the context its checks run in.

        The single-rank worker starts first; the ranks of the multi-rank world start once it
        is warm and warm up while the single-rank checks run (those run first). In parallel
        lanes, which share the cores from the start, every worker a family needs starts at
        once.
        """
        plan = self.plan
        several = plan.world_size > 1 and any(s.multi_rank for s in checks)
        warm = sorted({m for s in checks if s.multi_rank for m in s.imports})
        if several and self.parallel:
            harness.expect(plan.world_size, warm)
        self.importing.start_once()  # while the worker template (or the worker) starts
        harness.world(1, plan.target.adapter)  # its worker starts now
        ctx, description = open_context(plan.target, harness, world_size=plan.world_size,
                                        max_examples=plan.max_examples)
        with self._lock:
            self.described.append(description)
        if several:
            harness.expect(plan.world_size, warm)
        return ctx


class Interrupted(KeyboardInterrupt):
    """The run was interrupted; ``report`` holds the checks done (the rest ``error``)."""

    def __init__(self, report: Report) -> None:
        super().__init__("interrupted")
        self.report = report


def _report(plan: Plan, results: Sequence[CheckResult], described: Sequence[Description],
            started: float, lanes: int) -> Report:
    first = described[0] if described else None
    return Report(trainspec=trainspec.__version__, target=plan.target.label,
                  environment={**_environment(first.environment if first else {}),
                               "workers": str(lanes)},  # the lanes that ran
                  clauses=judge_clauses(results, plan.clauses, plan.deviations, plan.world_size,
                                        sources=first.sources if first else None,
                                        docs_url=plan.docs_url),
                  duration_s=round(time.monotonic() - started, 3), selected=plan.clauses,
                  root_causes=first.root_causes if first else (),
                  remedies=first.remedies if first else (),
                  applied_remedies=plan.target.remedies)


def _not_run(spec: CheckSpec, outcome: CheckOutcome, reason: str) -> CheckResult:
    return CheckResult(name=spec.name, clauses=spec.clauses, outcome=outcome,
                       evidence=f"not run: {reason}", duration_s=0.0)


_SAME_TIMEOUTS = 3  # this many checks in a row timing out at the same place: stop early


class _Gate:
    """When the checks must stop early: past the deadline, or after repeated identical
    timeouts (a trainer that hangs in every run would otherwise cost ~50 x --timeout)."""

    def __init__(self, plan: Plan, started: float) -> None:
        self.deadline_s = plan.deadline_s
        self.deadline = None if plan.deadline_s is None else started + plan.deadline_s
        self._lock = threading.Lock()
        self._streak: list[str] = []  # where each of the last timeouts was stuck
        self._stopped = ""

    def stop_reason(self) -> str:
        """Why no further check may start ("" while they may)."""
        if is_aborted():
            return "the check was interrupted"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return (f"the --deadline of {self.deadline_s:g} s was spent before this check "
                    "started; raise --deadline, or select fewer clauses")
        with self._lock:
            return self._stopped

    def note(self, result: CheckResult) -> CheckResult:
        """Count ``result`` toward fail-fast; a check the deadline cut short is ``timeout``."""
        if self.deadline is not None and time.monotonic() >= self.deadline \
                and result.outcome in ("failed", "error"):
            result = replace(result, outcome="timeout", evidence=(
                f"the --deadline of {self.deadline_s:g} s ran out during this check: "
                f"{result.evidence}"))
        with self._lock:
            if result.outcome != "timeout":
                self._streak.clear()
                return result
            self._streak.append(_stuck_at(result))
            last = self._streak[-_SAME_TIMEOUTS:]
            if len(last) == _SAME_TIMEOUTS and len(set(last)) == 1 and not self._stopped:
                self._stopped = (f"fail-fast: the {_SAME_TIMEOUTS} checks before this one "
                                 f"timed out at the same place ({last[0]})")
        return result


def _stuck_at(result: CheckResult) -> str:
    """Where a timed-out check was stuck: the innermost frame of its stack dump."""
    for line in result.detail.splitlines():
        if line.strip().startswith("File "):
            return line.strip()[:200]
    return "no stack" if not result.detail.strip() else result.detail.strip().splitlines()[-1]


def run_checks(target: Target, *, clauses: str | None = None, world_size: int = 2,
               timeout_s: float = 60.0, deviations: Mapping[str, str] | None = None,
               on_result: Callable[[CheckResult], None] | None = None,
               harness: Harness | None = None, max_examples: int = 60,
               workers: int = 1, fresh: bool = False) -> Report:
    """:func:`run` of the plan of these options (kept for callers that hold a harness)."""
    from trainspec.conformance.plan import plan

    return run(plan(target, clauses=clauses, world_size=world_size, timeout_s=timeout_s,
                    deviations=deviations, workers=workers, fresh=fresh,
                    max_examples=max_examples), on_result=on_result, harness=harness)


def _environment(adapter_env: Mapping[str, str | None]) -> dict[str, str | None]:
    env: dict[str, str | None] = {"python": platform.python_version(),
                                  "torch": _torch_version().split("+")[0]}
    env["framework"] = adapter_env.get("framework")
    env.update({k: v for k, v in adapter_env.items() if k != "framework"})
    return env


def _torch_version() -> str:
    """torch's version, read without importing it when it is not imported yet."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    import importlib.metadata

    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        import torch as imported

        return str(imported.__version__)


def judge_clauses(results: Sequence[CheckResult], selected: Sequence[str],
                  deviations: Mapping[str, str], world_size: int, *,
                  sources: Mapping[str, str] | None = None,
                  docs_url: str | None = None) -> tuple[ClauseResult, ...]:
    """One verdict per clause of the spec, from the check results.

    A selected clause that does not pass gets its docs link (``docs``, from ``docs_url``: see
    :func:`~trainspec.conformance.spec.links.docs_link`); a failing (or deviating) clause also
    gets the framework source its adapter holds responsible (``framework_source``), when the
    adapter's ``framework_sources()`` names one. Both stay out of the evidence.
    """
    sources = sources or {}
    out = []
    for clause in registry.CLAUSES:
        mine = [r for r in results if clause.id in r.clauses]
        reason = deviations.get(clause.id)
        verdict, evidence, note = _verdict(clause.id, mine, selected, reason, world_size)
        # the cause every check that does not pass shares: one cause behind all the
        # clause's failing cases, which reports group with the other clauses it decides
        cause = "" if verdict in ("pass", "n/a") else common_cause(
            [r.cause for r in mine if r.outcome not in ("passed", "n/a")])
        out.append(ClauseResult(
            id=clause.id, level=clause.level, title=clause.title, verdict=verdict,
            evidence=evidence, checks=tuple(mine), deviation_reason=reason, note=note,
            framework_source=sources.get(clause.id) if verdict in ("fail", "deviation")
            else None,
            docs=docs_link(clause.id, docs_url)
            if verdict != "pass" and clause.id in selected else None,
            cause=cause))
    return tuple(out)


def _verdict(clause_id: str, mine: Sequence[CheckResult], selected: Sequence[str],
             reason: str | None, world_size: int) -> tuple[Verdict, str, str]:
    """A clause's verdict, evidence and note."""
    if clause_id not in selected:
        return "n/a", "not selected (--clauses)", ""
    if not mine and any(clause_id in s.clauses for s in CHECKS.values()):
        return "n/a", f"its checks need several ranks; ran with {world_size}", ""
    if not mine:
        return "error", "no check yet", ""
    verdict = worst_verdict([r.outcome for r in mine])
    # of the checks with that verdict, the one with the gravest failing case (a hand-written
    # one among equals: its evidence names the scenarios it ran) gives the evidence
    worst = min((r for r in mine if to_verdict(r.outcome) == verdict),
                key=lambda r: (_gravity(r), r.name.startswith("check_generated_runs_")),
                default=mine[0])
    if reason is not None and verdict in ("fail", "timeout"):
        return "deviation", worst.evidence, ""
    if reason is not None and verdict == "pass":
        return verdict, worst.evidence, ("declared as a deviation but passes: remove it from "
                                         "the deviations file")
    return verdict, worst.evidence, ""


def _gravity(result: CheckResult) -> int:
    """How grave a check's gravest failing case is (0: a crash); past every severity when it
    has none."""
    failing = result.failing
    return SEVERITIES.index(failing[0].severity or "wrong") if failing else len(SEVERITIES)
