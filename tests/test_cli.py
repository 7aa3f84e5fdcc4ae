"""The command line: subcommands, exit statuses and messages (a contract, design.md).

``main([...])`` runs in-process with the runner faked where a real run adds nothing; one test
runs the real ``trainspec check`` end to end in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from trainspec.conformance import api, lanes, matrix_run
from trainspec.conformance import plan as plan_module
from trainspec.conformance.cli import main
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import CheckResult, ClauseResult, Report, Verdict


def fake_report(failing: str | None = None, target: str = "reference") -> Report:
    """Every clause passes, except ``failing``."""
    out = []
    for clause in registry.CLAUSES:
        verdict: Verdict = "fail" if clause.id == failing else "pass"
        out.append(ClauseResult(id=clause.id, level=clause.level, title=clause.title,
                                verdict=verdict, evidence=f"{clause.id}: observed {verdict}"))
    return Report(trainspec="0.1.0", target=target, environment={"python": "3.11"},
                  clauses=tuple(out), duration_s=1.0)


def fake_run(report: Report | BaseException, calls: list[api.Plan]) -> Callable[..., Report]:
    """``api.run`` that records the plan, reports one check's progress, returns ``report``."""
    def run(plan: api.Plan, **kwargs: object) -> Report:
        calls.append(plan)
        if isinstance(report, BaseException):
            raise report
        on_result = kwargs.get("on_result")
        if callable(on_result):
            on_result(CheckResult(name="check_fake_thing", clauses=("LOOP-1",),
                                  outcome="passed", evidence="fine", duration_s=0.125))
        return report

    return run


def fake_check(report: Report | BaseException, calls: list[dict[str, object]]
               ) -> Callable[..., Report]:
    def check(target: str | None = None, **kwargs: object) -> Report:
        calls.append({"target": target, **kwargs})
        if isinstance(report, BaseException):
            raise report
        on_result = kwargs.get("on_result")
        if callable(on_result):
            on_result(CheckResult(name="check_fake_thing", clauses=("LOOP-1",),
                                  outcome="passed", evidence="fine", duration_s=0.125))
        return report

    return check


