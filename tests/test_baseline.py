"""Baselines (``check --save-baseline`` / ``--baseline``): the order, the file, the exit status.

Hand-built reports for the rules; ``main([...])`` with the runner faked for the command line;
one real ``trainspec check`` end to end, in subprocesses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from trainspec.conformance import api
from trainspec.conformance.cli import main
from trainspec.conformance.report.baseline import (
    ORDER,
    Baseline,
    compare,
    from_json_baseline,
    read_baseline,
    write_baseline,
)
from trainspec.conformance.report.json_io import write_json
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import ClauseResult, Report, Verdict
from trainspec.errors import UsageError

REPO = Path(__file__).resolve().parents[1]


def report_of(verdicts: dict[str, Verdict] | None = None, *, target: str = "reference",
              selected: tuple[str, ...] = ()) -> Report:
    """Every clause of the registry; ``pass`` unless ``verdicts`` says otherwise."""
    chosen = verdicts or {}
    clauses = tuple(ClauseResult(id=c.id, level=c.level, title=c.title,
                                 verdict=chosen.get(c.id, "pass"), evidence=f"{c.id} evidence")
                    for c in registry.CLAUSES)
    return Report(trainspec="0.1.0", target=target, environment={"python": "3.11"},
                  clauses=clauses, duration_s=1.0, selected=selected)


def baseline_of(verdicts: dict[str, Verdict], target: str = "reference") -> Baseline:
    return Baseline(trainspec="0.1.0", target=target, verdicts=verdicts, source="b.json")


def fake_run(report: Report, calls: list[object]) -> Callable[..., Report]:
    """``api.run`` that records the plan's target and returns ``report``."""
    def run(plan: api.Plan, **kwargs: object) -> Report:
        calls.append(plan.target.label)
        return report

    return run


# ----------------------------------------------------------------------------------- order

def test_the_order_runs_from_pass_to_error() -> None:
    assert ORDER == ("pass", "deviation", "n/a", "fail", "timeout", "error")


@pytest.mark.parametrize(("before", "after"), [
    ("pass", "fail"), ("pass", "error"), ("pass", "timeout"), ("pass", "n/a"),
    ("pass", "deviation"), ("deviation", "fail"), ("n/a", "fail"), ("fail", "timeout"),
    ("fail", "error"), ("timeout", "error"),
])
def test_a_verdict_further_down_the_order_is_a_regression(before: Verdict, after: Verdict
                                                          ) -> None:
    result = compare(report_of({"RES-3": after}), baseline_of({"RES-3": before}))
    assert [(c.id, c.before, c.after) for c in result.regressed] == [("RES-3", before, after)]
    assert not result.better
    assert result.exit_status == 1


@pytest.mark.parametrize("before", ["error", "timeout"])
def test_an_error_or_timeout_that_becomes_a_fail_is_better_not_a_regression(
        before: Verdict) -> None:
    result = compare(report_of({"RES-3": "fail"}), baseline_of({"RES-3": before}))
    assert not result.regressed
    assert [(c.id, c.before, c.after) for c in result.better] == [("RES-3", before, "fail")]
    assert result.exit_status == 0


def test_a_clause_that_newly_passes_is_listed_so_the_baseline_can_be_tightened() -> None:
    result = compare(report_of({"LOOP-2": "fail"}),
                     baseline_of({"LOOP-1": "fail", "LOOP-2": "fail", "LOOP-3": "pass"}))
    assert [c.id for c in result.better] == ["LOOP-1"]
    assert result.unchanged == 2
    text = result.format()
    assert text.startswith("baseline b.json (trainspec 0.1.0, reference): 0 regressed, "
                           "1 better, ")
    assert re.search(r"^  better +LOOP-1 +fail -> pass$", text, re.MULTILINE)
    assert "--save-baseline b.json" in text
    assert "| LOOP-1 | fail | pass | better |" in result.to_markdown()


