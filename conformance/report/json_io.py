"""The JSON report (a contract, design.md): write it, and read it back.

The JSON starts with ``"trainspec"`` (the header) and ends with ``"complete": true`` (the
footer), so a report cut short by a killed job is detected on reading (:func:`from_json`). It
holds every clause. A clause's ``evidence`` is the evidence line alone; ``framework_source``
and ``docs`` come as fields of their own (absent in reports written before they existed,
which still read). ``root_causes``, ``remedies`` and ``applied_remedies``
(:mod:`trainspec.conformance.spec.causes`) are optional keys, present when not empty. A clause
that does not pass may carry a ``cause`` (its reason in the short form other clauses showing
the same fault share), and ``shared_causes`` lists each cause behind two or more clauses
(``{"cause": ..., "clauses": [...]}``); both optional, absent in older reports. Each entry of
a clause's ``checks`` may carry its ``cases``, every case it judged:
``{"name", "outcome": "failed" | "passed" | "not judged", "evidence"}``, a failed one with its
``severity`` (gravest first: crash, loss, wrong, unshown) and, when it has them, ``cause`` and
``detail``; optional too, and read back when present.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

from trainspec.conformance.report.output import write_text
from trainspec.conformance.spec.causes import Remedy, RootCause
from trainspec.conformance.spec.printable import printable
from trainspec.conformance.spec.results import (
    SEVERITIES,
    VERDICTS,
    CaseOutcome,
    CaseResult,
    CheckOutcome,
    CheckResult,
    ClauseResult,
    Level,
    Report,
    shared_causes,
)
from trainspec.errors import UsageError

__all__ = ["from_json", "read_json", "to_json", "write_json"]

_OUTCOMES: tuple[CheckOutcome, ...] = get_args(CheckOutcome)
_CASE_OUTCOMES: tuple[CaseOutcome, ...] = get_args(CaseOutcome)
_LEVELS: tuple[Level, ...] = get_args(Level)
_REPORT_KEYS = ("trainspec", "target", "environment", "conformant", "selected", "clauses",
                "summary", "duration_s", "complete")


def to_json(report: Report) -> dict[str, Any]:
    """The report as design.md's JSON object; ``"complete": true`` is the last key."""
    return {
        "trainspec": report.trainspec,
        "target": printable(report.target),
        "environment": {k: None if v is None else printable(v)
                        for k, v in report.environment.items()},
        "conformant": report.conformant,
        "selected": list(report.selected),
        "clauses": [_clause_json(c) for c in report.clauses],
        "summary": dict(report.summary),
        "duration_s": report.duration_s,
        **_causes_json(report),
        "complete": True,
    }


def _causes_json(report: Report) -> dict[str, Any]:
    """The adapter's root causes and remedies, and the remedies the run applied (optional
    keys: absent when empty, so reports of targets without them keep their shape)."""
    out: dict[str, Any] = {}
    shared = shared_causes(report.clauses)
    if shared:
        out["shared_causes"] = [{"cause": printable(cause), "clauses": list(ids)}
                                for cause, ids in shared]
    if report.root_causes:
        out["root_causes"] = [c.to_json() for c in report.root_causes]
    if report.remedies:
        out["remedies"] = [r.to_json() for r in report.remedies]
    if report.applied_remedies:
        out["applied_remedies"] = list(report.applied_remedies)
    return out


def _causes_from_json(obj: Mapping[str, Any], source: str
                      ) -> tuple[tuple[RootCause, ...], tuple[Remedy, ...], tuple[str, ...]]:
    try:
        causes = tuple(RootCause.from_json(_mapping(c, source, '"root_causes"'))
                       for c in _list(obj.get("root_causes", []), source, '"root_causes"'))
        remedies = tuple(Remedy.from_json(_mapping(r, source, '"remedies"'))
                         for r in _list(obj.get("remedies", []), source, '"remedies"'))
    except ValueError as e:
        raise _bad(source, "root causes and remedies as trainspec writes them", str(e)) from None
    applied = _list(obj.get("applied_remedies", []), source, '"applied_remedies"')
    return causes, remedies, tuple(str(a) for a in applied)


