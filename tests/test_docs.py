"""The docs: the site builds without a warning, every clause has its anchor, the guides' commands
are real ones, the worked example passes as the guide says, and the spec pages show a published
matrix when there is one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from tests.guides.tiny_adapter import TinyAdapter
from trainspec.conformance import plugin
from trainspec.conformance.cli import _build_parser
from trainspec.conformance.report.json_io import to_json
from trainspec.conformance.report.specdocs import main as specdocs_main
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import ClauseResult, Report, Verdict

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
OUTLINE = DOCS / "spec-outline.md"
GUIDE = DOCS / "guides" / "five-minutes.md"
_OUTLINE_ROW = re.compile(r"^\|\s*([A-Z]+-\d+[a-z]?)\s*\|\s*(MUST|SHOULD)\s*\|")
_CODE_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_BUILD_TIMEOUT_S = 120
_CHECK_TIMEOUT_S = 300


def _docs_toolchain_missing() -> str | None:
    missing = [m for m in ("sphinx", "myst_parser", "furo") if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return (f"the docs toolchain is not installed ({', '.join(missing)} missing): "
            "pip install -e '.[docs]'")


@pytest.fixture(scope="module")
def built_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built once, warnings as errors, the way the tox ``docs`` env builds it."""
    reason = _docs_toolchain_missing()
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("html")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                           "html", "-d", str(out / ".doctrees"), str(DOCS), str(out)],
                          cwd=REPO, capture_output=True, text=True, check=False,
                          timeout=_BUILD_TIMEOUT_S)
    assert done.returncode == 0, f"sphinx -W failed:\n{done.stdout}\n{done.stderr}"
    return out


@pytest.mark.slow
def test_the_docs_build_without_a_warning(built_html: Path) -> None:
    for page in ("index", "api", "spec/index", "guides/five-minutes", "guides/adapter-contract",
                 "guides/ci",
                 "guides/reading-a-failure", "benchmarks"):
        assert (built_html / f"{page}.html").is_file(), page


@pytest.mark.slow
def test_the_api_page_documents_the_package_from_its_docstrings(built_html: Path) -> None:
    html = (built_html / "api.html").read_text(encoding="utf-8")
    for name in ("trainspec.reference.BaseTrainer", "trainspec.reference.TrainConfig",
                 "trainspec.check", "trainspec.conformance.run.adapter.Adapter",
                 "trainspec.conformance.run.adapter.RunContext", "module-trainspec.kit",
                 "trainspec.conformance.run.shapes.Recorder",
                 "trainspec.conformance.run.layout.FileLayout",
                 "trainspec.conformance.run.reading.read_checkpoint",
                 "trainspec.conformance.spec.results.Report"):
        assert f'id="{name}"' in html, name
    assert "Keep this validation" in html  # BaseTrainer.save_if_best's docstring


def _outline_ids() -> list[str]:
    ids = []
    for line in OUTLINE.read_text(encoding="utf-8").splitlines():
        match = _OUTLINE_ROW.match(line)
        if match:
            ids.append(match.group(1))
    return ids


@pytest.mark.slow
def test_every_clause_of_the_outline_has_its_anchor_on_its_family_page(
        built_html: Path) -> None:
    ids = _outline_ids()
    assert len(ids) >= 42
    missing = []
    for clause_id in ids:
        family = clause_id.split("-")[0].lower()
        html = (built_html / "spec" / f"{family}.html").read_text(encoding="utf-8")
        if f'id="{clause_id.lower()}"' not in html:
            missing.append(clause_id)
    assert not missing, f"no anchor in the built spec pages for {missing}"


# ------------------------------------------------------------------ the guides' commands

def _commands(text: str, program: str) -> Iterator[str]:
    """Command lines of ``program`` in the page's code blocks, continuation lines joined."""
    for match in _CODE_BLOCK.finditer(text):
        if match.group(1) not in ("bash", "yaml", "console", "shell"):
            continue
        joined = re.sub(r"\\\n\s*", "", match.group(2))
        for line in joined.splitlines():
            command = re.sub(r"^\s*(?:run:\s*)?", "", line)
            if command.startswith(f"{program} "):
                yield command


def _doc_pages() -> list[Path]:
    return [p for p in DOCS.rglob("*.md")
            if "_build" not in p.parts and p.name != "spec-outline.md"]


def test_every_trainspec_command_in_the_docs_is_a_valid_command_line() -> None:
    seen = 0
    for page in _doc_pages():
        for command in _commands(page.read_text(encoding="utf-8"), "trainspec"):
            argv = shlex.split(command, comments=True)[1:]
            try:
                _build_parser().parse_args(argv)
            except SystemExit:
                pytest.fail(f"{page.relative_to(REPO)}: not a valid command line: {command}")
            seen += 1
    assert seen >= 10


def test_every_pytest_option_in_the_docs_is_one_the_plugin_adds() -> None:
    options: set[str] = set()

    class Recorder:  # what the hook sees of pytest's parser: a group to add options to
        def getgroup(self, name: str, description: str = "") -> Recorder:
            return self

        def addoption(self, *names: str, **attrs: object) -> None:
            options.update(names)

    plugin.pytest_addoption(cast(pytest.Parser, Recorder()))
    used = {option for page in _doc_pages()
            for option in re.findall(r"--trainspec-[a-z-]+", page.read_text(encoding="utf-8"))}
    assert used
    assert {o for o in used if o not in options} == set()


# ---------------------------------------------------------------- the worked example runs

