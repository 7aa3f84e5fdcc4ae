"""The report writers, on hand-built reports: JSON (a contract), JUnit, Markdown, the table."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from trainspec.conformance.report import json_io, junit
from trainspec.conformance.report import text as tables
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec import links
from trainspec.conformance.spec.results import (
    CheckOutcome,
    CheckResult,
    ClauseResult,
    Report,
    Verdict,
)
from trainspec.errors import UsageError

_OUTCOME: dict[Verdict, CheckOutcome] = {"pass": "passed", "fail": "failed",
                                          "deviation": "failed", "n/a": "n/a",
                                          "error": "error", "timeout": "timeout"}


def sample_report(verdicts: dict[str, Verdict] | None = None, *,
                  selected: tuple[str, ...] = ()) -> Report:
    """Every clause of the registry; ``pass`` unless ``verdicts`` says otherwise."""
    chosen = verdicts or {}
    shared = CheckResult(name="check_shared_by_two", clauses=("LOOP-1", "LOOP-2"),
                         outcome="passed", evidence="both fine", duration_s=0.5)
    results = []
    for clause in registry.CLAUSES:
        verdict = chosen.get(clause.id, "pass")
        evidence = f"{clause.id} evidence: expected 1, observed {verdict}"
        checks: tuple[CheckResult, ...] = (CheckResult(
            name=f"check_{clause.id.lower().replace('-', '_')}", clauses=(clause.id,),
            outcome=_OUTCOME[verdict], evidence=evidence, duration_s=0.25,
            detail="Traceback: the detail" if verdict in ("fail", "error") else ""),)
        if clause.id in shared.clauses:
            checks = (*checks, shared)
        results.append(ClauseResult(
            id=clause.id, level=clause.level, title=clause.title, verdict=verdict,
            evidence=evidence, checks=checks,
            deviation_reason="known gap (#12)" if verdict == "deviation" else None))
    return Report(trainspec="0.1.0", target="reference",
                  environment={"python": "3.11.7", "torch": "2.13.0", "framework": None},
                  clauses=tuple(results), duration_s=21.25, selected=selected)


MIXED: dict[str, Verdict] = {"RES-3": "fail", "PAT-1": "deviation", "DIST-1": "timeout",
                             "CKPT-1": "error", "FT-1": "n/a"}


def test_json_has_every_clause_and_exactly_the_contract_keys() -> None:
    data = json_io.to_json(sample_report(MIXED))
    assert list(data) == ["trainspec", "target", "environment", "conformant", "selected",
                          "clauses", "summary", "duration_s", "complete"]
    assert list(data)[-1] == "complete"
    assert data["complete"] is True
    assert [c["id"] for c in data["clauses"]] == [c.id for c in registry.CLAUSES]
    assert data["summary"] == {"pass": len(registry.CLAUSES) - 5, "fail": 1, "deviation": 1,
                               "n/a": 1, "error": 1, "timeout": 1}
    assert data["conformant"] is False
    res3 = next(c for c in data["clauses"] if c["id"] == "RES-3")
    assert set(res3) == {"id", "level", "title", "verdict", "evidence", "checks"}
    assert res3["checks"] == [{"name": "check_res_3", "outcome": "failed", "duration_s": 0.25}]
    pat1 = next(c for c in data["clauses"] if c["id"] == "PAT-1")
    assert pat1["deviation_reason"] == "known gap (#12)"


def test_json_file_round_trips_through_from_json(tmp_path: Path) -> None:
    original = sample_report(MIXED, selected=("RES-3", "LOOP-1"))
    path = tmp_path / "out" / "r.json"
    json_io.write_json(original, path)
    back = json_io.read_json(path)
    assert json_io.to_json(back) == json_io.to_json(original)
    assert back.clause("LOOP-1").checks[1].clauses == ("LOOP-1", "LOOP-2")
    assert back.selected == ("RES-3", "LOOP-1")


def test_a_truncated_report_is_rejected(tmp_path: Path) -> None:
    data = json_io.to_json(sample_report())
    del data["complete"]
    with pytest.raises(UsageError, match="cut short"):
        json_io.from_json(data)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(json_io.to_json(sample_report()))[:500])
    with pytest.raises(UsageError, match=r"r\.json: expected a JSON report"):
        json_io.read_json(path)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("clauses", {}, r'"clauses" to be a JSON array'),
    ("summary", {"pass": 1}, r'"summary" to count'),
    ("conformant", False, r'"conformant": true'),
    ("duration_s", "fast", r'"duration_s" to be a number'),
])
def test_a_malformed_report_names_the_bad_key(key: str, value: object, message: str) -> None:
    data = json_io.to_json(sample_report())
    data[key] = value
    with pytest.raises(UsageError, match=message):
        json_io.from_json(data, source="old.json")


def test_an_unknown_verdict_is_rejected() -> None:
    data = json_io.to_json(sample_report())
    data["clauses"][0]["verdict"] = "passed"
    with pytest.raises(UsageError, match=r'"clauses"\[0\]\.verdict one of pass, fail'):
        json_io.from_json(data)


def test_a_missing_report_file_says_how_to_write_one(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no such file.*--report"):
        json_io.read_json(tmp_path / "absent.json")


def test_junit_has_one_testcase_per_clause_and_matching_counts(tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    junit.write_junit(sample_report(MIXED), path)
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("name") == "trainspec:reference"
    cases = suite.findall("testcase")
    assert len(cases) == len(registry.CLAUSES) == int(suite.get("tests", "0"))
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("1", "2", "2")
    assert len(suite.findall("testcase/failure")) == 1
    assert len(suite.findall("testcase/error")) == 2
    assert len(suite.findall("testcase/skipped")) == 2
    by_name = {c.get("name", "").split()[0]: c for c in cases}
    res3 = by_name["RES-3"]
    assert res3.get("classname") == "trainspec.RES"
    failure = res3.find("failure")
    assert failure is not None
    assert failure.get("message") == "RES-3 evidence: expected 1, observed fail"
    assert "Traceback: the detail" in (failure.text or "")
    skipped = by_name["PAT-1"].find("skipped")
    assert skipped is not None
    assert skipped.get("message") == "deviation: known gap (#12)"
    assert by_name["LOOP-1"].find("failure") is None


def test_markdown_shows_evidence_for_non_pass_only(tmp_path: Path) -> None:
    report = sample_report(MIXED)
    text = tables.to_markdown(report)
    assert text.startswith("## trainspec 0.1.0: `reference` is **not conformant**")
    assert "### RES: Resume" in text
    assert "| RES-3 | MUST | **FAIL** |" in text
    assert "RES-3 evidence" in text
    assert "LOOP-1 evidence" not in text
    assert "declared deviation: known gap (#12)" in text
    path = tmp_path / "r.md"
    tables.write_markdown(report, path)
    assert path.read_text() == text


def test_markdown_lists_the_selected_clauses_and_counts_the_rest() -> None:
    report = sample_report(selected=("LOOP-1", "LOOP-2"))
    text = tables.to_markdown(report)
    assert "| LOOP-2 |" in text
    assert "| BEST-1 |" not in text
    assert f"{len(registry.CLAUSES) - 2} clauses not selected" in text


def test_step_summary_is_appended_when_github_sets_it(tmp_path: Path) -> None:
    assert tables.append_step_summary(sample_report(), None) is False
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    assert tables.append_step_summary(sample_report(), summary) is True
    assert summary.read_text().startswith("earlier step\n## trainspec")


def test_table_has_a_line_per_clause_and_evidence_under_non_pass_only() -> None:
    report = sample_report(MIXED)
    lines = tables.format_table(report, color=False).splitlines()
    assert lines[0].split() == ["LOOP-1", "MUST", "pass", *registry.get("LOOP-1").title.split()]
    assert "LOOP-1 evidence" not in "\n".join(lines)
    res3 = next(i for i, line in enumerate(lines) if line.startswith("RES-3 "))
    assert lines[res3 + 1].strip() == "RES-3 evidence: expected 1, observed fail"
    assert lines[res3 + 1].startswith("    ")
    n = len(registry.CLAUSES)
    assert lines[-1] == (f"{n} clauses: {n - 5} pass, 1 fail, 1 deviation, 1 n/a, 1 error, "
                         "1 timeout; conformant: no; 21.2 s")
    assert "\x1b[" not in "\n".join(lines)


def test_table_colors_only_when_asked() -> None:
    report = sample_report(MIXED)
    assert "\x1b[31;1mfail" in tables.format_table(report, color=True)


def test_a_deviation_that_passes_shows_its_note() -> None:
    report = sample_report()
    loop1 = replace(report.clause("LOOP-1"), deviation_reason="old",
                    note="declared as a deviation but passes: remove it")
    clauses = tuple(loop1 if c.id == "LOOP-1" else c for c in report.clauses)
    report = replace(report, clauses=clauses)
    assert "passes: remove it" in tables.format_table(report, color=False)
    assert json_io.to_json(report)["clauses"][0]["note"].endswith("remove it")


def test_a_docs_link_points_at_the_clause_anchor_and_the_base_can_be_overridden() -> None:
    assert links.docs_link("res-3") == "docs/spec/res.md#res-3"
    assert links.docs_link("res-3", None) == "docs/spec/res.md#res-3"
    assert links.docs_link("RES-3", "https://example.org/trainspec/spec/") == \
        "https://example.org/trainspec/spec/res.html#res-3"
    assert links.docs_link("PAT-5", "https://x.org/blob/main/spec/{family}.md#{anchor}") == \
        "https://x.org/blob/main/spec/pat.md#pat-5"


def test_every_non_pass_clause_links_its_docs_apart_from_its_evidence(tmp_path: Path) -> None:
    from trainspec.conformance.runner import judge_clauses

    results = [CheckResult(name="check_loop_1", clauses=("LOOP-1",), outcome="failed",
                           evidence="LOOP-1: trained [0, 1], expected [0, 1, 2]", duration_s=0.1),
               CheckResult(name="check_loop_3", clauses=("LOOP-3",), outcome="passed",
                           evidence="fine", duration_s=0.1)]
    selected = ("LOOP-1", "LOOP-2", "LOOP-3")  # LOOP-2: no result, n/a with one rank
    clauses = judge_clauses(results, selected, {}, world_size=1)
    report = Report(trainspec="0.1.0", target="reference", environment={}, clauses=clauses,
                    duration_s=1.0, selected=selected)
    evidence = "LOOP-1: trained [0, 1], expected [0, 1, 2]"
    loop1 = f"{evidence} (docs: docs/spec/loop.md#loop-1)"
    assert report.clause("LOOP-1").evidence == evidence
    assert report.clause("LOOP-1").docs == "docs/spec/loop.md#loop-1"
    assert report.clause("LOOP-2").verdict == "n/a"
    assert report.clause("LOOP-2").docs == "docs/spec/loop.md#loop-2"
    assert report.clause("LOOP-3").docs is None  # a pass gets no link
    assert report.clause("RES-3").docs is None  # neither does a clause not checked
    data = json_io.to_json(report)
    assert data["clauses"][0]["evidence"] == evidence
    assert data["clauses"][0]["docs"] == "docs/spec/loop.md#loop-1"
    assert "docs" not in data["clauses"][2]
    assert json_io.from_json(data).clause("LOOP-1").docs == "docs/spec/loop.md#loop-1"
    table = tables.format_table(report, color=False).splitlines()
    assert table[1] == f"{'':<6}    {loop1}"
    assert f"| {loop1} |" in tables.to_markdown(report)
    junit.write_junit(report, tmp_path / "r.xml")
    failure = ET.parse(tmp_path / "r.xml").getroot().find("testsuite/testcase/failure")
    assert failure is not None
    assert failure.get("message") == loop1


def test_the_docs_link_follows_the_plans_template() -> None:
    from trainspec.conformance.runner import judge_clauses

    failed = CheckResult(name="check_res_3", clauses=("RES-3",), outcome="failed",
                         evidence="RES-3: differs", duration_s=0.1)
    (res3,) = [c for c in judge_clauses([failed], ("RES-3",), {}, world_size=1,
                                        docs_url="https://example.org/spec") if c.id == "RES-3"]
    assert res3.docs == "https://example.org/spec/res.html#res-3"


def test_a_report_written_before_the_docs_and_source_fields_still_reads() -> None:
    data = json_io.to_json(sample_report(MIXED))
    for clause in data["clauses"]:
        clause.pop("docs", None)
        clause.pop("framework_source", None)
    report = json_io.from_json(data)
    assert all(c.docs is None and c.framework_source is None for c in report.clauses)


def test_details_show_each_non_passing_check_once_with_its_detail() -> None:
    failed = CheckResult(name="check_x", clauses=("RES-1", "RES-3"), outcome="failed",
                         evidence="RES-1: went wrong", duration_s=0.1,
                         detail="Traceback (most recent call last): boom")
    passed = CheckResult(name="check_y", clauses=("RES-1",), outcome="passed", evidence="ok",
                         duration_s=0.1)
    clauses = tuple(
        ClauseResult(id=cid, level="MUST", title=cid, verdict="fail", evidence="x",
                     checks=(failed, passed))
        for cid in ("RES-1", "RES-3"))
    report = Report(trainspec="0.1.0", target="t", environment={}, clauses=clauses,
                    duration_s=1.0)
    text = tables.format_details(report)
    assert text.count("check_x: failed") == 1
    assert "Traceback (most recent call last): boom" in text
    assert "check_y" not in text


def test_a_failing_clause_names_the_framework_source_its_adapter_points_at() -> None:
    from trainspec.conformance.runner import judge_clauses

    results = [CheckResult(name="check_nan_1", clauses=("NAN-1",), outcome="failed",
                           evidence="NAN-1: inf taken as an improvement", duration_s=0.1),
               CheckResult(name="check_nan_2", clauses=("NAN-2",), outcome="passed",
                           evidence="fine", duration_s=0.1)]
    sources = {"NAN-1": "pkg/callbacks.py, Checkpoint.better: inf > best",
               "NAN-2": "pkg/callbacks.py, Checkpoint.better"}
    clauses = {c.id: c for c in judge_clauses(results, ("NAN-1", "NAN-2"), {}, world_size=1,
                                              sources=sources)}
    assert clauses["NAN-1"].evidence == "NAN-1: inf taken as an improvement"
    assert clauses["NAN-1"].framework_source == "pkg/callbacks.py, Checkpoint.better: inf > best"
    assert tables.cited(clauses["NAN-1"]) == (
        "NAN-1: inf taken as an improvement (framework source: pkg/callbacks.py, "
        "Checkpoint.better: inf > best) (docs: docs/spec/nan.md#nan-1)")
    assert clauses["NAN-2"].framework_source is None  # a pass is not charged to any source
    report = Report(trainspec="0.1.0", target="t", environment={},
                    clauses=tuple(clauses.values()), duration_s=1.0)
    (entry,) = [c for c in json_io.to_json(report)["clauses"] if c["id"] == "NAN-1"]
    assert entry["framework_source"] == "pkg/callbacks.py, Checkpoint.better: inf > best"
    deviating = {c.id: c for c in judge_clauses(results, ("NAN-1",), {"NAN-1": "known"},
                                                world_size=1, sources=sources)}
    assert deviating["NAN-1"].verdict == "deviation"
    assert "(framework source: pkg/callbacks.py" in tables.cited(deviating["NAN-1"])


def test_evidence_and_tracebacks_read_the_same_on_any_machine(tmp_path: Path) -> None:
    import os
    import sysconfig

    import torch

    import trainspec
    from trainspec.conformance.checks.base import portable

    package = Path(trainspec.__file__).parent
    stdlib = Path(sysconfig.get_paths()["stdlib"]) / "pathlib.py"
    text = (f'File "{torch.__file__}", line 1\n'
            f'File "{stdlib}", line 2\n'
            f'File "{package / "conformance" / "worker.py"}", line 3\n'
            f"rank 1 wrote {tmp_path / 'runs' / '3-dist' / 'last.pt'}")
    assert portable(text, str(tmp_path)) == (
        'File "torch/__init__.py", line 1\n'
        'File "<python>/pathlib.py", line 2\n'
        f'File "trainspec{os.sep}conformance{os.sep}worker.py", line 3\n'
        "rank 1 wrote <trainspec-tmp>/runs/3-dist/last.pt")


# ------------------------------------------------------------------ hostile text in evidence

# what a trainer's exception or an adapter's environment may carry: colours (rich, loguru),
# NUL, a lone surrogate, XML's own markup, a cursor move, a C1 control, a megabyte-long line
HOSTILE = ("\x1b[31mloss is nan\x1b[0m NUL\x00 bell\x07 surrogate\ud800 ]]> </failure> "
           "&amp; \x1b[2J\x9b1m CR\r" + "x" * 100_000)


def hostile_report() -> Report:
    report = sample_report({"RES-3": "fail", "PAT-1": "deviation", "CKPT-1": "error"})
    clauses = []
    for c in report.clauses:
        if c.verdict == "pass":
            clauses.append(c)
            continue
        checks = tuple(replace(k, evidence=HOSTILE, detail=f"Traceback\n{HOSTILE}")
                       for k in c.checks)
        clauses.append(replace(c, evidence=HOSTILE, checks=checks, note=HOSTILE,
                               deviation_reason=HOSTILE if c.deviation_reason else None))
    return replace(report, clauses=tuple(clauses), target=f"evil{HOSTILE[:20]}",
                   environment={**report.environment, "framework": HOSTILE})


def assert_inert(text: str, max_line: int | None = 5_000) -> None:
    """No control character but newline and tab, no lone surrogate, no line past the cut
    (XML puts an element's fields on one line: those are measured one by one)."""
    bad = [ch for ch in text if (ord(ch) < 32 and ch not in "\n\t") or 0x7f <= ord(ch) <= 0x9f
           or 0xD800 <= ord(ch) <= 0xDFFF]
    assert not bad, sorted({hex(ord(ch)) for ch in bad})
    assert max_line is None or max(len(line) for line in text.splitlines()) < max_line


def test_junit_with_hostile_evidence_parses_and_keeps_the_words(tmp_path: Path) -> None:
    path = tmp_path / "j.xml"
    junit.write_junit(hostile_report(), path)
    root = ET.parse(path).getroot()  # well-formed XML, whatever the trainer said
    failure = root.find(".//failure")
    assert failure is not None
    message = failure.get("message", "")
    assert "loss is nan" in message
    assert "\\x00" in message
    assert "\\ud800" in message
    assert "]]> </failure>" in message  # markup is escaped, not stripped
    assert len(message) < 5_000  # a megabyte-long line is cut
    assert "characters cut" in message
    assert_inert(path.read_text(encoding="utf-8"), max_line=None)


@pytest.mark.parametrize("writer", ["json", "markdown", "table", "details"])
def test_every_writer_keeps_a_trainers_control_characters_inert(tmp_path: Path,
                                                                writer: str) -> None:
    report = hostile_report()
    if writer == "json":
        json_io.write_json(report, tmp_path / "r.json")
        text = (tmp_path / "r.json").read_text(encoding="utf-8")
        assert json_io.read_json(tmp_path / "r.json").clause("RES-3").evidence.startswith(
            "loss is nan NUL\\x00")
    elif writer == "markdown":
        tables.write_markdown(report, tmp_path / "r.md")
        text = (tmp_path / "r.md").read_text(encoding="utf-8")
    elif writer == "table":
        text = tables.format_table(report, color=False)
    else:
        text = tables.format_details(report)
    assert "loss is nan" in text
    assert "\x1b" not in text  # colours are stripped, not shown
    assert "\\x1b" not in text
    assert_inert(text)


def test_the_table_still_colours_its_verdicts_when_asked() -> None:
    text = tables.format_table(hostile_report(), color=True)
    assert "\x1b[31;1mfail" in text  # the suite's own colours, not the trainer's
    assert "\x1b[31mloss" not in text


def test_printable_escapes_what_it_does_not_strip() -> None:
    from trainspec.conformance.spec.printable import printable

    assert printable("\x1b[1;31mred\x1b[0m") == "red"
    assert printable("a\x00b\x7fc\ud800d\ufffe") == "a\\x00b\\x7fc\\ud800d\\ufffe"
    assert printable("one\r\ntwo\rthree\ttab") == "one\ntwo\\x0dthree\ttab"
    assert printable("\x1b]0;title\x07text") == "text"
    cut = printable("y" * 10_000 + "\nshort")
    assert cut.endswith("(6000 characters cut)\nshort")
