"""Report writers: JSON (a contract, design.md), JUnit XML, Markdown, and the terminal table.

The JSON starts with ``"trainspec"`` (the header) and ends with ``"complete": true`` (the
footer), so a report cut short by a killed job is detected on reading (:func:`from_json`). The
JSON, JUnit and Markdown forms hold every clause; the terminal table and the Markdown list the
selected clauses and count the others in one line.

Every non-pass clause's evidence ends with a link to the clause in the spec pages,
``(docs: docs/spec/res.md#res-3)``: :func:`docs_link` builds it from :data:`DOCS_URL`, which the
environment variable ``TRAINSPEC_DOCS_URL`` overrides (the runner appends it when it judges a
clause, so the table, the Markdown, the JUnit message and the JSON all carry it).
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import (
    VERDICTS,
    CheckOutcome,
    CheckResult,
    ClauseResult,
    Level,
    Report,
    Verdict,
)
from trainspec.errors import UsageError

if TYPE_CHECKING:
    from trainspec.conformance.report.baseline import Comparison

__all__ = [
    "DOCS_URL",
    "DOCS_URL_ENV",
    "append_step_summary",
    "docs_link",
    "format_summary",
    "format_table",
    "from_json",
    "read_json",
    "to_json",
    "to_markdown",
    "write_json",
    "write_junit",
    "write_markdown",
]

# Where a clause is documented: ``{family}`` (lower case, the page) and ``{anchor}`` (the
# clause's lower-case ID) are filled in. The project has no public URL yet, so the default is
# the spec pages' path in the trainspec repository.
DOCS_URL = "docs/spec/{family}.md#{anchor}"
# Overrides DOCS_URL: a template with {family} and {anchor}, or the base URL of the built site,
# e.g. https://example.org/trainspec/spec, which gives .../spec/res.html#res-3.
DOCS_URL_ENV = "TRAINSPEC_DOCS_URL"

_OUTCOMES: tuple[CheckOutcome, ...] = get_args(CheckOutcome)
_LEVELS: tuple[Level, ...] = get_args(Level)
_REPORT_KEYS = ("trainspec", "target", "environment", "conformant", "selected", "clauses",
                "summary", "duration_s", "complete")


# ------------------------------------------------------------------------------------- docs

def docs_link(clause_id: str) -> str:
    """Where a clause is documented, e.g. ``docs/spec/res.md#res-3`` (see :data:`DOCS_URL`)."""
    template = os.environ.get(DOCS_URL_ENV, "").strip() or DOCS_URL
    if "{anchor}" not in template:  # a base URL: the pages of the built (HTML) site under it
        template = template.rstrip("/") + "/{family}.html#{anchor}"
    clause = registry.get(clause_id)
    return template.replace("{family}", clause.family.lower()).replace("{anchor}", clause.anchor)


# ------------------------------------------------------------------------------------- JSON

def to_json(report: Report) -> dict[str, Any]:
    """The report as design.md's JSON object; ``"complete": true`` is the last key."""
    return {
        "trainspec": report.trainspec,
        "target": report.target,
        "environment": dict(report.environment),
        "conformant": report.conformant,
        "selected": list(report.selected),
        "clauses": [_clause_json(c) for c in report.clauses],
        "summary": dict(report.summary),
        "duration_s": report.duration_s,
        "complete": True,
    }


def _clause_json(clause: ClauseResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": clause.id, "level": clause.level, "title": clause.title,
        "verdict": clause.verdict, "evidence": clause.evidence,
        "checks": [{"name": c.name, "outcome": c.outcome, "duration_s": c.duration_s}
                   for c in clause.checks],
    }
    if clause.deviation_reason is not None:
        out["deviation_reason"] = clause.deviation_reason
    if clause.note:
        out["note"] = clause.note
    return out


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

    Check results keep their name, outcome and duration (the JSON carries no more); a check
    that verifies several clauses comes back as one result naming all of them.

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
    report = Report(trainspec=_str(obj, "trainspec", source), target=_str(obj, "target", source),
                    environment={str(k): v for k, v in environment.items()}, clauses=clauses,
                    duration_s=_number(obj["duration_s"], source, '"duration_s"'),
                    selected=tuple(str(s) for s in selected))
    if obj["conformant"] is not report.conformant:
        raise _bad(source, f'"conformant": {json.dumps(report.conformant)} (from the verdicts)',
                   json.dumps(obj["conformant"]))
    summary = _mapping(obj["summary"], source, '"summary"')
    if dict(summary) != dict(report.summary):
        raise _bad(source, f'"summary" to count the clauses\' verdicts: {dict(report.summary)}',
                   f"{dict(summary)}")
    return report


