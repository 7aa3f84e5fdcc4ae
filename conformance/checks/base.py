"""The check framework: the registry, the context a check runs in, and outcome rules.

A check is a function ``check_<subject>_<property>(ctx) -> str``, registered with the clause IDs
it verifies and the capabilities it needs. It returns one line of evidence when the trainer
meets the clause, and raises :class:`CheckFailed` with one line of evidence when it does not;
a check of several cases runs each in ``with ctx.case(name):`` so that every one is judged
and reported (:mod:`~trainspec.conformance.checks.cases`). Runs that crash, hang or break the
harness are classified by :func:`run_check`: a trainer that raises where the scenario expects
none fails; the suite's own breakage is ``error``.
"""

from __future__ import annotations

import json
import os
import re
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import trainspec
from trainspec.conformance.checks.cases import Case, CaseLog, Judged, carried_out, verify_the_rest
from trainspec.conformance.checks.failures import (
    CheckFailed,
    NotApplicable,
    PropertyTimeout,
    RunBroke,
)
from trainspec.conformance.run.adapter import Capability
from trainspec.conformance.run.files import actionable_line
from trainspec.conformance.run.protocol import PropertyOutcome
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import Trace
from trainspec.conformance.spec.printable import printable
from trainspec.conformance.spec.results import (
    CaseResult,
    CheckOutcome,
    CheckResult,
    Severity,
    common_cause,
    normal_cause,
)
from trainspec.errors import AdapterError, HarnessError

__all__ = [
    "CHECKS",
    "CheckContext",
    "CheckFailed",
    "CheckSpec",
    "NotApplicable",
    "PropertyTimeout",
    "RunBroke",
    "Runs",
    "check",
    "run_check",
]


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

    def property(self, name: str, *, runner: str, max_examples: int,
                 max_runs: int = 0) -> PropertyOutcome:
        """A hypothesis property run next to the trainer (``runner``: MODULE:FUNCTION), its
        bound grown by the ``max_runs`` trainer runs it may make."""
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
    # modules its runs import next to the trainer (a task scored through torchmetrics): the
    # harness has its workers import them ahead of the runs
    imports: tuple[str, ...] = ()

    @property
    def doc(self) -> str:
        return (self.func.__doc__ or "").strip().splitlines()[0] if self.func.__doc__ else ""


CHECKS: dict[str, CheckSpec] = {}


def check(*clauses: str, requires: Iterable[Capability] = (), multi_rank: bool = False,
          covers: Iterable[str] = (), imports: Iterable[str] = ()
          ) -> Callable[[CheckFunc], CheckFunc]:
    """Register a check for ``clauses``, named as its function; ``covers`` names the
    sentences it exercises (``"RES-5.2"``), for :mod:`trainspec.conformance.checks.coverage`."""

    def register(func: CheckFunc) -> CheckFunc:
        name = func.__name__
        if not name.startswith("check_"):
            raise ValueError(f"{name}: check functions are named check_<subject>_<property>")
        if name in CHECKS:
            raise ValueError(f"{name}: registered twice")
        CHECKS[name] = CheckSpec(name=name, clauses=tuple(clauses), requires=frozenset(requires),
                                 func=func, multi_rank=multi_rank, covers=tuple(covers),
                                 imports=tuple(imports))
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
    # the runs the running check looked at, by scenario name (a rerun replaces the first):
    # a pass needs each to show its scenario carried out (run_check)
    judged: dict[str, tuple[Scenario, Trace]] = field(default_factory=dict)
    # the running check's cases that could not run here, each with the capabilities it lacks
    skipped: list[str] = field(default_factory=list)
    log: CaseLog = field(default_factory=CaseLog)  # the running check's cases (ctx.case)

    def case(self, name: str, *, severity: Severity = "wrong") -> Case:
        """``with ctx.case(name):`` judges one case of the running check to its end: a failure
        inside ends that case only (:mod:`~trainspec.conformance.checks.cases`)."""
        return Case(self.log, name, severity, self._verify)

    def _verify(self, judged: Judged) -> None:
        carried_out(self.checking[0] if self.checking else "?", judged)

    def _verify_the_rest(self) -> None:
        verify_the_rest(self.checking[0] if self.checking else "?", self.judged, self.log)

    def can(self, *needs: Capability, case: str) -> bool:
        """Whether the case ``case``, which needs ``needs`` beyond what the whole check
        requires, can run on this target; one that cannot is noted, and a pass says so.

        Capability gates are per case: ``@check(requires=...)`` names what every case needs
        (the check is n/a without it), :meth:`can` what one case needs besides.
        """
        missing = sorted(set(needs) - self.capabilities)
        if missing:
            why = f"the target does not declare {', '.join(missing)}"
            self.skipped.append(f"{case} ({why})")
            self.log.not_judged(case, why)
        return not missing
    # cases the running check could not judge on this target (a crash point it lacks): named
    # after a pass's evidence, never turned into a fail
    notes: list[str] = field(default_factory=list)
    checking: tuple[str, ...] = ()  # the running check's clauses

    def run(self, scenario: Scenario) -> Trace:
        """The trace of one run (cached: a scenario is deterministic, and its name only labels
        it, so scenarios that differ by name alone share one run)."""
        key = json.dumps({**scenario.to_json(), "name": None}, sort_keys=True)
        if key not in self._cache:
            self._cache[key] = self.runs.run(scenario)
        return self.saw(scenario, self._cache[key])

    def saw(self, scenario: Scenario, trace: Trace) -> Trace:
        """Note that the running check judges ``trace`` (a run made elsewhere, or cached)."""
        self.judged[scenario.name] = (scenario, trace)
        if self.log.open is not None:
            self.log.open.saw(scenario, trace)
        return trace

    def attempted_load(self, scenario: Scenario, path: Path) -> Trace:
        """The trace of a run starting from the checkpoint at ``path``, which must show the
        load attempted: a rank that did not complete must have refused that file (its error
        names it, or comes from torch.load or an unpickler), not ended before reaching it."""
        trace = self.run(scenario)
        for r in trace.ranks:
            said = f"{r.error}\n{r.detail}"
            if r.status in ("completed", "timeout", "lost") or r.is_ours:
                continue  # judged as any run is (run_check)
            if path.name not in said and not _LOAD_FRAMES.search(said):
                raise CheckFailed(f"scenario {scenario.name!r}: the run {r.status} "
                                  f"({r.error}) with no sign that it loaded {path.name}: "
                                  "nothing shows the load was attempted", r.detail)
        return trace

    def completed(self, scenario: Scenario) -> Trace:
        """The trace of a run that must end normally on every rank."""
        trace = self.run(scenario)
        if not trace.completed:
            raise RunBroke(trace, scenario)
        return trace


