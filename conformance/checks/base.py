"""The check framework: the registry, the context a check runs in, and outcome rules.

A check is a function ``check_<subject>_<property>(ctx) -> str``, registered with the clause IDs
it verifies and the capabilities it needs. It returns one line of evidence when the trainer
meets the clause, and raises :class:`CheckFailed` with one line of evidence when it does not.
Runs that crash, hang or break the harness are classified by :func:`run_check`: a trainer that
raises where the scenario expects none fails; the suite's own breakage is ``error``.
"""

from __future__ import annotations

import json
import os
import re
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import trainspec
from trainspec.conformance.run.adapter import Capability
from trainspec.conformance.run.protocol import PropertyOutcome
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import Trace
from trainspec.conformance.spec.results import CheckOutcome, CheckResult
from trainspec.errors import AdapterError, HarnessError

__all__ = [
    "CHECKS",
    "CheckContext",
    "CheckFailed",
    "CheckSpec",
    "NotApplicable",
    "RunBroke",
    "Runs",
    "check",
    "run_check",
]


class CheckFailed(Exception):
    """The trainer violated the clause; the message is the evidence line."""

    def __init__(self, evidence: str, detail: str = "") -> None:
        super().__init__(evidence)
        self.evidence, self.detail = evidence, detail


class NotApplicable(Exception):
    """The clause cannot be judged on this target; the message says why."""


class RunBroke(Exception):
    """A run ended in a way the scenario did not ask for: raised, killed, hung, lost."""

    def __init__(self, trace: Trace, scenario: Scenario) -> None:
        bad = next(r for r in trace.ranks if r.status != "completed")
        self.trace, self.rank = trace, bad
        self.timed_out = any(r.status == "timeout" for r in trace.ranks)
        self.ours = bad.is_ours
        where = f" on rank {bad.rank}" if len(trace.ranks) > 1 else ""
        super().__init__(f"scenario {scenario.name!r}: the run {bad.status}{where}: {bad.error}")
        details = []
        for r in trace.ranks:
            if r.status != "completed" and r.detail:
                details.append(f"--- rank {r.rank} ({r.status}) ---\n{r.detail}")
        self.detail = "\n".join(details)


class Runs(Protocol):
    """What checks need of the harness: runs of the target's adapter, bounded in time.

    :class:`~trainspec.conformance.run.harness.Harness` satisfies it; a fake that returns
    recorded traces lets a check be judged with no worker process.
    """

    @property
    def root(self) -> Path:
        """The scratch folder runs write under (evidence names it ``<trainspec-tmp>``)."""
        ...

    def run(self, scenario: Scenario, *, ckpt_root: Path | None = None,
            timeout_s: float | None = None) -> Trace:
        """One run of ``scenario`` on its ranks; a new checkpoint folder unless given one."""
        ...

    def new_ckpt_root(self, label: str) -> Path:
        """A new, empty checkpoint folder (chained runs share one)."""
        ...

    def property(self, name: str, *, runner: str, max_examples: int) -> PropertyOutcome:
        """A hypothesis property run next to the trainer (``runner``: MODULE:FUNCTION)."""
        ...


CheckFunc = Callable[["CheckContext"], str]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckSpec:
    name: str
    clauses: tuple[str, ...]
    requires: frozenset[Capability]
    func: CheckFunc
    multi_rank: bool = False
    # the normative sentences (conformance/spec/sentences.py, e.g. "RES-5.2") it exercises
    covers: tuple[str, ...] = ()

    @property
    def doc(self) -> str:
        return (self.func.__doc__ or "").strip().splitlines()[0] if self.func.__doc__ else ""


CHECKS: dict[str, CheckSpec] = {}


def check(*clauses: str, requires: Iterable[Capability] = (), multi_rank: bool = False,
          covers: Iterable[str] = ()) -> Callable[[CheckFunc], CheckFunc]:
    """Register a check for ``clauses``; its name is the function's name.

    ``covers`` names the sentences it exercises (``"RES-5.2"``), for the coverage map
    (:mod:`trainspec.conformance.checks.coverage`).
    """

    def register(func: CheckFunc) -> CheckFunc:
        name = func.__name__
        if not name.startswith("check_"):
            raise ValueError(f"{name}: check functions are named check_<subject>_<property>")
        if name in CHECKS:
            raise ValueError(f"{name}: registered twice")
        CHECKS[name] = CheckSpec(name=name, clauses=tuple(clauses), requires=frozenset(requires),
                                 func=func, multi_rank=multi_rank, covers=tuple(covers))
        return func

    return register