def _rebuild_checks(entries: list[Mapping[str, Any]],
                    source: str) -> dict[str, tuple[CheckOutcome, float, tuple[str, ...]]]:
    """Check name -> (outcome, duration, the clauses it appears under)."""
    out: dict[str, tuple[CheckOutcome, float, tuple[str, ...]]] = {}
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
            seen = out.get(name, (outcome, duration, ()))[2]
            out[name] = (outcome, duration, (*seen, str(entry.get("id"))))
    return out


def _clause_from_json(entry: Mapping[str, Any], index: int,
                      checks: Mapping[str, tuple[CheckOutcome, float, tuple[str, ...]]],
                      source: str) -> ClauseResult:
    where = f'"clauses"[{index}]'
    level, verdict = entry.get("level"), entry.get("verdict")
    if level not in _LEVELS:
        raise _bad(source, f"{where}.level one of {', '.join(_LEVELS)}", repr(level))
    if verdict not in VERDICTS:
        raise _bad(source, f"{where}.verdict one of {', '.join(VERDICTS)}", repr(verdict))
    reason = entry.get("deviation_reason")
    if reason is not None and not isinstance(reason, str):
        raise _bad(source, f"{where}.deviation_reason a string", repr(reason))
    results = []
    for c in entry["checks"]:
        outcome, duration, clause_ids = checks[c["name"]]
        results.append(CheckResult(name=c["name"], clauses=clause_ids, outcome=outcome,
                                   evidence="", duration_s=duration))
    return ClauseResult(id=_str(entry, "id", source), level=level, title=_str(entry, "title",
                        source), verdict=verdict, evidence=_str(entry, "evidence", source),
                        checks=tuple(results), deviation_reason=reason,
                        note=str(entry.get("note", "")))


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


# ------------------------------------------------------------------------------------ JUnit

def write_junit(report: Report, path: str | Path) -> None:
    """JUnit XML: one testsuite, one testcase per clause (CI test-result viewers read it)."""
    counts = report.summary
    failures = counts["fail"]
    errors = counts["error"] + counts["timeout"]
    skipped = counts["n/a"] + counts["deviation"]
    attrs = {"tests": str(len(report.clauses)), "failures": str(failures),
             "errors": str(errors), "skipped": str(skipped), "time": f"{report.duration_s:.3f}"}
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", {"name": f"trainspec:{report.target}", **attrs})
    props = ET.SubElement(suite, "properties")
    for key, value in [("trainspec", report.trainspec), ("conformant", str(report.conformant)),
                       *sorted(report.environment.items())]:
        ET.SubElement(props, "property", {"name": key, "value": "" if value is None else value})
    for clause in report.clauses:
        _junit_case(suite, clause)
    ET.indent(root)
    text = ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
    write_text(path, text, "--junit")


def _junit_case(suite: ET.Element, clause: ClauseResult) -> None:
    family = registry.family_of(clause.id)
    case = ET.SubElement(suite, "testcase", {
        "classname": f"trainspec.{family}", "name": f"{clause.id} {clause.title}",
        "time": f"{sum(c.duration_s for c in clause.checks):.3f}"})
    detail = "\n\n".join(f"{c.name}: {c.outcome}: {c.evidence}" + (f"\n{c.detail}" if c.detail
                                                                    else "")
                         for c in clause.checks if c.outcome != "passed")
    if clause.verdict == "fail":
        ET.SubElement(case, "failure", {"message": clause.evidence, "type": "fail"}).text = \
            detail or clause.evidence
    elif clause.verdict in ("error", "timeout"):
        ET.SubElement(case, "error", {"message": clause.evidence,
                                      "type": clause.verdict}).text = detail or clause.evidence
    elif clause.verdict == "n/a":
        ET.SubElement(case, "skipped", {"message": clause.evidence})
    elif clause.verdict == "deviation":
        ET.SubElement(case, "skipped", {"message": f"deviation: {clause.deviation_reason}"})
        ET.SubElement(case, "system-out").text = f"observed: {clause.evidence}"
    if clause.note:
        ET.SubElement(case, "system-out").text = clause.note


# --------------------------------------------------------------------------------- Markdown

_MARKERS: dict[Verdict, str] = {"pass": "pass", "fail": "**FAIL**", "deviation": "deviation",
                                "n/a": "n/a", "error": "**ERROR**", "timeout": "**TIMEOUT**"}