def _example_commands() -> list[str]:
    commands = [c for c in _commands(GUIDE.read_text(encoding="utf-8"), "trainspec")
                if "tests.guides.tiny_adapter:TinyAdapter" in c]
    assert len(commands) == 2, commands
    return commands


def _shown_output(guide: str) -> list[str]:
    """The output the guide shows for its first example command, duration left out."""
    block = next(m.group(2) for m in _CODE_BLOCK.finditer(guide)
                 if m.group(1) == "text" and m.group(2).startswith("LOOP-1 "))
    return _normalized(block)


def _normalized(output: str) -> list[str]:
    return [re.sub(r"; [\d.]+ s( on \d+ workers?)?$", "; N s", line.rstrip())
            for line in output.splitlines()]


@pytest.mark.slow
def test_the_guides_example_adapter_passes_what_it_declares_and_is_na_for_the_rest(
        tmp_path: Path) -> None:
    first, gate = _example_commands()
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    runs = {}
    for name, command in (("first", first), ("gate", gate)):
        argv = [sys.executable, "-m", *shlex.split(command), "--report",
                str(tmp_path / f"{name}.json")]
        runs[name] = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
    outputs = {}
    for name, proc in runs.items():
        try:
            out, err = proc.communicate(timeout=_CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for p in runs.values():
                p.kill()
            raise
        outputs[name] = (proc.returncode, out, err)

    code, out, err = outputs["first"]
    report = json.loads((tmp_path / "first.json").read_text(encoding="utf-8"))
    declared = TinyAdapter().capabilities()
    from trainspec.conformance.checks import CHECKS

    for clause in report["clauses"]:
        if clause["id"] not in report["selected"]:
            continue
        needs = [spec.requires - declared for spec in CHECKS.values()
                 if clause["id"] in spec.clauses]
        if all(needs):  # every check of the clause needs an undeclared capability
            assert clause["verdict"] == "n/a", clause
            assert "does not declare" in clause["evidence"], clause
        else:
            assert clause["verdict"] == "pass", clause
    assert {c["verdict"] for c in report["clauses"]
            if c["id"] in report["selected"]} == {"pass", "n/a"}
    assert (code, report["conformant"]) == (1, False), out + err
    assert _normalized(out) == _shown_output(GUIDE.read_text(encoding="utf-8")), \
        "the guide shows another output than the command prints: update five-minutes.md"

    code, out, err = outputs["gate"]
    assert code == 0, out + err
    gated = json.loads((tmp_path / "gate.json").read_text(encoding="utf-8"))
    assert gated["conformant"] is True


# ------------------------------------------------------- the spec pages and the matrix

def _report(target: str, verdicts: dict[str, Verdict]) -> Report:
    clauses = tuple(ClauseResult(id=c.id, level=c.level, title=c.title,
                                 verdict=verdicts.get(c.id, "pass"), evidence="observed")
                    for c in registry.CLAUSES)
    return Report(trainspec="0.1.0", target=target, environment={"python": "3.11"},
                  clauses=clauses, duration_s=1.0)


def _write_matrix(path: Path, reports: dict[str, Report], not_installed: dict[str, str]
                  ) -> None:
    # the shape `trainspec matrix` writes
    data = {"trainspec": "0.1.0", "targets": {n: to_json(r) for n, r in reports.items()},
            "not_installed": not_installed, "complete": True}
    path.write_text(json.dumps(data), encoding="utf-8")


def test_without_a_published_matrix_the_spec_pages_name_no_framework(tmp_path: Path) -> None:
    assert specdocs_main([str(tmp_path / "spec")]) == 0
    for page in (tmp_path / "spec").glob("*.md"):
        assert "Frameworks" not in page.read_text(encoding="utf-8"), page.name


def test_a_published_matrix_shows_each_frameworks_verdict_under_each_clause(
        tmp_path: Path) -> None:
    _write_matrix(tmp_path / "matrix.json",
                  {"lightning": _report("lightning", {"RES-3": "fail"}),
                   "hf": _report("hf", {"RES-3": "deviation", "DIST-1": "n/a"})},
                  {"keras": "adapter module trainspec.adapters.keras not found"})
    assert specdocs_main([str(tmp_path / "spec")]) == 0
    res = (tmp_path / "spec" / "res.md").read_text(encoding="utf-8")
    section = res.split("(res-3)=")[1].split("(res-4)=")[0]
    assert "**Frameworks** (trainspec 0.1.0 matrix): lightning **fail**, hf deviation" in section
    index = (tmp_path / "spec" / "index.md").read_text(encoding="utf-8")
    assert "| ID | Level | Clause | lightning | hf |" in index
    assert "| [DIST-1](#dist-1) | MUST " in index
    assert re.search(r"\| \[DIST-1\]\(#dist-1\) .* \| pass \| n/a \|$", index, re.MULTILINE)
    assert "Not checked: keras (adapter module trainspec.adapters.keras not found)." in index


def test_a_matrix_cut_short_is_an_error_that_names_the_file_and_the_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_matrix(tmp_path / "matrix.json", {"lightning": _report("lightning", {})}, {})
    whole = (tmp_path / "matrix.json").read_text(encoding="utf-8")
    (tmp_path / "matrix.json").write_text(whole[: len(whole) // 2], encoding="utf-8")
    assert specdocs_main([str(tmp_path / "spec")]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "matrix.json") in err
    assert "trainspec matrix --out docs" in err
    assert not (tmp_path / "spec").exists()


def test_a_matrix_named_on_the_command_line_must_exist(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert specdocs_main([str(tmp_path / "spec"), "--matrix", str(tmp_path / "m.json")]) == 2
    assert "no such file" in capsys.readouterr().err