def test_clauses_missing_from_the_baseline_are_new_not_regressions() -> None:
    verdicts: dict[str, Verdict] = {c.id: "pass" for c in registry.CLAUSES[1:]}
    result = compare(report_of({"LOOP-1": "fail"}), baseline_of(verdicts))
    assert not result.regressed
    assert [(c.id, c.before, c.after) for c in result.new] == [("LOOP-1", None, "fail")]
    assert result.exit_status == 0
    assert re.search(r"^  new +LOOP-1 +\(not in the baseline\) -> fail$", result.format(),
                     re.MULTILINE)


def test_clauses_this_run_did_not_check_are_not_compared() -> None:
    loop = tuple(c.id for c in registry.clauses_of("LOOP"))
    everything: dict[str, Verdict] = {c.id: "pass" for c in registry.CLAUSES}
    result = compare(report_of(selected=loop), baseline_of(everything))
    assert (result.regressed, result.unchanged) == ((), len(loop))
    assert result.not_checked == len(registry.CLAUSES) - len(loop)


def test_comparing_with_a_baseline_of_another_target_is_refused() -> None:
    with pytest.raises(UsageError, match=r"saved for target 'reference', but this run checks "
                       r"'pkg:Trainer'.*--save-baseline b\.json"):
        compare(report_of(target="pkg:Trainer"), baseline_of({}))


# ------------------------------------------------------------------------------------ file

def test_a_saved_baseline_holds_version_target_and_the_checked_verdicts(tmp_path: Path) -> None:
    report = report_of({"LOOP-2": "fail"}, selected=("LOOP-1", "LOOP-2"))
    write_baseline(report, tmp_path / "sub" / "b.json")
    data = json.loads((tmp_path / "sub" / "b.json").read_text())
    assert data == {"trainspec": "0.1.0", "target": "reference",
                    "clauses": {"LOOP-1": "pass", "LOOP-2": "fail"}}
    back = read_baseline(tmp_path / "sub" / "b.json")
    assert (back.target, back.verdicts) == ("reference", {"LOOP-1": "pass", "LOOP-2": "fail"})


def test_a_report_file_serves_as_a_baseline(tmp_path: Path) -> None:
    write_json(report_of({"RES-3": "fail"}), tmp_path / "r.json")
    back = read_baseline(tmp_path / "r.json")
    assert len(back.verdicts) == len(registry.CLAUSES)
    assert back.verdicts["RES-3"] == "fail"


def test_a_missing_baseline_file_names_the_file_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--baseline .*absent\.json: no such file\. Expected "
                       r"a baseline .*save one first with `trainspec check \[TARGET\] "
                       r"--save-baseline .*absent\.json`"):
        read_baseline(tmp_path / "absent.json")


def test_a_baseline_that_is_not_json_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "b.json").write_text('{"trainspec": ')
    with pytest.raises(UsageError, match=r"b\.json: expected a JSON baseline, cannot read it"):
        read_baseline(tmp_path / "b.json")


@pytest.mark.parametrize(("data", "message"), [
    ([], r"expected a JSON object, found list"),
    ({"target": "reference", "clauses": {}}, r'expected "trainspec" to be a string'),
    ({"trainspec": "0.1.0", "target": "reference"}, r'expected "clauses" to be an object'),
    ({"trainspec": "0.1.0", "target": "reference", "clauses": {"RES-99": "pass"}},
     r"expected \"clauses\" keys to be clause IDs .* found 'RES-99'"),
    ({"trainspec": "0.1.0", "target": "reference", "clauses": {"RES-3": "passed"}},
     r"expected \"clauses\"\.RES-3 one of pass, fail"),
    ({"trainspec": "0.1.0", "target": "reference", "clauses": {"RES-3": "pass", "res-3": "pass"}},
     r"expected each clause once, found RES-3 twice"),
])
def test_a_malformed_baseline_names_what_was_expected_and_the_fix(data: object, message: str
                                                                  ) -> None:
    with pytest.raises(UsageError, match=message) as raised:
        from_json_baseline(data, source="b.json")
    assert str(raised.value).startswith("--baseline b.json: not a trainspec baseline: ")
    assert str(raised.value).endswith("Save it again with "
                                      "`trainspec check [TARGET] --save-baseline b.json`.")


# ---------------------------------------------------------------------------- command line