# where a refused load shows itself in an error or a traceback
_LOAD_FRAMES = re.compile(r"torch/serialization\.py|weights_only|[Uu]npickl|torch\.load")


class _Watched:
    """The check's :class:`Runs`, noting every run it makes in the context's ``judged``."""

    def __init__(self, inner: Runs, ctx: CheckContext) -> None:
        self.inner, self.ctx = inner, ctx

    @property
    def root(self) -> Path:
        return self.inner.root

    def run(self, scenario: Scenario, *, ckpt_root: Path | None = None,
            timeout_s: float | None = None) -> Trace:
        return self.ctx.saw(scenario, self.inner.run(scenario, ckpt_root=ckpt_root,
                                                     timeout_s=timeout_s))

    def new_ckpt_root(self, label: str) -> Path:
        return self.inner.new_ckpt_root(label)

    def property(self, name: str, *, runner: str, max_examples: int,
                 max_runs: int = 0) -> PropertyOutcome:
        return self.inner.property(name, runner=runner, max_examples=max_examples,
                                   max_runs=max_runs)


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
    """Run one check, every case of it, and classify how it ended.

    A failed case makes the check ``failed`` (a proven violation outranks how the rest ended),
    its evidence the gravest failed case's (every case is in ``cases``). A pass stands only when
    every run the check judged shows its scenario carried out
    (:func:`~trainspec.conformance.checks.carried_out.shortfall`); otherwise the check fails
    with what the run lacked, times out, or errs, as the run ended.
    """
    started = time.monotonic()
    scratch = str(ctx.runs.root)

    def clean(text: str) -> str:
        return printable(portable(text, scratch))

    def result(outcome: CheckOutcome, evidence: str, detail: str = "", cause: str = "",
               cases: tuple[CaseResult, ...] = ()) -> CheckResult:
        return CheckResult(name=spec.name, clauses=spec.clauses, outcome=outcome,
                           evidence=clean(evidence),
                           duration_s=round(time.monotonic() - started, 3),
                           detail=clean(detail), cause=normal_cause(clean(cause)),
                           cases=tuple(replace(c, evidence=clean(c.evidence),
                                               detail=clean(c.detail),
                                               cause=normal_cause(clean(c.cause)))
                                       for c in cases))

    missing = sorted(spec.requires - ctx.capabilities)
    if missing:
        return result("n/a", f"the target does not declare {', '.join(missing)}")
    runs, ctx.runs, ctx.judged = ctx.runs, _Watched(ctx.runs, ctx), {}
    ctx.skipped, ctx.notes, ctx.log, ctx.checking = [], [], CaseLog(), spec.clauses
    try:
        outcome, evidence, detail, cause = _ended(spec, ctx)
    finally:
        ctx.runs = runs
    log = ctx.log
    notes = list(dict.fromkeys(ctx.notes))
    for note in notes:
        log.not_judged("", note)
    failing = log.failing
    if failing:
        if outcome in ("timeout", "error"):  # it ended so after a case failed
            log.not_judged("the cases after the last one judged", f"{outcome}: {evidence}")
        elif outcome == "n/a" and evidence and evidence not in notes:
            log.not_judged("", evidence)
        cases = tuple(log.cases)
        return result("failed", failing[0].evidence, failing[0].detail,
                      common_cause([normal_cause(clean(c.cause)) for c in failing]), cases)
    if outcome == "passed":
        if ctx.skipped:
            evidence = f"{evidence}; not run: {'; '.join(ctx.skipped)}"
        if notes or log.inapplicable:
            evidence += f" (not judged: {'; '.join([*log.inapplicable, *notes])})"
    return result(outcome, evidence, detail, cause, tuple(log.cases))