def test_list_prints_every_clause_with_level_and_title(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(registry.CLAUSES)
    first = registry.CLAUSES[0]
    assert lines[0].split(maxsplit=2) == [first.id, first.level, first.title]


def test_explain_shows_text_rationale_and_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "loop-1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("LOOP-1 (MUST): Each epoch trains once, in order")
    for label in ("Text:", "Rationale:", "Observable:", "Checks:"):
        assert label in out
    assert "check_loop_trains_each_epoch_once_in_order: " in out


def test_explain_an_unknown_clause_is_a_usage_error(capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    assert main(["explain", "RES-99"]) == 2
    assert capsys.readouterr().err.startswith("trainspec: error: unknown clause 'RES-99'")


@pytest.mark.parametrize(("argv", "message"), [
    ([], "required: COMMAND"),
    (["check", "--world-size", "0"], "--world-size: expected 1 or more, got 0"),
    (["check", "--timeout", "soon"], "--timeout: expected a number of seconds"),
    (["check", "--backend", "mpi"], "--backend: invalid choice"),
    (["check", "--clauses", "LOOP,XYZ"], "unknown clause or family 'XYZ'"),
    (["check", "nosuchframework"], "target 'nosuchframework': expected one of reference"),
    (["check", "--deviations", "absent.toml"], "absent.toml: no such file"),
])
def test_usage_errors_exit_2_with_a_prefixed_message(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "trainspec: error: " in err
    assert message in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--help"]) == 0
    assert "--deviations FILE.toml" in capsys.readouterr().out


def test_check_exits_1_when_not_conformant_and_writes_every_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[api.Plan] = []
    monkeypatch.setattr(api, "run", fake_run(fake_report(failing="RES-3"), calls))
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    deviations = tmp_path / "dev.toml"
    deviations.write_text('[deviations]\n"pat-1" = "known"\n')
    argv = ["check", "--clauses", "LOOP,RES-3", "--world-size", "1", "--timeout", "5",
            "--backend", "gloo", "-n", "3", "--deviations", str(deviations),
            "--report", str(tmp_path / "r.json"), "--junit", str(tmp_path / "r.xml"),
            "--markdown", str(tmp_path / "r.md")]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert re.search(r"^RES-3 +MUST +fail +", out, re.MULTILINE)
    assert "RES-3: observed fail" in out
    assert out.rstrip().endswith("conformant: no; 1.0 s")
    assert re.search(r"^\[\s*1/\d+\] passed  check_fake_thing 0\.12s$", err, re.MULTILINE)
    plan = calls[0]
    assert plan.clauses == registry.select("LOOP,RES-3")
    assert len(plan.checks) == len([c for c in plan.checks if set(c.clauses) & {"RES-3"}
                                    or any(x.startswith("LOOP") for x in c.clauses)])
    assert (plan.world_size, plan.timeout_s, plan.workers) == (1, 5.0, 3)
    assert plan.deviations == {"PAT-1": "known"}
    assert plan.backend == "gloo"  # a field of the plan, passed down: never the environment
    assert "TRAINSPEC_BACKEND" not in os.environ
    assert json.loads((tmp_path / "r.json").read_text())["conformant"] is False
    assert ET.parse(tmp_path / "r.xml").getroot().find("testsuite") is not None
    assert "**not conformant**" in (tmp_path / "r.md").read_text()
    assert "**not conformant**" in summary.read_text()


def test_an_internal_error_exits_3_with_the_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(api, "run", fake_run(RuntimeError("pipe broke"), []))
    assert main(["check", "--clauses", "LOOP-1"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert "RuntimeError: pipe broke" in err
    assert "please report it" in err


def test_an_interrupt_exits_130_with_one_line(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(api, "run", fake_run(KeyboardInterrupt(), []))
    assert main(["check", "--clauses", "LOOP-1"]) == 130
    assert capsys.readouterr().err == ("trainspec: interrupted by SIGINT; worker processes were "
                                       "stopped and the scratch folder removed\n")


def test_matrix_writes_json_and_markdown_for_the_installed_targets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[dict[str, object]] = []
    monkeypatch.setattr(matrix_run, "_check", fake_check(fake_report(), calls))
    assert main(["matrix", "--out", str(tmp_path / "m"), "--clauses", "LOOP"]) == 0
    data = json.loads((tmp_path / "m" / "matrix.json").read_text())
    assert "reference" in data["targets"]
    assert data["targets"]["reference"]["complete"] is True
    assert set(data["targets"]) | set(data["not_installed"]) == {
        "reference", "lightning", "hf", "ignite", "keras", "poutyne", "skorch"}
    assert list(data)[-1] == "complete"
    markdown = (tmp_path / "m" / "matrix.md").read_text()
    assert "| LOOP-1 Each epoch trains once, in order | MUST | pass" in markdown
    err = capsys.readouterr().err
    for name in data["not_installed"]:
        assert f"{name}: not installed" in err


def test_python_dash_m_trainspec_runs_the_cli() -> None:
    done = subprocess.run([sys.executable, "-m", "trainspec", "list"], capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("LOOP-1 ")


@pytest.mark.slow
def test_check_end_to_end_on_the_reference_writes_conformant_reports(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("trainspec")
    argv = [str(script), "check", "--clauses", "LOOP", "--report", "r.json", "--junit",
            "r.xml", "--markdown", "r.md"]
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^\[\s*1/\d+\] passed  check_loop_", done.stderr, re.MULTILINE)
    assert re.search(r"conformant: yes; [\d.]+ s on \d+ workers?$", done.stdout.rstrip())
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["conformant"] is True
    assert report["complete"] is True
    loop = [c for c in report["clauses"] if c["id"].startswith("LOOP-")]
    assert loop
    assert {c["verdict"] for c in loop} == {"pass"}
    assert all(c["checks"] for c in loop)
    assert len(report["clauses"]) == len(registry.CLAUSES)
    suite = ET.parse(tmp_path / "r.xml").getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("errors")) == ("0", "0")
    assert (tmp_path / "r.md").read_text().startswith(
        "## trainspec 0.1.0: `reference` is conformant")


def test_the_cli_puts_the_docs_url_variable_in_the_plan_and_counts_its_checks(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[api.Plan] = []
    monkeypatch.setattr(api, "run", fake_run(fake_report(), calls))
    monkeypatch.setenv("TRAINSPEC_DOCS_URL", "https://example.org/spec")
    assert main(["check", "--clauses", "LOOP", "--world-size", "1"]) == 0
    (plan,) = calls
    assert plan.docs_url == "https://example.org/spec"
    assert plan.checks
    assert all(not c.multi_rank for c in plan.checks)
    assert f"[1/{len(plan.checks)}] passed  check_fake_thing" in capsys.readouterr().err


def test_the_deadline_reaches_the_plan_with_a_default_that_fits_a_ci_job(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[api.Plan] = []
    monkeypatch.setattr(api, "run", fake_run(fake_report(), calls))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert main(["check", "--clauses", "LOOP-1", "--deadline", "30"]) == 0
    assert main(["check", "--clauses", "LOOP-1"]) == 0
    assert [plan.deadline_s for plan in calls] == [30.0, 900.0]


def test_an_interrupted_run_writes_the_reports_of_what_it_did_and_exits_143(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from trainspec.conformance.runner import Interrupted

    def interrupted(plan: api.Plan, **kwargs: object) -> Report:
        os.kill(os.getpid(), signal.SIGTERM)  # handled: raises in this thread at once
        raise AssertionError("SIGTERM did not stop the run")

    def stopped(plan: api.Plan, **kwargs: object) -> Report:
        try:
            return interrupted(plan, **kwargs)
        except KeyboardInterrupt:
            raise Interrupted(fake_report(failing="LOOP-1")) from None

    monkeypatch.setattr(api, "run", stopped)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    report = tmp_path / "r.json"
    assert main(["check", "--clauses", "LOOP-1", "--report", str(report)]) == 143
    assert "trainspec: interrupted by SIGTERM" in capsys.readouterr().err
    assert json.loads(report.read_text())["conformant"] is False
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored: main ran in-process


@pytest.mark.parametrize(("options", "message"), [
    ({"world_size": 0}, "--world-size: expected 1 or more, got 0"),
    ({"workers": 0}, "-n/--workers: expected 1 or more, or auto, got 0"),
    ({"workers": "many"}, "-n/--workers: expected 1 or more, or auto, got 'many'"),
    ({"timeout_s": 0.0}, "--timeout: expected more than 0 and at most 86400 seconds"),
    ({"timeout_s": 1e10}, "--timeout: expected more than 0 and at most 86400 seconds"),
    ({"deadline_s": 0.0}, "--deadline: expected more than 0 and at most 604800 seconds"),
    ({"backend": "mpi"}, "--backend: expected gloo or nccl"),
    ({"profile": "slow"}, "--profile: expected one of fast, ci"),
    ({"clauses": "XYZ"}, "unknown clause or family 'XYZ'"),
    ({"deviations": {"RES-99": "x"}}, "unknown clause 'RES-99'"),
])
def test_the_plan_refuses_each_bad_option_by_name(options: dict[str, object],
                                                  message: str) -> None:
    from trainspec.errors import UsageError

    with pytest.raises(UsageError, match=re.escape(message)):
        api.plan("reference", **options)  # type: ignore[arg-type]


def test_one_plan_validates_and_selects_once() -> None:
    plan = api.plan(base_trainer="pkg:Trainer", clauses="DIST,LOOP-1", world_size=1,
                    backend="gloo", profile="ci", deviations={"loop-1": "known"})
    assert plan.target.label == "pkg:Trainer"
    assert plan.clauses[0] == "LOOP-1"
    # one rank: the DIST checks (multi-rank) are left out, LOOP-1's are in
    assert plan.checks
    assert all("LOOP-1" in c.clauses and not c.multi_rank for c in plan.checks)
    assert (plan.backend, plan.max_examples) == ("gloo", api.PROFILES["ci"])
    assert plan.deviations == {"LOOP-1": "known"}


def test_check_without_n_runs_one_lane_per_core_bounded_by_memory(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[api.Plan] = []
    monkeypatch.setattr(api, "run", fake_run(fake_report(), calls))
    monkeypatch.setattr(plan_module, "auto_workers", lambda: 5)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert main(["check", "--clauses", "LOOP-1"]) == 0
    assert main(["check", "--clauses", "LOOP-1", "-n", "auto"]) == 0
    assert main(["check", "--clauses", "LOOP-1", "-n", "1"]) == 0
    assert [plan.workers for plan in calls] == [5, 5, 1]
    capsys.readouterr()


def test_auto_workers_is_the_usable_cores_unless_memory_is_short(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    monkeypatch.setattr(lanes, "_available_memory_bytes", lambda: 64 * lanes.LANE_MEMORY_BYTES)
    assert lanes.auto_workers() == 4
    monkeypatch.setattr(lanes, "_available_memory_bytes", lambda: 2 * lanes.LANE_MEMORY_BYTES + 1)
    assert lanes.auto_workers() == 2
    monkeypatch.setattr(lanes, "_available_memory_bytes", lambda: lanes.LANE_MEMORY_BYTES // 2)
    assert lanes.auto_workers() == 1  # never fewer than one
    monkeypatch.setattr(lanes, "_available_memory_bytes", lambda: None)
    assert lanes.auto_workers() == 4


def test_the_summary_line_names_the_lanes_that_ran() -> None:
    from dataclasses import replace

    from trainspec.conformance.report.text import format_summary

    report = fake_report()
    assert format_summary(report).endswith("conformant: yes; 1.0 s")
    two = replace(report, environment={**report.environment, "workers": "2"})
    assert format_summary(two).endswith("conformant: yes; 1.0 s on 2 workers")
    one = replace(report, environment={**report.environment, "workers": "1"})
    assert format_summary(one).endswith("1.0 s on 1 worker")
