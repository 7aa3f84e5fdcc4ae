"""The conformance matrix (``trainspec matrix``): its JSON, Markdown and HTML writers.

The writers run on hand-built reports: two checked targets and one not installed. One test
runs the real command end to end in a subprocess (slow: the full check on the reference).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from trainspec.conformance import matrix_run
from trainspec.conformance.cli import main
from trainspec.conformance.report import matrix as matrices
from trainspec.conformance.report import matrix_files, matrix_html
from trainspec.conformance.report.specdocs import read_matrix
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import VERDICTS, CheckResult, ClauseResult, Report, Verdict
from trainspec.conformance.targets import BUILTIN_TARGETS

EVIL = "<script>alert(\"x\")</script> & 'q' in /tmp/a<b>/last.pt"
SKIPPED = {"keras": "keras not installed: pip install 'trainspec[keras]'"}


def _report(target: str, verdicts: dict[str, Verdict], *, evidence: dict[str, str] | None = None,
            framework: str | None = None, selected: tuple[str, ...] = ()) -> Report:
    clauses = []
    for c in registry.CLAUSES:
        verdict = verdicts.get(c.id, "pass")
        text = (evidence or {}).get(c.id, f"{c.id} on {target}: observed {verdict}")
        check = CheckResult(name=f"check_{c.id.lower().replace('-', '_')}", clauses=(c.id,),
                            outcome="passed" if verdict == "pass" else "failed",
                            evidence=text, duration_s=0.25)
        clauses.append(ClauseResult(
            id=c.id, level=c.level, title=c.title, verdict=verdict, evidence=text,
            checks=(check,), deviation_reason="upstream bug" if verdict == "deviation" else None))
    return Report(trainspec="0.1.0", target=target,
                  environment={"python": "3.11.7", "torch": "2.13.0", "framework": framework},
                  clauses=tuple(clauses), duration_s=2.5, selected=selected)


def _matrix() -> matrices.ConformanceMatrix:
    reference = _report("reference", {"DIST-5": "n/a"})
    lightning = _report("lightning", {"RES-3": "fail", "BEST-1": "deviation",
                                      "PAT-2": "timeout", "NAN-1": "error"},
                        evidence={"RES-3": EVIL}, framework="lightning 2.4.0")
    return matrices.build([reference, lightning], SKIPPED)


class _Tags(HTMLParser):
    """Every start tag with its attributes, and whether every element closes in order."""

    VOID = frozenset({"meta", "br", "hr", "img", "link", "input"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.starts: list[tuple[str, dict[str, str | None]]] = []
        self.open: list[str] = []
        self.mismatched: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.starts.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.starts.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open.pop() != tag:
            self.mismatched.append(tag)


def _parse(page: str) -> _Tags:
    tags = _Tags()
    tags.feed(page)
    tags.close()
    return tags


# ------------------------------------------------------------------------------------ JSON

def test_matrix_json_reads_back_with_the_spec_pages_reader(tmp_path: Path) -> None:
    written = matrix_files.write(_matrix(), tmp_path)
    assert [p.name for p in written] == ["matrix.json", "matrix.md", "matrix.html"]
    read = read_matrix(tmp_path / "matrix.json")
    assert read is not None
    assert read.trainspec == "0.1.0"
    assert read.targets == ("reference", "lightning")
    assert dict(read.not_installed) == SKIPPED
    assert read.verdict("RES-3", "lightning") == "fail"
    assert read.verdict("DIST-5", "reference") == "n/a"
    assert read.verdict("LOOP-1", "reference") == "pass"


def test_matrix_json_keeps_its_shape_and_round_trips(tmp_path: Path) -> None:
    matrix_files.write(_matrix(), tmp_path)
    data = json.loads((tmp_path / "matrix.json").read_text(encoding="utf-8"))
    assert list(data) == ["trainspec", "targets", "not_installed", "remedy_runs", "complete"]
    again = matrices.from_json(data)
    assert again.targets == ("reference", "lightning")
    assert again.reports["lightning"].clause("RES-3").evidence == EVIL
    assert again.reports["lightning"].environment["framework"] == "lightning 2.4.0"
    assert matrices.to_markdown(again) == matrices.to_markdown(_matrix())


# -------------------------------------------------------------------------------- Markdown

def test_matrix_markdown_lists_every_clause_and_every_target() -> None:
    text = matrices.to_markdown(_matrix())
    for clause in registry.CLAUSES:
        assert re.search(rf"^\| {re.escape(clause.id)} ", text, re.MULTILINE), clause.id
    assert "| | reference | lightning |" in text
    assert "| framework | - | lightning 2.4.0 |" in text
    assert "| torch | 2.13.0 | 2.13.0 |" in text
    assert "| conformant | yes | no |" in text
    assert "| RES-3 Best tracking and patience survive a resume | MUST | pass | **fail** |" \
        in text
    assert "Not installed: keras (keras not installed: pip install 'trainspec[keras]')." in text
    evidence = text.split("### Evidence: lightning", 1)[1]
    assert re.search(r"^- \*\*RES-3\*\* fail: \S", evidence, re.MULTILINE)
    assert "### Evidence: reference" not in text  # every clause passes there


def test_matrix_markdown_shows_only_the_selected_clauses() -> None:
    chosen = tuple(c.id for c in registry.clauses_of("LOOP"))
    text = matrices.to_markdown(matrices.build([_report("reference", {}, selected=chosen)]))
    assert "| LOOP-1 " in text
    assert "| RES-3 " not in text
    assert f"{len(registry.CLAUSES) - len(chosen)} clauses not selected" in text
    assert f"| verdicts | {len(chosen)} pass |" in text


# ------------------------------------------------------------------------------------ HTML

def test_matrix_html_is_well_formed_xml_and_html() -> None:
    page = matrix_html.to_html(_matrix())
    ET.fromstring(page.split("\n", 1)[1])  # without the doctype: strict XML
    tags = _parse(page)
    assert tags.mismatched == []
    assert tags.open == []


def test_matrix_html_is_self_contained() -> None:
    page = matrix_html.to_html(_matrix())
    names = {tag for tag, _ in _parse(page).starts}
    assert names.isdisjoint({"script", "link", "img", "iframe", "object", "embed"})
    assert "http://" not in page
    assert "https://" not in page
    assert "url(" not in page
    assert "<style>" in page


def test_matrix_html_has_every_clause_row_and_every_target_column() -> None:
    tags = _parse(matrix_html.to_html(_matrix()))
    rows = [attrs["id"] for tag, attrs in tags.starts if tag == "tr" and attrs.get("id")]
    assert rows == [c.anchor for c in registry.CLAUSES]
    page = matrix_html.to_html(_matrix())
    for clause in registry.CLAUSES:
        assert f'<td class="id">{clause.id}</td>' in page
    assert '<th scope="col">reference</th><th scope="col">lightning</th></tr></thead>' in page
    assert page.count('<th scope="col">lightning</th>') == 2  # targets table, clause table
    assert 'class="family"' in page
    assert "LOOP: The epoch loop" in page


def test_matrix_html_escapes_the_evidence() -> None:
    page = matrix_html.to_html(_matrix())
    assert "script" not in {tag for tag, _ in _parse(page).starts}
    assert "<script" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "/tmp/a&lt;b&gt;/last.pt" in page


def test_matrix_html_cells_carry_the_verdict_color_and_the_evidence_on_hover() -> None:
    tags = _parse(matrix_html.to_html(_matrix()))
    cells = [attrs for tag, attrs in tags.starts if tag == "td" and "v" in
             (attrs.get("class") or "").split() and attrs.get("title") is not None]
    by_title = {attrs["title"]: attrs["class"] for attrs in cells}
    assert by_title[EVIL] == "v v-fail"
    assert by_title["PAT-2 on lightning: observed timeout"] == "v v-timeout"
    assert by_title["NAN-1 on lightning: observed error"] == "v v-error"
    assert by_title["DIST-5 on reference: observed n/a"] == "v v-na"
    assert by_title["declared deviation: upstream bug; observed: BEST-1 on lightning: "
                    "observed deviation"] == "v v-deviation"
    assert by_title["LOOP-1 on reference: observed pass"] == "v v-pass"


def test_matrix_html_opens_each_cell_for_its_checks() -> None:
    page = matrix_html.to_html(_matrix())
    assert "<details><summary>fail</summary>" in page
    assert "<code>check_res_3</code> failed, 0.25 s" in page


def test_matrix_html_names_the_environment_legend_version_and_skipped_targets() -> None:
    page = matrix_html.to_html(_matrix())
    assert "<title>trainspec 0.1.0 conformance matrix</title>" in page
    assert '<th scope="row">torch</th><td>2.13.0</td><td>2.13.0</td>' in page
    assert '<th scope="row">framework</th><td>-</td><td>lightning 2.4.0</td>' in page
    for verdict in VERDICTS:
        assert f'<tr><td class="v v-{verdict.replace("/", "")}">{verdict}</td><td>' \
            f"{matrices.VERDICT_MEANINGS[verdict]}</td></tr>" in page
    assert "<strong>keras</strong>: keras not installed: pip install &#x27;trainspec[keras]" \
        "&#x27;" in page


# ------------------------------------------------------------------------------ the command

def test_matrix_command_writes_three_files_and_one_line_per_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(matrix_run, "_check", lambda target, **_: _report(str(target), {}))
    assert main(["matrix", "--out", str(tmp_path / "m"), "--clauses", "LOOP"]) == 0
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        "matrix.html", "matrix.json", "matrix.md"]
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert re.match(r"reference: +42 clauses: 42 pass; conformant: yes", lines[0])
    n = len(BUILTIN_TARGETS)
    assert len(lines) == n + 1  # one line per built-in target and where the files went
    assert lines[-1] == "wrote " + ", ".join(str(tmp_path / "m" / name)
                                             for name in matrix_files.FILES)
    assert f"[1/{n}] reference: checking" in err
    assert f"[1/{n}] reference: done: 42 clauses" in err


def test_matrix_compare_lists_each_changed_verdict_and_exits_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    published = tmp_path / "published.json"
    published.write_text(json.dumps(matrices.to_json(_matrix())))
    now = {"reference": _report("reference", {"DIST-5": "n/a"}),
           "lightning": _report("lightning", {"RES-3": "pass", "BEST-1": "deviation",
                                              "PAT-2": "timeout", "NAN-1": "error"},
                                evidence={"RES-3": "resumed alike"})}
    monkeypatch.setattr(matrix_run, "_check", lambda target, **_: now[str(target)])
    monkeypatch.setattr(matrix_run, "missing_requirement",
                        lambda name, target: None if name in now else "absent here")
    code = main(["matrix", "--out", str(tmp_path / "m"), "--compare", str(published)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "changed: lightning RES-3: published fail, now pass: resumed alike" in out
    assert "1 difference(s) from" in out
    # the same verdicts: exit 0 and say so
    now["lightning"] = _matrix().reports["lightning"]
    assert main(["matrix", "--out", str(tmp_path / "m"), "--compare", str(published)]) == 0
    assert f"same verdicts as {published}" in capsys.readouterr().out


def test_matrix_compare_names_what_it_could_not_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "m.json"
    bad.write_text('{"targets": {}')
    assert main(["matrix", "--out", str(tmp_path / "m"), "--compare", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"--compare {bad}: cannot read it as JSON" in err
    assert not (tmp_path / "m").exists()  # refused before any check ran


def test_matrix_differences_name_targets_checked_on_one_side_only() -> None:
    published = _matrix()
    now = matrices.build([_report("reference", {"DIST-5": "n/a"})], {})
    assert matrices.differences(published, now) == [
        "lightning: in the published matrix, not checked now"]


def test_matrix_command_exits_2_when_no_target_can_be_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(matrix_run, "missing_requirement", lambda name, target: "absent here")
    assert main(["matrix", "--out", str(tmp_path / "m")]) == 2
    assert "no built-in target could be checked" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
def test_matrix_end_to_end_checks_the_reference_and_writes_the_files(tmp_path: Path) -> None:
    # one clause on one rank: the command's whole path in seconds, not the full check's 25 s
    # (LOOP-3: no generated runs, which take their budget on every framework)
    done = subprocess.run([sys.executable, "-m", "trainspec", "matrix", "--out", str(tmp_path),
                           "--clauses", "LOOP-3", "--world-size", "1"],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.match(r"reference: +42 clauses \(1 selected\): 1 pass, 41 n/a; conformant: yes",
                    done.stdout), done.stdout
    n = len(BUILTIN_TARGETS)
    assert f"[1/{n}] reference: checking" in done.stderr
    assert f"[1/{n}] reference: done:" in done.stderr
    read = read_matrix(tmp_path / "matrix.json")
    assert read is not None
    assert read.targets[0] == "reference"
    assert read.verdict("LOOP-3", "reference") == "pass"
    page = (tmp_path / "matrix.html").read_text(encoding="utf-8")
    ET.fromstring(page.split("\n", 1)[1])
    assert '<tr id="loop-3">' in page
    assert "| LOOP-3 num_epochs = 0 is an eval-only run | MUST | pass |" in (
        tmp_path / "matrix.md").read_text(encoding="utf-8")