def _ended(spec: CheckSpec, ctx: CheckContext) -> tuple[CheckOutcome, str, str, str]:
    """How the check's function ended, as (outcome, evidence, detail, cause); a failure that
    ends it outside any case is recorded as its last case."""
    log = ctx.log
    try:
        try:
            evidence = spec.func(ctx)
        except NotApplicable as e:
            # n/a, like a pass, rests on runs that did what they were asked ("no write to
            # interrupt" from a run that wrote nothing because it did nothing is a failure)
            ctx._verify_the_rest()
            return "n/a", str(e), "", ""
        ctx._verify_the_rest()
        if log.inapplicable and not log.has_passed and not log.failing:  # none could be
            return "n/a", "; ".join(log.inapplicable), "", ""  # judged here
        return "passed", evidence, "", ""
    except CheckFailed as e:
        log.fail("", e, "wrong")
        return "failed", e.evidence, e.detail, e.cause
    except RunBroke as e:
        if e.is_the_trainers:
            log.fail("", e, "crash")
            return "failed", str(e), e.detail, e.cause
        return ("timeout" if e.timed_out else "error"), str(e), e.detail, e.cause
    except PropertyTimeout as e:
        return "timeout", str(e), e.detail, ""
    except (HarnessError, AdapterError) as e:
        said = f"{type(e).__name__}: {actionable_line(str(e))}"
        return "error", said, traceback.format_exc(), said
    except Exception as e:
        said = f"internal error in {spec.name}: {type(e).__name__}: {actionable_line(str(e))}"
        where = traceback.format_exc()
        try:  # a check that tripped over runs that hold nothing fails on what they lack
            ctx._verify_the_rest()
        except RunBroke as broke:
            return ("timeout" if broke.timed_out else "error"), str(broke), broke.detail, ""
        return "error", said, where, ""


def property_check(ctx: CheckContext, name: str, clause: str, *, max_examples: int) -> str:
    """Run a hypothesis property next to the trainer; failing examples come back shrunk."""
    # named, not imported: hypothesis is imported where the property runs, next to the trainer
    outcome = ctx.runs.property(name, runner=PROPERTY_RUNNER, max_examples=max_examples)
    # examples failing for another clause's fault are set aside: that clause's check judges them
    aside = ""
    if outcome.set_aside:
        aside = (f"{sum(outcome.set_aside.values())} set aside as other clauses' faults ("
                 + ", ".join(f"{n} {c}'s" for c, n in outcome.set_aside.items()) + ")")
    if outcome.verdict == "passed":
        judged = outcome.judged.get(clause, outcome.examples)
        if judged == 0 and aside:
            raise NotApplicable(f"{clause}: no generated run could be judged: {aside}, "
                                "which their own checks judge")
        return (f"{judged} generated score sequences and configs matched the oracle"
                + (f"; {aside}" if aside else ""))
    if outcome.verdict == "broke":
        message = f"{clause}: the property run {outcome.status}: {outcome.error}"
        if outcome.status == "timeout":
            raise PropertyTimeout(message, outcome.detail)
        if outcome.status in ("killed", "exited"):  # the trainer's process died or quit
            raise CheckFailed(message, outcome.detail)
        raise HarnessError(message)
    repro = reproducer(ctx.target_args, clause, dict(outcome.scenario or {}))
    raise CheckFailed(f"{outcome.evidence} [falsifying example after "
                      f"{outcome.examples} runs{'; ' + aside if aside else ''}; "
                      "reproducer in the detail]", repro)


PROPERTY_RUNNER = "trainspec.conformance.checks.properties:run_property"


def reproducer(target_args: str, clause: str, scenario: dict[str, Any]) -> str:
    """A script that replays one falsifying example and raises on the same slip."""
    return (
        "# replay a trainspec property failure\n"
        "from trainspec.conformance.api import replay\n\n"
        f"scenario = {json.dumps(scenario)!r}\n"
        f"replay({target_args}, clause={clause!r}, scenario=scenario)\n"
    )