def _clause_json(clause: ClauseResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": clause.id, "level": clause.level, "title": clause.title,
        "verdict": clause.verdict, "evidence": printable(clause.evidence),
        "checks": [_check_json(c) for c in clause.checks],
    }
    if clause.deviation_reason is not None:
        out["deviation_reason"] = printable(clause.deviation_reason)
    if clause.note:
        out["note"] = printable(clause.note)
    if clause.framework_source is not None:
        out["framework_source"] = printable(clause.framework_source)
    if clause.docs is not None:
        out["docs"] = clause.docs
    if clause.cause:
        out["cause"] = printable(clause.cause)
    return out


def _check_json(check: CheckResult) -> dict[str, Any]:
    out: dict[str, Any] = {"name": check.name, "outcome": check.outcome,
                           "duration_s": check.duration_s}
    if check.cases:
        out["cases"] = [_case_json(c) for c in check.cases]
    return out


def _case_json(case: CaseResult) -> dict[str, Any]:
    out: dict[str, Any] = {"name": printable(case.name), "outcome": case.outcome,
                           "evidence": printable(case.evidence)}
    if case.severity is not None:
        out["severity"] = case.severity
    if case.cause:
        out["cause"] = printable(case.cause)
    if case.detail:
        out["detail"] = printable(case.detail)
    return out


def _case_from_json(raw: object, source: str, where: str) -> CaseResult:
    c = _mapping(raw, source, where)
    outcome, severity = c.get("outcome"), c.get("severity")
    if outcome not in _CASE_OUTCOMES:
        raise _bad(source, f"{where}.outcome one of {', '.join(_CASE_OUTCOMES)}", repr(outcome))
    if severity is not None and severity not in SEVERITIES:
        raise _bad(source, f"{where}.severity one of {', '.join(SEVERITIES)}", repr(severity))
    name, evidence, cause, detail = (_optional_str(c, key, where, source) or "" for key in
                                     ("name", "evidence", "cause", "detail"))
    return CaseResult(name=name, outcome=outcome, evidence=evidence, severity=severity,
                      cause=cause, detail=detail)


def write_json(report: Report, path: str | Path) -> None:
    """Write :func:`to_json` to ``path`` (indented, UTF-8, newline at the end)."""
    text = json.dumps(to_json(report), indent=2, ensure_ascii=False) + "\n"
    write_text(path, text, "--report")


def read_json(path: str | Path) -> Report:
    """Read a report file written by :func:`write_json`.

    Raises:
        UsageError: the file is missing, not JSON, or not a complete trainspec report.
    """
    where = Path(path)
    try:
        data = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"report {where}: no such file. Give the path of a report written "
                         "with `trainspec check --report FILE.json`.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"report {where}: expected a JSON report, cannot read it: {e}. "
                         "Write it again with `trainspec check --report FILE.json`.") from None
    return from_json(data, source=str(where))


def from_json(data: object, *, source: str = "report") -> Report:
    """Rebuild a :class:`Report` from :func:`to_json`'s output.

    Check results keep their name, outcome, duration and cases (not their evidence nor detail);
    a check that verifies several clauses comes back as one result naming all of them.

    Raises:
        UsageError: ``data`` is not a complete report (truncated, a key missing or mistyped).
    """
    obj = _mapping(data, source, "the report")
    if obj.get("complete") is not True:
        raise _bad(source, '"complete": true as the last key',
                   "no such key: the report was cut short (a killed or failed job)")
    missing = [k for k in _REPORT_KEYS if k not in obj]
    if missing:
        raise _bad(source, f"the keys {', '.join(_REPORT_KEYS)}", f"{', '.join(missing)} missing")
    environment = _mapping(obj["environment"], source, '"environment"')
    if not all(isinstance(v, str | None) for v in environment.values()):
        raise _bad(source, '"environment" values that are strings or null', repr(environment))
    raw = _list(obj["clauses"], source, '"clauses"')
    entries = [_mapping(c, source, f'"clauses"[{i}]') for i, c in enumerate(raw)]
    checks = _rebuild_checks(entries, source)
    clauses = tuple(_clause_from_json(e, i, checks, source) for i, e in enumerate(entries))
    selected = _list(obj["selected"], source, '"selected"')
    causes, remedies, applied = _causes_from_json(obj, source)
    report = Report(trainspec=_str(obj, "trainspec", source), target=_str(obj, "target", source),
                    environment={str(k): v for k, v in environment.items()}, clauses=clauses,
                    duration_s=_number(obj["duration_s"], source, '"duration_s"'),
                    selected=tuple(str(s) for s in selected), root_causes=causes,
                    remedies=remedies, applied_remedies=applied)
    if obj["conformant"] is not report.conformant:
        raise _bad(source, f'"conformant": {json.dumps(report.conformant)} (from the verdicts)',
                   json.dumps(obj["conformant"]))
    summary = _mapping(obj["summary"], source, '"summary"')
    if dict(summary) != dict(report.summary):
        raise _bad(source, f'"summary" to count the clauses\' verdicts: {dict(report.summary)}',
                   f"{dict(summary)}")
    return report


