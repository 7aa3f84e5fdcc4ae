"""The runner: resolve a target, run the selected checks, and judge every clause.

Every clause of the spec appears in every report: a clause without a check comes out ``error``
("no check yet"), a clause not selected comes out ``n/a`` ("not selected"), and a clause whose
checks all need a capability the target lacks comes out ``n/a`` with that reason. A declared
deviation turns a ``fail`` (or ``timeout``) into ``deviation``; a declared deviation that passes is
flagged so it can be removed.
"""

from __future__ import annotations

import contextlib
import platform
import reprlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

import trainspec
from trainspec.conformance.checks import CHECKS, CheckContext, CheckSpec, run_check
from trainspec.conformance.report.writers import docs_link
from trainspec.conformance.run.adapter import CAPABILITIES, Capability
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import (
    CheckResult,
    ClauseResult,
    Report,
    Verdict,
    worst_verdict,
)
from trainspec.conformance.targets import BUILTIN_TARGETS, Target, resolve_target
from trainspec.errors import AdapterError, UsageError

__all__ = [
    "BUILTIN_TARGETS",
    "Target",
    "judge_clauses",
    "open_context",
    "resolve_target",
    "run_checks",
    "selected_checks",
]

# what a target's factory must give; quoted when the adapter breaks its protocol
_PROTOCOL = ("its factory must be importable from the current directory (or the environment) "
             "and return an adapter: an object with name, capabilities() (a set of capability "
             "names), environment() (a dict of names to version strings) and "
             "run(scenario, ctx); see trainspec.conformance.run.adapter.Adapter")


def open_context(target: Target, harness: Harness, *, world_size: int = 2,
                 max_examples: int = 60) -> tuple[CheckContext, dict[str, Any]]:
    """The context checks of ``target`` run in, and what its adapter said of itself.

    Raises:
        AdapterError: the adapter cannot be imported or built, or describes itself wrongly
            (unknown capabilities, an environment that is not a dict of strings); the message
            names the target and, after its first line, holds the worker's traceback.
    """
    try:
        described = harness.describe(target.adapter)
    except AdapterError as e:
        head, _, trace = str(e).partition("\n")
        head = head.removeprefix(f"{target.factory}: ").removeprefix("AdapterError: ")
        raise AdapterError(f"target {target.label}: the adapter could not be built or could "
                           f"not describe itself: {head.rstrip('.')}. Expected: {_PROTOCOL}."
                           + (f"\n{trace.rstrip()}" if trace.strip() else "")) from None
    capabilities = _capabilities(target, described.get("capabilities", []))
    described["environment"] = _adapter_environment(target, described.get("environment", {}))
    described["sources"] = _adapter_sources(target, described.get("sources", {}))
    ctx = CheckContext(harness=harness, adapter=target.adapter, capabilities=capabilities,
                       world_size=world_size, target_args=target.reproducer_args,
                       max_examples=max_examples)
    return ctx, described


def selected_checks(selected: Sequence[str], world_size: int | None) -> list[CheckSpec]:
    """The checks verifying any of ``selected``, in registry order; multi-rank ones only with
    several ranks (all of them when ``world_size`` is None)."""
    chosen = set(selected)
    several = world_size is None or world_size > 1
    return [spec for spec in CHECKS.values()
            if chosen.intersection(spec.clauses) and (several or not spec.multi_rank)]