def to_markdown(report: Report, *, baseline: Comparison | None = None) -> str:
    """A header (target, verdict, counts) and one table of the selected clauses per family;
    then, with ``baseline``, what changed against it (``--baseline``)."""
    verdict = "conformant" if report.conformant else "**not conformant**"
    lines = [f"## trainspec {report.trainspec}: `{report.target}` is {verdict}", "",
             format_summary(report), ""]
    shown = _shown(report)
    for family in registry.FAMILIES:
        rows = [c for c in shown if registry.family_of(c.id) == family]
        if not rows:
            continue
        lines += [f"### {family}: {registry.FAMILY_TITLES[family]}", "",
                  "| ID | Level | Verdict | Clause | Evidence |",
                  "|----|-------|---------|--------|----------|"]
        lines += [f"| {c.id} | {c.level} | {_MARKERS[c.verdict]} | {_cell(c.title)} | "
                  f"{_cell(_evidence(c))} |" for c in rows]
        lines.append("")
    hidden = len(report.clauses) - len(shown)
    if hidden:
        lines += [f"{hidden} clauses not selected (`--clauses`): n/a.", ""]
    if baseline is not None:
        lines += [baseline.to_markdown(), ""]
    return "\n".join(lines)


def write_markdown(report: Report, path: str | Path, *,
                   baseline: Comparison | None = None) -> None:
    write_text(path, to_markdown(report, baseline=baseline), "--markdown")


def append_step_summary(report: Report, *, baseline: Comparison | None = None) -> bool:
    """Append the Markdown to ``$GITHUB_STEP_SUMMARY`` when set; True when written."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return False
    try:
        with open(target, "a", encoding="utf-8") as out:
            out.write(to_markdown(report, baseline=baseline) + "\n")
    except OSError as e:
        raise UsageError(f"GITHUB_STEP_SUMMARY={target}: cannot append the report ({e}). "
                         "Unset the variable or point it at a writable file.") from None
    return True


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# ------------------------------------------------------------------------------------ table

_COLORS: dict[Verdict, str] = {"pass": "32", "fail": "31;1", "deviation": "33", "n/a": "2",
                               "error": "35;1", "timeout": "35;1"}


def format_details(report: Report) -> str:
    """Every check behind a clause that is not ``pass``: its outcome, evidence and detail (a
    traceback, the stacks of stuck ranks, a property check's reproducer)."""
    blocks: dict[str, str] = {}  # by check name: a check behind two clauses shows once
    for clause in report.clauses:
        if clause.verdict == "pass":
            continue
        for c in clause.checks:
            if c.outcome == "passed" or c.name in blocks:
                continue
            block = f"--- {', '.join(c.clauses)} {c.name}: {c.outcome}\n{c.evidence}"
            blocks[c.name] = block + ("\n" + c.detail.rstrip() if c.detail else "")
    return "\n\n".join(blocks.values())


def format_table(report: Report, *, color: bool) -> str:
    """The terminal table: ``ID  LEVEL  verdict  title``, evidence under every non-pass."""
    shown = _shown(report)
    width = max((len(c.id) for c in shown), default=0)
    lines = []
    for c in shown:
        verdict = f"{c.verdict:<9}"
        if color:
            verdict = f"\x1b[{_COLORS[c.verdict]}m{verdict}\x1b[0m"
        lines.append(f"{c.id:<{width}}  {c.level:<6}  {verdict}  {c.title}")
        evidence = _evidence(c)
        if evidence:
            lines.append(f"{'':<{width}}    {evidence}")
    hidden = len(report.clauses) - len(shown)
    if hidden:
        lines.append(f"({hidden} clauses not selected by --clauses: n/a)")
    lines.append(format_summary(report))
    return "\n".join(lines)


def format_summary(report: Report) -> str:
    """``42 clauses: 40 pass, 1 fail, 1 n/a; conformant: no; 21.3 s``."""
    counts = ", ".join(f"{n} {v}" for v, n in report.summary.items() if n)
    selected = len(_shown(report))
    total = len(report.clauses)
    head = f"{total} clauses" if selected == total else f"{total} clauses ({selected} selected)"
    conformant = "yes" if report.conformant else "no"
    return f"{head}: {counts}; conformant: {conformant}; {report.duration_s:.1f} s"


def _shown(report: Report) -> list[ClauseResult]:
    if not report.selected:
        return list(report.clauses)
    return [c for c in report.clauses if c.id in report.selected]


def _evidence(clause: ClauseResult) -> str:
    """The evidence line shown for a clause: none for a plain pass."""
    if clause.verdict == "deviation":
        return f"declared deviation: {clause.deviation_reason}; observed: {clause.evidence}"
    if clause.verdict == "pass":
        return clause.note
    return clause.evidence


def write_text(path: str | Path, text: str, option: str, what: str = "report") -> None:
    """Write one output file of the CLI; a path that cannot be written is a usage error."""
    where = Path(path)
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"{option} {where}: cannot write the {what} ({e}). "
                         "Give a path in a writable folder.") from None
