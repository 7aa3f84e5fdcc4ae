"""The human-readable reports: the terminal table, the Markdown report, the step summary.

Both list the selected clauses and count the others in one line. A clause's evidence line is
followed by the framework source its adapter points at and by its docs link
(:func:`cited`), which the report holds as fields of their own. The table keeps one line per
clause, its gravest failing case's evidence, and counts the others; the details (``-v``) and
the Markdown list every case of a clause that does not pass (:func:`case_lines`): each failing
case with its evidence, gravest first, then the cases passed and those not judged, with why.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from trainspec.conformance.report.output import write_text
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.printable import printable
from trainspec.conformance.spec.results import (
    CheckResult,
    ClauseResult,
    Report,
    Verdict,
    shared_causes,
)
from trainspec.errors import UsageError

if TYPE_CHECKING:
    from trainspec.conformance.report.baseline import Comparison

__all__ = [
    "append_step_summary",
    "case_lines",
    "cited",
    "format_causes",
    "format_details",
    "format_summary",
    "format_table",
    "to_markdown",
    "write_markdown",
]


def cited(clause: ClauseResult) -> str:
    """The evidence, then ``(framework source: ...)`` and ``(docs: ...)`` when the clause has
    them: the one line every text form shows."""
    text = clause.evidence
    if clause.framework_source:
        text = f"{text} (framework source: {clause.framework_source})"
    if clause.docs:
        text = f"{text} (docs: {clause.docs})"
    return text


_MARKERS: dict[Verdict, str] = {"pass": "pass", "fail": "**FAIL**", "deviation": "deviation",
                                "n/a": "n/a", "error": "**ERROR**", "timeout": "**TIMEOUT**"}


def to_markdown(report: Report, *, baseline: Comparison | None = None) -> str:
    """A header (target, verdict, counts) and one table of the selected clauses per family;
    then, with ``baseline``, what changed against it (``--baseline``)."""
    verdict = "conformant" if report.conformant else "**not conformant**"
    lines = [f"## trainspec {report.trainspec}: `{_cell(report.target)}` is {verdict}", "",
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
    causes = format_causes(report)
    if causes:
        lines += ["### One cause behind several clauses", "",
                  *(f"- {_cell(line)}" for line in causes), ""]
    cases = [(c, check) for c in shown if c.verdict != "pass" for check in c.checks
             if check.outcome not in ("passed", "n/a") and check.cases]
    if cases:
        lines += ["### The cases of the clauses that do not pass", ""]
        for clause, check in cases:
            lines.append(f"- {clause.id} `{check.name}`: {check.outcome}")
            lines += [f"  - {_cell(line)}" for line in case_lines(check)]
        lines.append("")
    if baseline is not None:
        lines += [baseline.to_markdown(), ""]
    return "\n".join(lines)


def write_markdown(report: Report, path: str | Path, *,
                   baseline: Comparison | None = None) -> None:
    write_text(path, to_markdown(report, baseline=baseline), "--markdown")


def append_step_summary(report: Report, target: str | Path | None, *,
                        baseline: Comparison | None = None) -> bool:
    """Append the Markdown to ``target`` (the CLI passes ``$GITHUB_STEP_SUMMARY``) when it
    is given; True when written."""
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
    return printable(text).replace("|", "\\|").replace("\n", " ")


# ------------------------------------------------------------------------------------ table

_COLORS: dict[Verdict, str] = {"pass": "32", "fail": "31;1", "deviation": "33", "n/a": "2",
                               "error": "35;1", "timeout": "35;1"}


def case_lines(check: CheckResult) -> list[str]:
    """A check's cases, one line each: every failing case with its severity and evidence
    (gravest first), then the cases passed, then those not judged, with why."""
    def named(name: str, text: str) -> str:
        return f"{name}: {text}" if name and text else name or text

    lines = [f"failed ({c.severity}): {named(c.name, c.evidence)}" for c in check.failing]
    passed = [c.name or "the check" for c in check.cases if c.outcome == "passed"]
    if passed:
        lines.append(f"passed: {'; '.join(passed)}")
    lines += [f"not judged: {named(c.name, c.evidence)}" for c in check.cases
              if c.outcome == "not judged"]
    return [printable(line) for line in lines]


def format_details(report: Report) -> str:
    """Every check behind a clause that is not ``pass``: its outcome, every case (each failing
    one with its evidence and detail: a traceback, the stacks of stuck ranks, a property
    check's reproducer), or its evidence and detail when it ended before judging any."""
    blocks: dict[str, str] = {}  # by check name: a check behind two clauses shows once
    for clause in report.clauses:
        if clause.verdict == "pass":
            continue
        for c in clause.checks:
            if c.outcome == "passed" or c.name in blocks:
                continue
            head = f"--- {', '.join(c.clauses)} {c.name}: {c.outcome}"
            if not c.failing:
                block = f"{head}\n{printable(c.evidence)}"
                blocks[c.name] = block + ("\n" + printable(c.detail.rstrip()) if c.detail
                                          else "")
                continue
            parts = [head]
            for case in c.failing:  # each failing case, then its detail, indented
                parts.append(case_lines(_only(c, case))[0])
                if case.detail:
                    parts.append(_indented(printable(case.detail.rstrip())))
            parts += case_lines(_without_failures(c))
            blocks[c.name] = "\n".join(parts)
    return "\n\n".join(blocks.values())


def _only(check: CheckResult, case: object) -> CheckResult:
    return replace(check, cases=tuple(c for c in check.cases if c is case))


def _without_failures(check: CheckResult) -> CheckResult:
    return replace(check, cases=tuple(c for c in check.cases if c.outcome != "failed"))


def _indented(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


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
        evidence = printable(_evidence(c))  # a trainer's colours and controls stay inert
        if evidence:
            lines.append(f"{'':<{width}}    {evidence}")
    hidden = len(report.clauses) - len(shown)
    if hidden:
        lines.append(f"({hidden} clauses not selected by --clauses: n/a)")
    causes = format_causes(report)
    if causes:
        lines += ["one cause behind several clauses:", *(f"  {printable(x)}" for x in causes)]
    lines.append(format_summary(report))
    return "\n".join(lines)


def format_causes(report: Report) -> list[str]:
    """One line per cause behind two or more of the selected clauses that do not pass:
    ``3 clauses (RES-1, RES-2, RES-3): the run raised: FileNotFoundError: ...``."""
    return [f"{len(ids)} clauses ({', '.join(ids)}): {cause}"
            for cause, ids in shared_causes(_shown(report))]


def format_summary(report: Report) -> str:
    """``42 clauses: 40 pass, 1 fail, 1 n/a; conformant: no; 21.3 s on 2 workers``."""
    counts = ", ".join(f"{n} {v}" for v, n in report.summary.items() if n)
    selected = len(_shown(report))
    total = len(report.clauses)
    head = f"{total} clauses" if selected == total else f"{total} clauses ({selected} selected)"
    conformant = "yes" if report.conformant else "no"
    remedies = (f"; remedies on (not the framework's defaults): "
                f"{', '.join(report.applied_remedies)}" if report.applied_remedies else "")
    workers = report.environment.get("workers")
    lanes = "" if workers is None else f" on {workers} worker{'' if workers == '1' else 's'}"
    return (f"{head}: {counts}; conformant: {conformant}; {report.duration_s:.1f} s{lanes}"
            f"{remedies}")


def _shown(report: Report) -> list[ClauseResult]:
    if not report.selected:
        return list(report.clauses)
    return [c for c in report.clauses if c.id in report.selected]


def _evidence(clause: ClauseResult) -> str:
    """The evidence line shown for a clause: none for a plain pass."""
    if clause.verdict == "deviation":
        return f"declared deviation: {clause.deviation_reason}; observed: {cited(clause)}"
    if clause.verdict == "pass":
        return clause.note
    more = sum(len(c.failing) for c in clause.checks if c.outcome == "failed") - 1
    if more > 0:  # the table shows the gravest; the details and the Markdown list them all
        return f"{cited(clause)} (and {more} more failing case{'s' if more > 1 else ''})"
    return cited(clause)
