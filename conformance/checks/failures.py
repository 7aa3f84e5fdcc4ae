"""How a check, or one of its cases, ends other than by passing: the exceptions checks raise."""

from __future__ import annotations

from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import RankTrace, Trace
from trainspec.conformance.spec.results import Severity

__all__ = ["CheckFailed", "NotApplicable", "PropertyTimeout", "RunBroke"]


class CheckFailed(Exception):
    """The trainer violated the clause; the message is the evidence line. ``cause``, when
    the same fault can show under other clauses too, says it in words they share (reports
    group the clauses behind one cause). ``severity``, when given, overrides the one its case
    declares (:data:`~trainspec.conformance.spec.results.Severity`)."""

    def __init__(self, evidence: str, detail: str = "", *, cause: str = "",
                 severity: Severity | None = None) -> None:
        super().__init__(evidence)
        self.evidence, self.detail, self.cause = evidence, detail, cause
        self.severity = severity


class NotApplicable(Exception):
    """The clause (or, inside a case, the case) cannot be judged on this target; the message
    says why."""


class RunBroke(Exception):
    """A run ended in a way the scenario did not ask for: raised, killed, hung, lost."""

    def __init__(self, trace: Trace, scenario: Scenario) -> None:
        bad = _first_broken(trace)
        self.trace, self.rank = trace, bad
        self.timed_out = any(r.status == "timeout" for r in trace.ranks)
        self.ours = bad.is_ours
        where = f" on rank {bad.rank}" if len(trace.ranks) > 1 else ""
        super().__init__(f"scenario {scenario.name!r}: the run {bad.status}{where}: {bad.error}")
        self.cause = f"the run {bad.status}: {bad.error}"
        details = []
        for r in trace.ranks:
            if r.status != "completed" and r.detail:
                details.append(f"--- rank {r.rank} ({r.status}) ---\n{r.detail}")
        self.detail = "\n".join(details)

    @property
    def is_the_trainers(self) -> bool:
        """The trainer itself raised, died or quit (a fail), not a hang nor the suite's own
        breakage (which end the whole check)."""
        return not self.timed_out and not self.ours


def _first_broken(trace: Trace) -> RankTrace:
    """The rank where a run's trouble began, whose error the evidence quotes: a rank that hung
    (the others then time out in a collective, or give up on it), else one that died or was
    lost, else the one that raised first; a rank that ended normally only when none broke."""
    broken = [r for r in trace.ranks if r.status != "completed"] or list(trace.ranks)
    order = {"timeout": 0, "killed": 1, "lost": 1, "exited": 2, "raised": 3}
    return min(broken, key=lambda r: (order.get(r.status, 4),
                                      r.ended_at if r.ended_at is not None else float("inf"),
                                      r.rank))


class PropertyTimeout(Exception):
    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail
