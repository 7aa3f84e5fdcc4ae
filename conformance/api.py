"""The one-call API and the plan every entry point shares.

:func:`plan` validates a run's options once into a frozen :class:`Plan`; :func:`run` carries it
out; ``trainspec.check(...)`` is ``run(plan(...))``. The command line and the pytest plugin build
their options from one table, :data:`OPTIONS`, and their plan with :func:`plan_from`.

Importing this module costs no torch: the plugin reads :data:`OPTIONS` when pytest starts.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from trainspec.conformance.lanes import auto_workers
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import CheckResult, Report
from trainspec.conformance.targets import Target, resolve_target, with_remedies
from trainspec.errors import HarnessError, UsageError

if TYPE_CHECKING:
    from trainspec.conformance.checks import CheckSpec
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
    "run",
]

Profile = Literal["fast", "ci"]
Backend = Literal["gloo", "nccl"]

# generated runs per property check: a derandomized fast default, and more for CI
PROFILES: dict[Profile, int] = {"fast": 60, "ci": 250}

# the longest bounds accepted: past them a bound is a typo (or inf), and time arithmetic
# overflows; a day per run, a week per suite
MAX_TIMEOUT_S = 86_400.0
MAX_DEADLINE_S = 604_800.0
# the whole run's default bound: fits a 20-minute CI job with time left to install and upload
DEFAULT_DEADLINE_S = 900.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """A run's options, validated: what to check, on what, and how."""

    target: Target
    clauses: tuple[str, ...]  # the selected clause IDs, in registry order
    checks: tuple[CheckSpec, ...]  # the checks that will run, in registry order
    world_size: int  # ranks of the multi-rank runs; 1 leaves them out
    backend: Backend | None  # collective backend; None: the trainer picks
    timeout_s: float  # the bound on every single run
    deadline_s: float | None = DEFAULT_DEADLINE_S  # the bound on the whole run; None: none
    workers: int  # families of checks run in this many parallel workers
    profile: Profile
    max_examples: int  # generated runs per property check
    fresh: bool  # new worker processes for every run
    deviations: Mapping[str, str] = field(default_factory=dict)  # clause ID -> reason
    docs_url: str | None = None  # docs link template (spec.links.docs_link); None: default


def plan(target: str | Target | None = None, *, base_trainer: str | None = None,
         clauses: str | None = None, world_size: int = 2, backend: str | None = None,
         timeout_s: float = 60.0, workers: int | Literal["auto"] = 1, profile: str = "fast",
         fresh: bool = False, deviations: Mapping[str, str] | Path | None = None,
         docs_url: str | None = None, max_examples: int | None = None,
         deadline_s: float | None = DEFAULT_DEADLINE_S, remedies: str | None = None) -> Plan:
    """Validate a run's options once; every entry point runs from the plan this returns.

    ``deviations`` is a mapping of clause IDs to reasons or the path of a deviations file;
    ``workers="auto"`` takes :func:`auto_workers` (the command line's default);
    ``max_examples`` overrides the profile's count; ``deadline_s`` bounds the whole run
    (checks not started by then come out ``timeout``; None: no bound); ``remedies``
    (comma-separated names) turns on remedies the target's adapter declares.

    Raises:
        UsageError: an option is out of range, names an unknown clause, target or backend,
            or the deviations file is wrong; the message names the option.
    """
    _require(world_size >= 1, f"--world-size: expected 1 or more, got {world_size}")
    _require(workers == "auto" or (isinstance(workers, int) and workers >= 1),
             f"-n/--workers: expected 1 or more, or auto, got {workers!r}")
    lanes = auto_workers() if workers == "auto" else int(workers)
    _require(0 < timeout_s <= MAX_TIMEOUT_S, f"--timeout: expected more than 0 and at most "
             f"{MAX_TIMEOUT_S:g} seconds (a day per run), got {timeout_s}")
    _require(deadline_s is None or 0 < deadline_s <= MAX_DEADLINE_S,
             f"--deadline: expected more than 0 and at most {MAX_DEADLINE_S:g} seconds (a "
             f"week), got {deadline_s}")
    _require(profile in PROFILES, f"--profile: expected one of {', '.join(PROFILES)}, got "
             f"{profile!r}")
    _require(backend in (None, *get_args(Backend)),
             f"--backend: expected gloo or nccl (or none: the trainer picks), got {backend!r}")
    resolved = target if isinstance(target, Target) else resolve_target(target, base_trainer)
    if remedies:
        resolved = with_remedies(resolved, remedies)
    selected = registry.select(clauses)
    declared = _deviations(deviations)
    from trainspec.conformance.checks import selected_checks  # imports the checks: torch

    chosen: Profile = "ci" if profile == "ci" else "fast"
    return Plan(target=resolved, clauses=selected,
                checks=tuple(selected_checks(selected, world_size)), world_size=world_size,
                backend="gloo" if backend == "gloo" else "nccl" if backend == "nccl" else None,
                timeout_s=float(timeout_s), workers=lanes, profile=chosen,
                deadline_s=None if deadline_s is None else float(deadline_s),
                max_examples=max_examples or PROFILES[chosen], fresh=fresh,
                deviations=declared, docs_url=docs_url)