def run_checks(target: Target, *, clauses: str | None = None, world_size: int = 2,
               timeout_s: float = 60.0, deviations: Mapping[str, str] | None = None,
               on_result: Callable[[CheckResult], None] | None = None,
               harness: Harness | None = None, max_examples: int = 60,
               workers: int = 1, fresh: bool = False) -> Report:
    """Run every check of the selected clauses on ``target``; one report, every clause.

    A ``harness`` passed in is reused (and left open): several targets can share its workers.
    ``workers`` > 1 runs families of checks in parallel, each with its own harness (checks of
    one family share runs, so a family stays together). ``fresh`` starts new worker processes
    for every run: isolation over speed.
    """
    started = time.monotonic()
    selected = registry.select(clauses)
    if world_size < 1:
        raise UsageError(f"--world-size: expected 1 or more ranks, got {world_size}")
    if workers < 1:
        raise UsageError(f"-n/--workers: expected 1 or more, got {workers}")
    specs = selected_checks(selected, world_size)
    buckets = [specs] if workers == 1 or harness is not None else _buckets(specs, workers)
    lock = threading.Lock()

    def report(result: CheckResult) -> None:
        if on_result is not None:
            with lock:
                on_result(result)

    def run_bucket(bucket: Sequence[CheckSpec], shared: Harness | None
                   ) -> tuple[list[CheckResult], dict[str, Any]]:
        with contextlib.ExitStack() as stack:
            own = shared if shared is not None else stack.enter_context(
                Harness(target.adapter, timeout_s=timeout_s, fresh=fresh))
            ctx, described = open_context(target, own, world_size=world_size,
                                          max_examples=max_examples)
            done = []
            for spec in bucket:
                done.append(run_check(spec, ctx))
                report(done[-1])
            return done, described

    if len(buckets) == 1:
        results, described = run_bucket(buckets[0], harness)
    else:
        with ThreadPoolExecutor(max_workers=len(buckets), thread_name_prefix="trainspec") as pool:
            outcomes = list(pool.map(lambda b: run_bucket(b, None), buckets))
        order = {spec.name: i for i, spec in enumerate(specs)}
        results = sorted((r for done, _ in outcomes for r in done), key=lambda r: order[r.name])
        described = outcomes[0][1]
    environment = _environment(described.get("environment", {}))
    return Report(trainspec=trainspec.__version__, target=target.label, environment=environment,
                  clauses=judge_clauses(results, selected, deviations or {}, world_size,
                                        sources=described.get("sources", {})),
                  duration_s=round(time.monotonic() - started, 3), selected=tuple(selected))


# rough seconds per family on the reference (2 cores): a scheduling hint, nothing more
_FAMILY_COST = {"dist": 14.0, "res": 3.0, "pat": 2.5, "nan": 2.0, "best": 2.0, "ckpt": 2.0,
                "ft": 1.5, "loop": 1.0, "dbg": 0.5}


def _buckets(specs: Sequence[CheckSpec], workers: int) -> list[list[CheckSpec]]:
    """Families spread over ``workers`` buckets, heaviest first onto the lightest bucket."""
    families: dict[str, list[CheckSpec]] = {}
    for spec in specs:
        families.setdefault(spec.func.__module__.rsplit(".", 1)[-1], []).append(spec)
    buckets: list[list[CheckSpec]] = [[] for _ in range(min(workers, len(families)) or 1)]
    load = [0.0] * len(buckets)
    for family in sorted(families, key=lambda f: -_FAMILY_COST.get(f, 2.0)):
        lightest = load.index(min(load))
        buckets[lightest].extend(families[family])
        load[lightest] += _FAMILY_COST.get(family, 2.0)
    return [b for b in buckets if b]


def _capabilities(target: Target, declared: object) -> frozenset[Capability]:
    names = declared if isinstance(declared, list) else [declared]
    unknown = sorted({str(c) for c in names} - CAPABILITIES)
    if unknown:
        hint = ""
        if all(len(c) == 1 and c.isalpha() for c in unknown):
            hint = (" (single letters: did capabilities() return one name as a string? "
                    "Return a set of names, e.g. frozenset({'checkpoint', 'resume'}))")
        raise AdapterError(f"target {target.label}: capabilities() declared unknown names "
                           f"{unknown}{hint}; known: {sorted(CAPABILITIES)}")
    return frozenset(c for c in CAPABILITIES if c in names)


