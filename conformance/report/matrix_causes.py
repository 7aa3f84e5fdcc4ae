"""The matrix's account of why a framework fails, and what fixes it.

Root causes (:class:`~trainspec.conformance.spec.causes.RootCause`, declared by an adapter)
are listed for each target above the clause tables, those behind at least one failing clause
only. Remedies (:class:`~trainspec.conformance.spec.causes.Remedy`) are verified: ``trainspec
matrix`` runs a remedy's failing clauses again with it on, and a :class:`RemedyRun` keeps what
that run decided; a failing cell then reads "fail; passes with X=Y (verified)" or "fail; X=Y
does not fix it", with the evidence of both runs in the details.

Reads reports only: :mod:`trainspec.conformance.report.matrix` builds on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainspec.conformance.spec.causes import Remedy, RootCause
from trainspec.conformance.spec.results import VERDICTS, Report, Verdict

__all__ = ["RemedyRun", "causes_behind", "remedy_notes", "remedy_phrase", "runs_from_json",
           "runs_to_json"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RemedyRun:
    """A remedy's clauses judged again with the remedy on: clause ID -> (verdict, evidence)."""

    remedy: str  # its name, as the target's report declares it
    results: Mapping[str, tuple[Verdict, str]]

    @classmethod
    def of(cls, remedy: str, report: Report, clause_ids: Sequence[str]) -> RemedyRun:
        return cls(remedy=remedy, results={c: (report.clause(c).verdict,
                                                report.clause(c).evidence)
                                            for c in clause_ids})


def runs_to_json(runs: Mapping[str, Sequence[RemedyRun]]) -> dict[str, Any]:
    """``{TARGET: [{"remedy": NAME, "clauses": {ID: {"verdict", "evidence"}}}]}``."""
    return {target: [{"remedy": r.remedy,
                      "clauses": {c: {"verdict": v, "evidence": e}
                                  for c, (v, e) in r.results.items()}} for r in rs]
            for target, rs in runs.items() if rs}


def runs_from_json(data: object, source: str) -> dict[str, tuple[RemedyRun, ...]]:
    """:func:`runs_to_json`'s output back.

    Raises:
        ValueError: not that shape (the message names ``source`` and what is wrong).
    """
    if not isinstance(data, dict):
        raise ValueError(f"{source}: \"remedy_runs\" should be an object, found "
                         f"{type(data).__name__}")
    out: dict[str, tuple[RemedyRun, ...]] = {}
    for target, raw in data.items():
        runs = []
        for entry in raw if isinstance(raw, list) else [None]:
            if not isinstance(entry, dict) or not isinstance(entry.get("clauses"), dict):
                raise ValueError(f"{source}: remedy run of {target} should be an object with "
                                 f"\"remedy\" and \"clauses\", found {entry!r:.100}")
            results: dict[str, tuple[Verdict, str]] = {}
            for cid, got in entry["clauses"].items():
                verdict = got.get("verdict") if isinstance(got, dict) else None
                if verdict not in VERDICTS:
                    raise ValueError(f"{source}: remedy run of {target}, {cid}: verdict "
                                     f"{verdict!r}, expected one of {', '.join(VERDICTS)}")
                results[str(cid)] = (verdict, str(got.get("evidence", "")))
            runs.append(RemedyRun(remedy=str(entry.get("remedy")), results=results))
        out[str(target)] = tuple(runs)
    return out


def remedy_notes(report: Report, runs: Sequence[RemedyRun], clause_id: str
                 ) -> list[tuple[Remedy, Verdict, str]]:
    """The remedies verified on ``clause_id``: (remedy, its verdict with it on, evidence)."""
    declared = {r.name: r for r in report.remedies}
    return [(declared[run.remedy], *run.results[clause_id]) for run in runs
            if run.remedy in declared and clause_id in run.results]


def remedy_phrase(remedy: Remedy, verdict: Verdict) -> str:
    """``passes with X=Y (verified)`` or ``X=Y does not fix it (fail)``."""
    if verdict == "pass":
        return f"passes with {remedy.setting} (verified)"
    return f"{remedy.setting} does not fix it ({verdict})"


def causes_behind(report: Report, shown: Sequence[str]
                  ) -> tuple[list[tuple[RootCause, list[str]]], list[str]]:
    """The declared root causes behind the report's failing clauses (each with the clauses it
    explains, in registry order), and the failing clauses no declared cause names."""
    failing = [c.id for c in report.clauses if c.verdict == "fail" and c.id in shown]
    behind = [(cause, [c for c in failing if c in cause.clauses])
              for cause in report.root_causes]
    named = {c for cause in report.root_causes for c in cause.clauses}
    return [(cause, ids) for cause, ids in behind if ids], [c for c in failing if c not in named]
