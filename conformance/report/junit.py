"""The JUnit XML report: one testcase per clause, for CI test-result viewers.

A clause's failure text lists every case of its checks that do not pass (each failing case
with its evidence and detail, the cases passed, those not judged) and, when one cause is
behind several clauses, names it and them; the suite's properties list each such cause.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from trainspec.conformance.report.output import write_text
from trainspec.conformance.report.text import case_lines, cited
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.printable import printable
from trainspec.conformance.spec.results import CheckResult, ClauseResult, Report, shared_causes

__all__ = ["write_junit"]


def write_junit(report: Report, path: str | Path) -> None:
    """JUnit XML: one testsuite, one testcase per clause (CI test-result viewers read it)."""
    counts = report.summary
    failures = counts["fail"]
    errors = counts["error"] + counts["timeout"]
    skipped = counts["n/a"] + counts["deviation"]
    attrs = {"tests": str(len(report.clauses)), "failures": str(failures),
             "errors": str(errors), "skipped": str(skipped), "time": f"{report.duration_s:.3f}"}
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", {"name": printable(f"trainspec:{report.target}"),
                                              **attrs})
    props = ET.SubElement(suite, "properties")
    shown = [c for c in report.clauses if not report.selected or c.id in report.selected]
    groups = shared_causes(shown)
    for key, value in [("trainspec", report.trainspec), ("conformant", str(report.conformant)),
                       *sorted(report.environment.items()),
                       *((f"shared_cause.{i}", f"{', '.join(ids)}: {cause}")
                         for i, (cause, ids) in enumerate(groups, 1))]:
        ET.SubElement(props, "property", {"name": printable(key),
                                          "value": "" if value is None else printable(value)})
    behind = {c: (cause, ids) for cause, ids in groups for c in ids}
    for clause in report.clauses:
        _junit_case(suite, clause, behind.get(clause.id))
    ET.indent(root)
    text = ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
    write_text(path, text, "--junit")


def _junit_case(suite: ET.Element, clause: ClauseResult,
                shared: tuple[str, tuple[str, ...]] | None) -> None:
    family = registry.family_of(clause.id)
    case = ET.SubElement(suite, "testcase", {
        "classname": f"trainspec.{family}", "name": printable(f"{clause.id} {clause.title}"),
        "time": f"{sum(c.duration_s for c in clause.checks):.3f}"})
    # every text a trainer may have said is printable: XML forbids most control characters
    detail = printable("\n\n".join(_check_text(c) for c in clause.checks
                                    if c.outcome != "passed"))
    if shared is not None and detail:
        cause, ids = shared
        detail = f"one cause behind {len(ids)} clauses ({', '.join(ids)}): {cause}\n\n{detail}"
    evidence = printable(cited(clause))
    if clause.verdict == "fail":
        ET.SubElement(case, "failure", {"message": evidence, "type": "fail"}).text = \
            detail or evidence
    elif clause.verdict in ("error", "timeout"):
        ET.SubElement(case, "error", {"message": evidence,
                                      "type": clause.verdict}).text = detail or evidence
    elif clause.verdict == "n/a":
        ET.SubElement(case, "skipped", {"message": evidence})
    elif clause.verdict == "deviation":
        ET.SubElement(case, "skipped",
                      {"message": printable(f"deviation: {clause.deviation_reason}")})
        ET.SubElement(case, "system-out").text = f"observed: {evidence}"
    if clause.note:
        ET.SubElement(case, "system-out").text = printable(clause.note)


def _check_text(check: CheckResult) -> str:
    """A check that does not pass: its evidence and detail, or every case with each failing
    case's detail."""
    if not check.failing:
        return f"{check.name}: {check.outcome}: {check.evidence}" + (
            f"\n{check.detail}" if check.detail else "")
    lines = [f"{check.name}: {check.outcome}"]
    for line, case in zip(case_lines(check), [*check.failing], strict=False):
        lines.append(f"  {line}" + (f"\n{case.detail}" if case.detail else ""))
    lines += [f"  {line}" for line in case_lines(check)[len(check.failing):]]
    return "\n".join(lines)