def _adapter_environment(target: Target, declared: object) -> dict[str, str | None]:
    """The adapter's ``environment()``: names to version strings (or None), as reports hold."""
    if not isinstance(declared, dict) or not all(
            isinstance(k, str) and isinstance(v, str | None) for k, v in declared.items()):
        raise AdapterError(f"target {target.label}: environment() returned "
                           f"{reprlib.repr(declared)}; "
                           "expected a dict of names to version strings or None, e.g. "
                           "{'framework': 'lightning 2.4.0'}")
    return declared


def _adapter_sources(target: Target, declared: object) -> dict[str, str]:
    """The adapter's optional ``framework_sources()``: clause IDs to source pointers."""
    known = {c.id for c in registry.CLAUSES}
    if not isinstance(declared, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in declared.items()):
        raise AdapterError(f"target {target.label}: framework_sources() returned "
                           f"{reprlib.repr(declared)}; expected a dict of clause IDs to one-line "
                           "source pointers, e.g. {'NAN-1': 'pkg/callbacks.py, "
                           "EarlyStopping.check: NaN compares False'}")
    unknown = sorted(set(declared) - known)
    if unknown:
        raise AdapterError(f"target {target.label}: framework_sources() names unknown clauses "
                           f"{unknown}; expected clause IDs such as 'NAN-1' "
                           "(trainspec list prints them)")
    return declared


def _environment(adapter_env: Mapping[str, str | None]) -> dict[str, str | None]:
    env: dict[str, str | None] = {"python": platform.python_version(),
                                  "torch": torch.__version__.split("+")[0]}
    env["framework"] = adapter_env.get("framework")
    env.update({k: v for k, v in adapter_env.items() if k != "framework"})
    return env


def judge_clauses(results: Sequence[CheckResult], selected: Sequence[str],
                  deviations: Mapping[str, str], world_size: int, *,
                  sources: Mapping[str, str] | None = None) -> tuple[ClauseResult, ...]:
    """One verdict per clause of the spec, from the check results.

    The evidence of a selected clause that does not pass ends with its docs link,
    ``(docs: docs/spec/res.md#res-3)`` (:func:`~trainspec.conformance.report.writers.docs_link`); a
    failing (or deviating) clause's evidence also names the framework source its adapter holds
    responsible, ``(framework source: ...)``, when the adapter's ``framework_sources()`` says.
    """
    sources = sources or {}
    out = []
    for clause in registry.CLAUSES:
        mine = [r for r in results if clause.id in r.clauses]
        reason = deviations.get(clause.id)
        verdict: Verdict
        if clause.id not in selected:
            verdict, evidence, note = "n/a", "not selected (--clauses)", ""
        elif not mine and any(clause.id in s.clauses for s in CHECKS.values()):
            verdict, evidence = "n/a", f"its checks need several ranks; ran with {world_size}"
            note = ""
        elif not mine:
            verdict, evidence, note = "error", "no check yet", ""
        else:
            verdict = worst_verdict([r.outcome for r in mine])
            worst = next((r for r in mine if _to(r.outcome) == verdict), mine[0])
            evidence = worst.evidence
            note = ""
            if reason is not None and verdict in ("fail", "timeout"):
                verdict = "deviation"
            elif reason is not None and verdict == "pass":
                note = "declared as a deviation but passes: remove it from the deviations file"
        if verdict in ("fail", "deviation") and clause.id in sources:
            evidence = f"{evidence} (framework source: {sources[clause.id]})"
        if verdict != "pass" and clause.id in selected:  # a failure message links its clause
            evidence = f"{evidence} (docs: {docs_link(clause.id)})"
        out.append(ClauseResult(id=clause.id, level=clause.level, title=clause.title,
                                verdict=verdict, evidence=evidence, checks=tuple(mine),
                                deviation_reason=reason, note=note))
    return tuple(out)


def _to(outcome: str) -> str:
    return {"passed": "pass", "failed": "fail"}.get(outcome, outcome)