def _workers(text: str) -> int | str:
    if text.strip().lower() == "auto":
        return "auto"
    return _whole_number(text)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)


def _deviations(given: Mapping[str, str] | Path | None) -> dict[str, str]:
    from trainspec.conformance.deviations import load_deviations

    if given is None:
        return {}
    if isinstance(given, Path):
        return load_deviations(given)
    return {registry.get(k).id: v for k, v in given.items()}


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


# ------------------------------------------------------------------------ the option table

@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """One option of ``trainspec check`` and of the pytest plugin (``--trainspec-<name>``).

    ``key`` is :func:`plan`'s keyword; ``flag`` the command line's spelling; the plugin
    spells it ``--trainspec-`` and the flag's name.
    """

    key: str
    flag: str
    help: str
    default: object = None
    metavar: str | None = None
    convert: Callable[[str], object] | None = None  # text -> value (argparse's ``type``)
    choices: tuple[str, ...] | None = None
    is_switch: bool = False  # present or not (store_true)
    short: str | None = None  # the command line's one-letter spelling, e.g. -n
    in_plugin: bool = True  # pytest-xdist owns -n: the plugin leaves workers out

    @property
    def plugin_flag(self) -> str:
        return "--trainspec-" + self.flag.removeprefix("--")

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value):  # nan passes no comparison, inf overflows every clock
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds, got {text!r}")
    return value


_TARGETS = "reference (default), lightning, hf, ignite, keras, or MODULE:OBJECT naming an adapter"

OPTIONS: tuple[Option, ...] = (
    Option(key="target", flag="--target", metavar="TARGET",
           help=f"the trainer to check: {_TARGETS}"),
    Option(key="base_trainer", flag="--base-trainer", metavar="MODULE:CLASS",
           help="check a base class in the seed's shape instead of a TARGET"),
    Option(key="clauses", flag="--clauses", metavar="IDS_OR_FAMILIES",
           help="comma-separated clause IDs or families, e.g. RES,PAT-5 (default: all)"),
    Option(key="world_size", flag="--world-size", default=2, metavar="N",
           convert=_whole_number, help="ranks of the multi-rank runs (default: 2; 1 skips "
           "them)"),
    Option(key="timeout_s", flag="--timeout", default=60.0, metavar="SECONDS",
           convert=_seconds, help="bound on every single run, and on the adapter's import "
           f"and description, in seconds (default: 60, at most {MAX_TIMEOUT_S:g})"),
    # the plugin's items are pytest's to schedule: pytest-timeout bounds a session there
    Option(key="deadline_s", flag="--deadline", default=DEFAULT_DEADLINE_S, metavar="SECONDS",
           convert=_seconds, in_plugin=False, help="bound on the whole check, in seconds (default: "
           f"{DEFAULT_DEADLINE_S:g}, fits a 20-minute CI job): checks not done by then come "
           "out timeout and every report is still written"),
    Option(key="backend", flag="--backend", choices=get_args(Backend),
           help="collective backend of the multi-rank runs (default: gloo on CPU, nccl when "
           "CUDA has enough devices)"),
    Option(key="deviations", flag="--deviations", metavar="FILE.toml", convert=Path,
           help='declared deviations: a [deviations] table of "ID" = "reason" (under pytest '
           "their checks become strict xfails)"),
    Option(key="workers", flag="--workers", short="-n", default="auto", metavar="WORKERS",
           convert=_workers, in_plugin=False,
           help="run families of checks in this many parallel workers, or auto: one per core, "
           "bounded by memory (default: auto; 1 runs them one after another)"),
    Option(key="profile", flag="--profile", default="fast", choices=get_args(Profile),
           help="property checks: fast (60 generated runs each, the default) or ci (250); "
           "both derandomized, so a verdict is reproducible"),
    Option(key="fresh", flag="--fresh-processes", is_switch=True, default=False,
           help="start new worker processes for every run (isolation over speed)"),
    Option(key="remedies", flag="--remedies", metavar="NAMES",
           help="comma-separated remedies the target's adapter declares (documented "
           "non-default framework switches), turned on for this run; the report lists them"),
)


def _workers_value(got: object) -> int | Literal["auto"]:
    if got == "auto":
        return "auto"
    return int(str(got))


def option(key: str) -> Option:
    """The option of :func:`plan`'s keyword ``key``."""
    return next(o for o in OPTIONS if o.key == key)


def plan_from(value: Callable[[Option], object], *, docs_url: str | None = None) -> Plan:
    """The plan of the options an entry point parsed; ``value(option)`` gives each one's
    parsed value (or its default)."""
    def text(key: str) -> str | None:
        got = value(option(key))
        return None if got is None else str(got)

    def number(key: str) -> float:
        got = value(option(key))
        return float(got) if isinstance(got, int | float) else float(str(got))

    deviations = value(option("deviations"))
    return plan(text("target"), base_trainer=text("base_trainer"), clauses=text("clauses"),
                world_size=int(number("world_size")), backend=text("backend"),
                timeout_s=number("timeout_s"), workers=_workers_value(value(option("workers"))),
                deadline_s=number("deadline_s"),
                profile=text("profile") or "fast", fresh=value(option("fresh")) is True,
                deviations=None if deviations is None else Path(str(deviations)),
                docs_url=docs_url, remedies=text("remedies"))