@dataclass(slots=True, kw_only=True)
class CheckContext:
    """What a check sees: the target's runs, its capabilities, and a cache of runs."""

    runs: Runs
    capabilities: frozenset[Capability]
    world_size: int = 2
    target_args: str = "target='reference'"  # how a reproducer names the target
    max_examples: int = 60
    memo: dict[str, object] = field(default_factory=dict)  # chained runs shared by checks
    _cache: dict[str, Trace] = field(default_factory=dict)

    def run(self, scenario: Scenario) -> Trace:
        """The trace of one run (cached: a scenario is deterministic)."""
        key = json.dumps(scenario.to_json(), sort_keys=True)
        if key not in self._cache:
            self._cache[key] = self.runs.run(scenario)
        return self._cache[key]

    def completed(self, scenario: Scenario) -> Trace:
        """The trace of a run that must end normally on every rank."""
        trace = self.run(scenario)
        if not trace.completed:
            raise RunBroke(trace, scenario)
        return trace


SCRATCH = "<trainspec-tmp>"  # stands for the harness's temporary folder in evidence
# the folder holding the trainspec package (the repository, or site-packages when installed)
_TRAINSPEC_HOME = str(Path(trainspec.__file__).parent.parent) + os.sep
_SITE_PACKAGES = re.compile(r"/[^\s\"'<>]*?/(?:site|dist)-packages/")
_STDLIB = re.compile(r"/[^\s\"'<>]*?/lib/python3\.\d+/")


def portable(text: str, scratch: str) -> str:
    """Evidence or a traceback as it reads on any machine: the harness's temporary folder
    (``scratch``) becomes ``<trainspec-tmp>``, installed packages are named from
    site-packages (``lightning/pytorch/...``), the standard library as ``<python>/...`` and
    trainspec's own files from the folder holding it (``trainspec/conformance/run/worker.py``)."""
    text = text.replace(scratch, SCRATCH)
    text = _SITE_PACKAGES.sub("", text)
    text = _STDLIB.sub("<python>/", text)
    return text.replace(_TRAINSPEC_HOME, "")


def run_check(spec: CheckSpec, ctx: CheckContext) -> CheckResult:
    """Run one check and classify how it ended."""
    started = time.monotonic()

    scratch = str(ctx.runs.root)

    def result(outcome: CheckOutcome, evidence: str, detail: str = "") -> CheckResult:
        return CheckResult(name=spec.name, clauses=spec.clauses, outcome=outcome,
                           evidence=portable(evidence, scratch),
                           duration_s=round(time.monotonic() - started, 3),
                           detail=portable(detail, scratch))

    missing = sorted(spec.requires - ctx.capabilities)
    if missing:
        return result("n/a", f"the target does not declare {', '.join(missing)}")
    try:
        evidence = spec.func(ctx)
    except CheckFailed as e:
        return result("failed", e.evidence, e.detail)
    except NotApplicable as e:
        return result("n/a", str(e))
    except RunBroke as e:
        if e.timed_out:
            return result("timeout", str(e), e.detail)
        if e.ours:
            return result("error", str(e), e.detail)
        return result("failed", str(e), e.detail)
    except PropertyTimeout as e:
        return result("timeout", str(e), e.detail)
    except (HarnessError, AdapterError) as e:
        return result("error", f"{type(e).__name__}: {e}".splitlines()[0],
                      traceback.format_exc())
    except Exception as e:
        return result("error", f"internal error in {spec.name}: {type(e).__name__}: {e}",
                      traceback.format_exc())
    return result("passed", evidence)


def property_check(ctx: CheckContext, name: str, clause: str, *, max_examples: int) -> str:
    """Run a hypothesis property next to the trainer; failing examples come back shrunk."""
    from trainspec.conformance.checks.properties import reproducer

    outcome = ctx.runs.property(name, runner=f"{reproducer.__module__}:run_property",
                                max_examples=max_examples)
    if outcome.verdict == "passed":
        return f"{outcome.examples} generated score sequences and configs matched the oracle"
    if outcome.verdict == "broke":
        message = f"{clause}: the property run {outcome.status}: {outcome.error}"
        if outcome.status == "timeout":
            raise PropertyTimeout(message, outcome.detail)
        raise HarnessError(message)
    repro = reproducer(ctx.target_args, clause, dict(outcome.scenario or {}))
    raise CheckFailed(f"{outcome.evidence} [falsifying example after "
                      f"{outcome.examples} runs; reproducer in the detail]", repro)


class PropertyTimeout(Exception):
    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail
