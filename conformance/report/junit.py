"""The JUnit XML report: one testcase per clause, for CI test-result viewers."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from trainspec.conformance.report.output import write_text
from trainspec.conformance.report.text import cited
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.printable import printable
from trainspec.conformance.spec.results import ClauseResult, Report

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
    for key, value in [("trainspec", report.trainspec), ("conformant", str(report.conformant)),
                       *sorted(report.environment.items())]:
        ET.SubElement(props, "property", {"name": printable(key),
                                          "value": "" if value is None else printable(value)})
    for clause in report.clauses:
        _junit_case(suite, clause)
    ET.indent(root)
    text = ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
    write_text(path, text, "--junit")


def _junit_case(suite: ET.Element, clause: ClauseResult) -> None:
    family = registry.family_of(clause.id)
    case = ET.SubElement(suite, "testcase", {
        "classname": f"trainspec.{family}", "name": printable(f"{clause.id} {clause.title}"),
        "time": f"{sum(c.duration_s for c in clause.checks):.3f}"})
    # every text a trainer may have said is printable: XML forbids most control characters
    detail = printable("\n\n".join(
        f"{c.name}: {c.outcome}: {c.evidence}" + (f"\n{c.detail}" if c.detail else "")
        for c in clause.checks if c.outcome != "passed"))
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
