"""The suite's result types: what a check returns, what a clause gets, what a report holds.

These are data, shared by the runner, the report writers, the CLI and the pytest plugin. The
JSON form of :class:`Report` is a contract (design.md): keep its field names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from trainspec.conformance.spec.causes import Remedy, RootCause

__all__ = [
    "SEVERITIES",
    "VERDICTS",
    "CaseOutcome",
    "CaseResult",
    "CheckOutcome",
    "CheckResult",
    "ClauseResult",
    "Level",
    "Report",
    "Severity",
    "Verdict",
    "common_cause",
    "gravest_first",
    "normal_cause",
    "shared_causes",
    "to_verdict",
    "worst_verdict",
]

Level = Literal["MUST", "SHOULD"]
Verdict = Literal["pass", "fail", "deviation", "n/a", "error", "timeout"]
CheckOutcome = Literal["passed", "failed", "n/a", "error", "timeout"]

CaseOutcome = Literal["failed", "passed", "not judged"]
# How grave a failing case is, gravest first: the trainer crashed, hung or died where its
# scenario asked for none; it lost state or a file (a checkpoint no longer loads, an epoch never
# saved, the best model gone); it decided or recorded something wrong; a run did not show what
# its scenario asked (missing evidence). A check's evidence is its gravest failing case's, the
# earlier declared first among equals.
Severity = Literal["crash", "loss", "wrong", "unshown"]

VERDICTS: tuple[Verdict, ...] = ("pass", "fail", "deviation", "n/a", "error", "timeout")
SEVERITIES: tuple[Severity, ...] = ("crash", "loss", "wrong", "unshown")

# A clause's verdict is that of its worst check. A proven violation outranks a check that could
# not run; a run that hung outranks one the harness broke on; n/a only when nothing else ran.
_CLAUSE_RANK: dict[CheckOutcome, int] = {"failed": 4, "timeout": 3, "error": 2, "passed": 1,
                                         "n/a": 0}
_TO_VERDICT: dict[CheckOutcome, Verdict] = {"failed": "fail", "timeout": "timeout",
                                            "error": "error", "passed": "pass", "n/a": "n/a"}


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseResult:
    """One case of a check (a scenario, a crash point, a file): how it ended.

    ``evidence`` is the evidence line of a failed case and the reason of one not judged (empty
    for a pass); ``severity`` and ``cause`` are a failed case's (see :data:`Severity`,
    :attr:`CheckResult.cause`).
    """

    name: str
    outcome: CaseOutcome
    evidence: str = ""
    severity: Severity | None = None
    detail: str = ""
    cause: str = ""


def gravest_first(cases: tuple[CaseResult, ...] | list[CaseResult]) -> list[CaseResult]:
    """The failed cases, gravest first (their declared order among equals)."""
    failed = [c for c in cases if c.outcome == "failed"]
    return sorted(failed, key=lambda c: SEVERITIES.index(c.severity or "wrong"))


def common_cause(causes: list[str]) -> str:
    """The one cause every failing case or check shares; "" when one has none or they differ."""
    return causes[0] if causes and causes[0] and len(set(causes)) == 1 else ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    """One check function's outcome on one target, with one line of evidence.

    ``detail`` carries what does not fit a line: a traceback, the stacks of stuck ranks, a
    reproducer.
    """

    name: str
    clauses: tuple[str, ...]
    outcome: CheckOutcome
    evidence: str
    duration_s: float
    detail: str = ""
    # for an outcome other than passed or n/a: the reason in a short form that other checks
    # showing the same fault share (a run that raised, a checkpoint that does not load, an
    # adapter error), so reports can group the clauses one cause is behind; "" when none (or
    # when its failing cases stem from different causes)
    cause: str = ""
    # every case it judged, in the order it judged them: failed (each with its evidence; the
    # gravest is ``evidence``), passed, and not judged (with why)
    cases: tuple[CaseResult, ...] = ()

    @property
    def failing(self) -> list[CaseResult]:
        """Its failed cases, gravest first."""
        return gravest_first(self.cases)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClauseResult:
    """A clause's verdict on a target, and the checks it rests on."""

    id: str
    level: Level
    title: str
    verdict: Verdict
    evidence: str
    checks: tuple[CheckResult, ...] = ()
    deviation_reason: str | None = None
    note: str = ""  # e.g. "declared as a deviation but passes: remove it"
    # kept apart from the evidence, so a consumer of the JSON gets each on its own; the
    # writers show them after the evidence
    framework_source: str | None = None  # the framework code its adapter holds responsible
    docs: str | None = None  # the clause's spec page, for a selected clause that does not pass
    # for a clause not passing: the cause every one of its failing checks (and so every
    # failing case) shares, "" when they do not share one
    cause: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """Every clause of the spec, judged on one target."""

    trainspec: str
    target: str
    environment: dict[str, str | None]
    clauses: tuple[ClauseResult, ...]
    duration_s: float
    selected: tuple[str, ...] = field(default=())
    # what the adapter says of its framework (spec.causes); the matrix pages show them
    root_causes: tuple[RootCause, ...] = ()
    remedies: tuple[Remedy, ...] = ()
    applied_remedies: tuple[str, ...] = ()  # the remedies this run turned on (not defaults)

    @property
    def conformant(self) -> bool:
        """Every MUST clause passes or is a declared deviation."""
        return all(c.verdict in ("pass", "deviation") for c in self.clauses
                   if c.level == "MUST" and (not self.selected or c.id in self.selected))

    @property
    def summary(self) -> dict[Verdict, int]:
        counts: dict[Verdict, int] = dict.fromkeys(VERDICTS, 0)
        for clause in self.clauses:
            counts[clause.verdict] += 1
        return counts

    def clause(self, clause_id: str) -> ClauseResult:
        for c in self.clauses:
            if c.id == clause_id:
                return c
        raise KeyError(clause_id)