def test_with_a_baseline_check_exits_0_when_nothing_regressed_even_if_not_conformant(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setattr(api, "run", fake_run(report_of({"RES-3": "fail"}), []))
    write_baseline(report_of({"RES-3": "fail", "LOOP-1": "fail"}), tmp_path / "b.json")
    argv = ["check", "--baseline", str(tmp_path / "b.json"), "--markdown",
            str(tmp_path / "r.md")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    table, _, section = out.partition("conformant: no; 1.0 s\n")
    assert re.search(r"^RES-3 +MUST +fail", table, re.MULTILINE)
    assert section.startswith(f"baseline {tmp_path / 'b.json'} (trainspec 0.1.0, reference): "
                              "0 regressed, 1 better, 0 new, 41 unchanged")
    assert re.search(r"^  better +LOOP-1 +fail -> pass$", section, re.MULTILINE)
    markdown = (tmp_path / "r.md").read_text()
    assert "### Against the baseline " in markdown
    assert "| LOOP-1 | fail | pass | better |" in markdown


def test_with_a_baseline_check_exits_1_naming_the_clause_that_regressed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setattr(api, "run", fake_run(report_of({"PAT-5": "timeout"}), []))
    write_baseline(report_of(), tmp_path / "b.json")
    assert main(["check", "--baseline", str(tmp_path / "b.json")]) == 1
    assert re.search(r"^  regressed +PAT-5 +pass -> timeout$", capsys.readouterr().out,
                     re.MULTILINE)


def test_save_baseline_writes_the_file_and_keeps_the_conformance_exit_status(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setattr(api, "run", fake_run(report_of({"RES-3": "fail"}), []))
    assert main(["check", "--save-baseline", str(tmp_path / "b.json")]) == 1
    assert read_baseline(tmp_path / "b.json").verdicts["RES-3"] == "fail"
    assert "saved the verdicts of 42 clauses to" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["check"], r"absent\.json: no such file"),
    (["check", "--base-trainer", "pkg:Trainer"], r"saved for target 'reference', but this run "
     r"checks 'pkg:Trainer'"),
])
def test_a_bad_baseline_exits_2_before_any_check_runs(
        argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[object] = []
    monkeypatch.setattr(api, "run", fake_run(report_of(), calls))
    write_baseline(report_of(), tmp_path / "b.json")
    path = tmp_path / ("absent.json" if "no such file" in message else "b.json")
    assert main([*argv, "--baseline", str(path)]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert calls == []


@pytest.mark.slow
def test_a_trainer_that_regresses_fails_against_its_baseline_end_to_end(tmp_path: Path) -> None:
    """The model repo's workflow: save a baseline, change the trainer, check against it.

    The target is one ``MODULE:CLASS`` throughout (a baseline belongs to one target); the
    module first names the reference trainer, then a mutant that skips the last epoch.
    """
    module = tmp_path / "trainspec_e2e_trainer.py"
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO), env.get("PYTHONPATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    baseline = tmp_path / "b.json"

    def check(*extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "trainspec", "check", "--base-trainer",
                "trainspec_e2e_trainer:Trainer", "--clauses", "LOOP", "--world-size", "1",
                *extra]
        return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                              check=False, timeout=120)

    module.write_text("from trainspec.reference import BaseTrainer as Trainer\n")
    saved = check("--save-baseline", str(baseline))
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert set(json.loads(baseline.read_text())["clauses"].values()) == {"pass"}

    unchanged = check("--baseline", str(baseline))
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    assert "0 regressed, 0 better, 0 new, 4 unchanged" in unchanged.stdout

    module.write_text("from tests.mutants.loop import SkipsTheLastEpoch as Trainer\n")
    regressed = check("--baseline", str(baseline))
    assert regressed.returncode == 1, regressed.stdout + regressed.stderr
    assert re.search(r"^  regressed +LOOP-1 +pass -> fail$", regressed.stdout, re.MULTILINE)
    evidence = regressed.stdout.splitlines()[1]
    assert evidence.lstrip().startswith("LOOP-1: ")
    assert " (docs: docs/spec/loop.md#loop-1)" in evidence
