"""``trainspec matrix``'s run: check every installed built-in target, then build the matrix.

Above ``report/`` (it calls :func:`trainspec.conformance.api.check` and reads the targets);
the matrix itself and its writers are :mod:`trainspec.conformance.report.matrix`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import Literal

from trainspec.conformance.report.matrix import ConformanceMatrix, build
from trainspec.conformance.report.matrix_causes import RemedyRun
from trainspec.conformance.report.text import format_summary
from trainspec.conformance.spec.results import Report
from trainspec.conformance.targets import BUILTIN_TARGETS, Target, with_remedies
from trainspec.errors import AdapterError, UsageError

__all__ = ["FRAMEWORK_MODULES", "check_targets", "missing_requirement"]

# built-in target -> (the modules its framework installs, the extra that installs them)
FRAMEWORK_MODULES: dict[str, tuple[tuple[str, ...], str]] = {
    "lightning": (("lightning",), "lightning"),
    "hf": (("transformers", "accelerate"), "hf"),
    "ignite": (("ignite",), "ignite"),
    "keras": (("keras",), "keras"),
    "poutyne": (("poutyne", "pandas"), "poutyne"),  # ModelBundle needs pandas
    "skorch": (("skorch",), "skorch"),
}


def missing_requirement(name: str, target: Target) -> str | None:
    """Why a built-in target cannot be checked here (adapter or framework absent), or None.

    Looks the modules up without importing them: no framework is imported to find out.
    """
    module = target.factory.partition(":")[0]
    if not _importable(module):
        return f"adapter module {module} not found"
    needs, extra = FRAMEWORK_MODULES.get(name, ((), ""))
    absent = [m for m in needs if not _importable(m)]
    if absent:
        return (f"{', '.join(absent)} not installed: pip install 'trainspec[{extra}]'")
    return None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing or broken
        return False


def check_targets(names: Sequence[str] | None = None, *, clauses: str | None = None,
                  world_size: int = 2, timeout_s: float = 60.0, workers: int | Literal["auto"] = 1,
                  profile: Literal["fast", "ci"] = "fast",
                  progress: Callable[[str], None] | None = None) -> ConformanceMatrix:
    """Check every built-in target (or those of ``names``) whose adapter and framework are
    installed; ``progress`` gets one line as each target starts, finishes or is skipped.

    A target whose adapter cannot be loaded (:class:`~trainspec.errors.AdapterError`) is
    reported as not installed, with the adapter's message; other errors propagate.

    Raises:
        UsageError: a name is not a built-in target.
    """
    chosen = list(BUILTIN_TARGETS) if names is None else list(names)
    unknown = [n for n in chosen if n not in BUILTIN_TARGETS]
    if unknown:
        raise UsageError(f"matrix: unknown target(s) {', '.join(unknown)}: expected built-in "
                         f"targets ({', '.join(BUILTIN_TARGETS)})")
    say = progress or (lambda line: None)
    done: dict[str, Report] = {}
    missing: dict[str, str] = {}
    verified: dict[str, list[RemedyRun]] = {}
    for i, name in enumerate(chosen, start=1):
        head = f"trainspec matrix: [{i}/{len(chosen)}] {name}"
        why = missing_requirement(name, BUILTIN_TARGETS[name])
        if why is None:
            say(f"{head}: checking")
            try:
                result = _check(name, clauses=clauses, world_size=world_size,
                                timeout_s=timeout_s, workers=workers, profile=profile)
            except AdapterError as e:
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
            else:
                done[name] = result
                say(f"{head}: done: {format_summary(result)}")
                verified[name] = _verify_remedies(name, result, world_size=world_size,
                                                  timeout_s=timeout_s, profile=profile, say=say)
        if why is not None:
            missing[name] = why
            say(f"{head}: not installed ({why}); skipped")
    return build(done, missing, remedy_runs=verified)


def _verify_remedies(name: str, report: Report, *, world_size: int, timeout_s: float,
                     profile: Literal["fast", "ci"], say: Callable[[str], None]
                     ) -> list[RemedyRun]:
    """Each declared remedy's failing clauses, checked again with the remedy on."""
    runs = []
    for remedy in report.remedies:
        # a clause not selected comes out n/a, so "fail" already means selected and failing
        failing = [c for c in remedy.clauses if report.clause(c).verdict == "fail"]
        if not failing:
            continue
        target = with_remedies(BUILTIN_TARGETS[name], remedy.name)
        again = _check(target, clauses=",".join(failing), world_size=world_size,
                          timeout_s=timeout_s, profile=profile)
        run = RemedyRun.of(remedy.name, again, failing)
        runs.append(run)
        say(f"trainspec matrix: {name} with {remedy.setting}: " + ", ".join(
            f"{c} {v}" for c, (v, _) in run.results.items()))
    return runs


def _check(target: str | Target, **options: object) -> Report:
    """``trainspec.check(target, **options)``, without importing the public API module."""
    from trainspec.conformance import runner
    from trainspec.conformance.plan import plan

    return runner.run(plan(target, **options))  # type: ignore[arg-type]