def to_verdict(outcome: CheckOutcome) -> Verdict:
    """The clause verdict a single check outcome stands for (``failed`` -> ``fail``)."""
    return _TO_VERDICT[outcome]


def worst_verdict(outcomes: list[CheckOutcome]) -> Verdict:
    """The clause verdict for its checks' outcomes (no checks at all is handled by the caller)."""
    worst = max(outcomes, key=lambda o: _CLAUSE_RANK[o])
    if worst == "n/a" and any(o == "passed" for o in outcomes):
        return "pass"
    return _TO_VERDICT[worst]


# a run's own folder under the harness's scratch root: runs of different checks differ there
_RUN_FOLDER = re.compile(r"(<trainspec-tmp>/runs/)[^/\s'\"]+")
MAX_CAUSE_CHARS = 240


def normal_cause(text: str) -> str:
    """A reason in the short, normalized form clauses share: its first line, a run's own
    folder written ``<run>``, cut to :data:`MAX_CAUSE_CHARS`."""
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    line = _RUN_FOLDER.sub(r"\1<run>", line)
    return line if len(line) <= MAX_CAUSE_CHARS else line[: MAX_CAUSE_CHARS - 3] + "..."


def shared_causes(clauses: tuple[ClauseResult, ...] | list[ClauseResult]
                  ) -> list[tuple[str, tuple[str, ...]]]:
    """The causes behind two or more clauses that do not pass, each with those clauses' IDs,
    in the order the clauses come (most clauses first)."""
    by_cause: dict[str, list[str]] = {}
    for c in clauses:
        if c.cause and c.verdict in ("fail", "deviation", "error", "timeout"):
            by_cause.setdefault(c.cause, []).append(c.id)
    groups = [(cause, tuple(ids)) for cause, ids in by_cause.items() if len(ids) > 1]
    return sorted(groups, key=lambda g: -len(g[1]))