_Rebuilt = tuple[CheckOutcome, float, tuple[str, ...], tuple[CaseResult, ...]]


def _rebuild_checks(entries: list[Mapping[str, Any]], source: str) -> dict[str, _Rebuilt]:
    """Check name -> (outcome, duration, the clauses it appears under, cases)."""
    out: dict[str, _Rebuilt] = {}
    for i, entry in enumerate(entries):
        where = f'"clauses"[{i}].checks'
        for j, raw in enumerate(_list(entry.get("checks"), source, where)):
            c = _mapping(raw, source, f"{where}[{j}]")
            name = _str(c, "name", source)
            outcome = c.get("outcome")
            if outcome not in _OUTCOMES:
                raise _bad(source, f"{where}[{j}].outcome one of {', '.join(_OUTCOMES)}",
                           repr(outcome))
            duration = _number(c.get("duration_s"), source, f"{where}[{j}].duration_s")
            seen = out[name][2] if name in out else ()
            cases = tuple(_case_from_json(k, source, f"{where}[{j}].cases[{n}]")
                          for n, k in enumerate(_list(c.get("cases", []), source,
                                                      f"{where}[{j}].cases")))
            out[name] = (outcome, duration, (*seen, str(entry.get("id"))), cases)
    return out


def _clause_from_json(entry: Mapping[str, Any], index: int,
                      checks: Mapping[str, _Rebuilt],
                      source: str) -> ClauseResult:
    where = f'"clauses"[{index}]'
    level, verdict = entry.get("level"), entry.get("verdict")
    if level not in _LEVELS:
        raise _bad(source, f"{where}.level one of {', '.join(_LEVELS)}", repr(level))
    if verdict not in VERDICTS:
        raise _bad(source, f"{where}.verdict one of {', '.join(VERDICTS)}", repr(verdict))
    reason, framework_source, docs = (_optional_str(entry, key, where, source) for key in
                                      ("deviation_reason", "framework_source", "docs"))
    results = []
    for c in entry["checks"]:
        outcome, duration, clause_ids, cases = checks[c["name"]]
        results.append(CheckResult(name=c["name"], clauses=clause_ids, outcome=outcome,
                                   evidence="", duration_s=duration, cases=cases))
    return ClauseResult(id=_str(entry, "id", source), level=level, title=_str(entry, "title",
                        source), verdict=verdict, evidence=_str(entry, "evidence", source),
                        checks=tuple(results), deviation_reason=reason,
                        note=str(entry.get("note", "")), framework_source=framework_source,
                        docs=docs, cause=_optional_str(entry, "cause", where, source) or "")


def _optional_str(entry: Mapping[str, Any], key: str, where: str, source: str) -> str | None:
    """A field that may be absent (older reports lack the newer ones) or a string."""
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise _bad(source, f"{where}.{key} a string", repr(value))
    return value


def _bad(source: str, expected: str, actual: str) -> UsageError:
    return UsageError(f"{source}: not a trainspec report: expected {expected}, found {actual}. "
                      "Write it again with `trainspec check --report FILE.json`.")


def _mapping(value: object, source: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _bad(source, f"{what} to be a JSON object", type(value).__name__)
    return value


def _list(value: object, source: str, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise _bad(source, f"{what} to be a JSON array", type(value).__name__)
    return value


def _str(obj: Mapping[str, Any], key: str, source: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise _bad(source, f'"{key}" to be a string', repr(value))
    return value


def _number(value: object, source: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(source, f"{what} to be a number", repr(value))
    return float(value)
