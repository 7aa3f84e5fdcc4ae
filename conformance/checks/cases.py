"""A check's cases: every one runs to its end and is reported.

A check judges several cases (score scripts, crash points, files, the halves of a clause) and
runs each of them whatever an earlier one found::

    for s in scenarios:
        with ctx.case(s.name):
            match_decisions("BEST-1", s, ctx.completed(s), what="improved")

Inside ``with ctx.case(name)``, a :class:`CheckFailed` or a run the trainer broke (it raised,
died or quit: :class:`RunBroke`) ends that case alone, recorded as failed with its evidence,
and the check goes on with the next; :class:`NotApplicable` ends it as not judged, with why.
A case that ends normally passes once every run it judged carried its scenario out
(``carried_out.py``); one whose run did not fails with severity ``unshown``. A hang (a run
that timed out) or the suite's own breakage still ends the whole check: the cases after it
are reported not judged.

Each failed case has a severity (:data:`~trainspec.conformance.spec.results.Severity`): the
one its ``with ctx.case(name, severity=...)`` declares (``wrong`` unless said), or the one its
:class:`CheckFailed` names; a crash is always ``crash``. The check's evidence is its gravest
failed case's; the reports list every case.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType

from trainspec.conformance.checks.carried_out import shortfall
from trainspec.conformance.checks.failures import CheckFailed, NotApplicable, RunBroke
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import Trace
from trainspec.conformance.spec.results import CaseResult, Severity, gravest_first

__all__ = ["Case", "CaseLog", "Judged", "carried_out", "verify_the_rest"]

Judged = Sequence[tuple[Scenario, Trace]]
# judges that the runs a case looked at carried their scenarios out: raises CheckFailed with
# what one lacks, or RunBroke for a run that hung or broke the harness
Verify = Callable[[Judged], None]


class CaseLog:
    """The cases of the running check, in the order they were judged."""

    def __init__(self) -> None:
        self.cases: list[CaseResult] = []
        self.open: Case | None = None
        self.failed_runs: set[str] = set()  # the scenarios that failed cases judged
        self.inapplicable: list[str] = []  # why, for each case found not applicable

    @property
    def failing(self) -> list[CaseResult]:
        return gravest_first(self.cases)

    @property
    def has_passed(self) -> bool:
        return any(c.outcome == "passed" for c in self.cases)

    def record(self, case: CaseResult) -> None:
        """Note how a case ended. A case judged again under the same name (a chain of runs
        first, then the check's comparison of them) is one case: failed once, failed."""
        same = next((i for i, c in enumerate(self.cases) if case.name and c.name == case.name),
                    None)
        if same is None:
            self.cases.append(case)
        elif self.cases[same].outcome != "failed":
            self.cases[same] = case

    def fail(self, name: str, e: CheckFailed | RunBroke, severity: Severity,
             runs: Sequence[str] = ()) -> None:
        """Record the case ``name`` failed by ``e`` (a RunBroke is a ``crash``)."""
        if isinstance(e, RunBroke):
            evidence, severity = str(e), "crash"
        else:
            evidence, severity = e.evidence, e.severity or severity
        self.failed_runs.update(runs)
        self.record(CaseResult(name=name, outcome="failed", evidence=evidence,
                               severity=severity, detail=e.detail, cause=e.cause))

    def not_judged(self, name: str, why: str) -> None:
        self.record(CaseResult(name=name, outcome="not judged", evidence=why))


class Case:
    """``with ctx.case(name)``: one case of the running check (see the module's docstring)."""

    def __init__(self, log: CaseLog, name: str, severity: Severity, verify: Verify) -> None:
        self.log, self.name, self.severity, self.verify = log, name, severity, verify
        self.runs: dict[str, tuple[Scenario, Trace]] = {}

    def saw(self, scenario: Scenario, trace: Trace) -> None:
        self.runs[scenario.name] = (scenario, trace)

    def __enter__(self) -> Case:
        if self.log.open is not None:
            raise RuntimeError(f"case {self.name!r} opened inside case {self.log.open.name!r}: "
                               "cases do not nest")
        self.log.open = self
        return self

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> bool:
        self.log.open = None
        if isinstance(e, CheckFailed) or (isinstance(e, RunBroke) and e.is_the_trainers):
            self.log.fail(self.name, e, self.severity, list(self.runs))
            return True
        if e is not None and not isinstance(e, NotApplicable):
            return False  # a hang, the suite's breakage: the check ends (base.run_check)
        try:  # a pass, like n/a, rests on runs that did what they were asked
            self.verify(list(self.runs.values()))
        except CheckFailed as lacking:
            self.log.fail(self.name, lacking, "unshown", list(self.runs))
            return True
        if e is None:
            self.log.record(CaseResult(name=self.name, outcome="passed"))
        else:
            self.log.not_judged(self.name, str(e))
            self.log.inapplicable.append(str(e))
        return True


def carried_out(clause: str, judged: Judged) -> None:
    """Refuse a pass resting on a run that did not carry its scenario out."""
    for scenario, trace in judged:
        # the rank a scenario interrupts may end in the harness's own code: that is the
        # interruption, not a breakage
        crashed = None if scenario.crash is None else scenario.crash.rank
        if any(r.status in ("timeout", "lost") or (r.is_ours and r.rank != crashed)
               for r in trace.ranks):
            raise RunBroke(trace, scenario)
        lacking = shortfall(scenario, trace)
        if lacking is not None:
            raise CheckFailed(f"{clause}: scenario {scenario.name!r}: the run {lacking}; a "
                              "pass needs evidence that it did",
                              "\n".join(r.detail for r in trace.ranks if r.detail))


def verify_the_rest(clause: str, judged: dict[str, tuple[Scenario, Trace]], log: CaseLog
                    ) -> None:
    """Each run the check judged outside its failed cases must have carried its scenario out:
    one that did not is a failed case of its own (severity ``unshown``)."""
    for name, (scenario, trace) in judged.items():
        if name in log.failed_runs:
            continue
        try:
            carried_out(clause, [(scenario, trace)])
        except CheckFailed as e:
            log.fail(f"scenario {name!r} carried out", e, "unshown", [name])
