"""A suite that never breaks CI: adapters that raise, hang, flood, fail to load, or lie.

Each bad adapter of tests/bad_adapters/ is checked by the real ``trainspec check`` in a
subprocess, and judged by its exit status, its progress lines, its reports (the JUnit XML holds
tracebacks and stacks), the processes it leaves (none) and the temporary files it leaves (none:
``TMPDIR`` points at a fresh folder). A run costs a few seconds of imports, so the runs start
together when the module starts and the tests below wait for the one they judge. Adapters that
fail before any check runs are also tried in-process, on one shared harness.

A run's processes are found by a marker in their environment, which every worker and forked
run child inherits: other suites running on the same machine have workers too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.bad_adapters import loud
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.runner import open_context, resolve_target, run_checks
from trainspec.errors import AdapterError

pytestmark = pytest.mark.slow  # about 30 s in all: a dozen processes that import torch

ROOT = Path(__file__).resolve().parent.parent
WORKER_MODULE = "trainspec.conformance.run.worker"
MARKER_VAR = "TRAINSPEC_ROBUSTNESS_RUN"
BAD = "tests.bad_adapters"
TIMEOUT_S = 3.0  # --timeout of the runs whose adapter breaks (none of them trains)
TWO_LOOP_CHECKS = ["--clauses", "LOOP-1,LOOP-2", "--world-size", "1"]
PROGRESS = re.compile(r"^\[\s*\d+/\d+\] ", re.MULTILINE)

# name -> the arguments of `trainspec check` (the reports are added)
RUNS: dict[str, list[str]] = {
    "raises": [f"{BAD}.raises:RaisesInRun", *TWO_LOOP_CHECKS, "--timeout", str(TIMEOUT_S)],
    "hangs": [f"{BAD}.hangs:HangsInRun", *TWO_LOOP_CHECKS, "--timeout", str(TIMEOUT_S)],
    # trains for real: the default bound, so a loaded machine cannot turn it into a timeout
    "loud": [f"{BAD}.loud:LoudRun", "--clauses", "LOOP-1", "--world-size", "1"],
    "missing-dependency": [f"{BAD}.missing_dependency:NeverDefined", "--clauses", "LOOP-1"],
    "unknown-capabilities": [f"{BAD}.capabilities:UnknownCapabilities", "--clauses", "LOOP"],
    "not-callable": [f"{BAD}.not_adapters:NOT_A_FACTORY", "--clauses", "LOOP-1"],
    # every interruption of RES-1 kills the training process with SIGKILL
    "sigkill-crashes": ["reference", "--clauses", "RES-1", "--world-size", "1"],
}


def repo_on_pythonpath() -> str:
    """PYTHONPATH for workers that import the bad adapters as tests.bad_adapters.*."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)


# ------------------------------------------------------------------------------ processes

@dataclass(frozen=True, slots=True, kw_only=True)
class Process:
    pid: int
    cmdline: str


def marked_processes(marker: str) -> list[Process]:
    """Live processes whose environment carries ``MARKER_VAR=marker`` (zombies have none)."""
    tag = f"{MARKER_VAR}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if tag in environ:
            found.append(Process(pid=int(entry.name),
                                 cmdline=cmdline.replace(b"\0", b" ").decode(errors="replace")))
    return found


def survivors(marker: str, grace_s: float = 5.0) -> list[Process]:
    """The run's processes still alive after ``grace_s`` (a killed worker's child dies with a
    short delay: its parent-death signal), then killed, so that no test leaves any behind."""
    deadline = time.monotonic() + grace_s
    left = marked_processes(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = marked_processes(marker)
    for p in left:
        with contextlib.suppress(OSError):  # ended meanwhile
            os.kill(p.pid, signal.SIGKILL)
    return left


# ------------------------------------------------------------------------------------ runs

@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """A `trainspec check` run that ended, and what it left."""

    name: str
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    folder: Path
    leftover_processes: list[Process]
    leftover_files: list[str]

    @property
    def report(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.folder / "report.json").read_text())
        return data

    def clause(self, clause_id: str) -> dict[str, Any]:
        return next(c for c in self.report["clauses"] if c["id"] == clause_id)

    def junit_detail(self, clause_id: str) -> str:
        """The text of the clause's <failure> or <error> in the JUnit XML."""
        root = ET.parse(self.folder / "report.xml").getroot()
        case = next(c for c in root.iter("testcase")
                    if (c.get("name") or "").startswith(f"{clause_id} "))
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        assert problem is not None, f"{clause_id}: no <failure> or <error> in the JUnit XML"
        return problem.text or ""

    @property
    def progress_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if PROGRESS.match(line)]

    @property
    def other_stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if not PROGRESS.match(line)]


class Launched:
    """A `trainspec check` subprocess with its own TMPDIR and environment marker."""

    def __init__(self, name: str, args: Sequence[str], base: Path) -> None:
        self.name = name
        self.folder = base / name
        self.tmp = self.folder / "tmp"
        self.tmp.mkdir(parents=True)
        self.marker = uuid.uuid4().hex
        env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
        env.update({
            MARKER_VAR: self.marker,
            "TMPDIR": str(self.tmp),
            "PYTHONPATH": repo_on_pythonpath(),
            # torch keeps a compile cache under TMPDIR by design; it is not the suite's
            "TORCHINDUCTOR_CACHE_DIR": str(self.folder / "torchinductor"),
        })
        argv = [sys.executable, "-m", "trainspec", "check", *args,
                "--report", str(self.folder / "report.json"),
                "--junit", str(self.folder / "report.xml")]
        self.stdout_path, self.stderr_path = self.folder / "stdout", self.folder / "stderr"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.started = time.monotonic()
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=err)

    def wait_for_stderr(self, pattern: re.Pattern[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not pattern.search(self.stderr_path.read_text(errors="replace")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.finish(0)
                raise AssertionError(f"{self.name}: no line matching {pattern.pattern!r} on "
                                     f"stderr: {self.stderr_path.read_text()[-3000:]}")
            time.sleep(0.05)

    def finish(self, timeout_s: float) -> Finished:
        """Wait for the CLI (killing it past ``timeout_s``), then survey what it left."""
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            survivors(self.marker, grace_s=0)
            raise AssertionError(f"{self.name}: trainspec check still running after "
                                 f"{timeout_s:.0f} s") from None
        wall_s = time.monotonic() - self.started
        left = survivors(self.marker)
        files = sorted(str(p.relative_to(self.tmp)) for p in self.tmp.rglob("*"))
        return Finished(name=self.name, returncode=self.proc.returncode,
                        stdout=self.stdout_path.read_text(errors="replace"),
                        stderr=self.stderr_path.read_text(errors="replace"), wall_s=wall_s,
                        folder=self.folder, leftover_processes=left, leftover_files=files)


def run_cli(name: str, args: Sequence[str], base: Path) -> Finished:
    return Launched(name, args, base).finish(timeout_s=180)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Finished]]]:
    """Every run of RUNS, started at once (two or three at a time) and waited for by name."""
    base = tmp_path_factory.mktemp("cli-runs")
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="trainspec-cli") as pool:
        yield {name: pool.submit(run_cli, name, args, base) for name, args in RUNS.items()}


def finished(runs: dict[str, Future[Finished]], name: str) -> Finished:
    return runs[name].result(timeout=300)


# ------------------------------------------------------------------- adapters that raise

def test_an_adapter_that_raises_is_reported_with_its_traceback_and_the_run_goes_on(
        runs: dict[str, Future[Finished]]) -> None:
    run = finished(runs, "raises")
    assert run.returncode == 1, run.stderr
    assert sorted(line.split()[-2] for line in run.progress_lines) == [
        "check_generated_runs_train_each_epoch_once", "check_generated_runs_validate_on_schedule",
        "check_loop_trains_each_epoch_once_in_order", "check_loop_validates_on_schedule"]
    for clause_id in ("LOOP-1", "LOOP-2"):
        clause = run.clause(clause_id)
        assert clause["verdict"] in ("fail", "error")
        assert "RuntimeError: the adapter lost its trainer" in clause["evidence"]
        detail = run.junit_detail(clause_id)
        assert "Traceback (most recent call last)" in detail
        assert re.search(r'tests/bad_adapters/raises\.py", line \d+, in run', detail), detail
    assert run.report["complete"] is True


def test_an_exception_raised_in_the_adapters_own_code_is_an_error_not_a_failure(
        runs: dict[str, Future[Finished]]) -> None:
    run = finished(runs, "raises")
    assert {run.clause(c)["verdict"] for c in ("LOOP-1", "LOOP-2")} == {"error"}


# --------------------------------------------------------------------- adapters that hang

def test_a_hanging_adapter_times_out_with_its_stack_and_the_run_goes_on(
        runs: dict[str, Future[Finished]]) -> None:
    run = finished(runs, "hangs")
    assert run.returncode == 1, run.stderr
    # two hand-written checks and the generated runs, which stop at their first run's bound
    assert [line.split()[1] for line in run.progress_lines] == ["timeout"] * 4
    for clause_id in ("LOOP-1", "LOOP-2"):
        clause = run.clause(clause_id)
        assert clause["verdict"] == "timeout"
        assert f"still running after {TIMEOUT_S} s" in clause["evidence"]
        stack = run.junit_detail(clause_id)
        assert "most recent call first" in stack
        assert re.search(r"tests/bad_adapters/hangs\.py\", line \d+ in "
                         r"wait_for_a_trainer_that_never_comes", stack), stack


def test_a_hanging_adapter_costs_at_most_the_timeout_per_check(
        runs: dict[str, Future[Finished]]) -> None:
    run = finished(runs, "hangs")
    checks = [c for clause in run.report["clauses"] for c in clause["checks"]]
    assert len(checks) == 4  # the generated runs' second check reuses the first's timeout
    # the bound, then a second for the stack dump; the rest is load on a shared machine
    assert all(c["duration_s"] <= TIMEOUT_S + 5 for c in checks), checks
    startup_s = 30.0  # two interpreters importing torch, on a loaded machine
    assert run.wall_s < startup_s + len(checks) * (TIMEOUT_S + 5), run.wall_s


# ------------------------------------------------------------------- adapters that shout

def test_an_adapter_printing_megabytes_still_passes_and_floods_no_output_or_report(
        runs: dict[str, Future[Finished]]) -> None:
    run = finished(runs, "loud")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.clause("LOOP-1")["verdict"] == "pass"
    assert len(run.stdout) + len(run.stderr) < 20_000
    assert loud.MARKER not in run.stdout + run.stderr
    for report in ("report.json", "report.xml"):
        assert (run.folder / report).stat().st_size < 100_000


# ------------------------------------------------------- adapters that cannot be built

def test_an_adapter_module_that_fails_to_import_is_a_configuration_error_naming_it(
        runs: dict[str, Future[Finished]]) -> None:
    run = finished(runs, "missing-dependency")
    assert run.returncode == 2
    first = run.stderr.splitlines()[0]
    assert first.startswith(f"trainspec: error: target {BAD}.missing_dependency:NeverDefined: ")
    assert f"cannot import module '{BAD}.missing_dependency'" in first
    assert "No module named 'trainspec_no_such_framework'" in first
    assert not run.progress_lines
    assert run.stdout == ""
    assert not (run.folder / "report.json").exists()


def test_unknown_capability_names_are_a_configuration_error_listing_the_known_ones(
        runs: dict[str, Future[Finished]]) -> None:
    run = finished(runs, "unknown-capabilities")
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        f"trainspec: error: target {BAD}.capabilities:UnknownCapabilities: capabilities() "
        "declared unknown names ['early_stoping']; known: ['checkpoint', 'debug', "
        "'early_stopping', 'eval_only', 'finetune', 'grad_accum', 'multi_rank', 'resume', "
        "'start_patience', 'test_pass', 'val_every_n', 'val_first']"]


def test_a_factory_that_is_not_callable_is_a_configuration_error_naming_it(
        runs: dict[str, Future[Finished]]) -> None:
    run = finished(runs, "not-callable")
    assert run.returncode == 2
    first = run.stderr.splitlines()[0]
    assert first.startswith(f"trainspec: error: target {BAD}.not_adapters:NOT_A_FACTORY: ")
    assert "'int' object is not callable" in first
    assert "Expected: its factory must be importable" in first
    assert not run.progress_lines


# -------------------------------------------------------- nothing outlives a check run

@pytest.mark.parametrize("name", list(RUNS))
def test_no_worker_process_or_temporary_file_outlives_a_run(
        runs: dict[str, Future[Finished]], name: str) -> None:
    run = finished(runs, name)
    assert run.returncode in (0, 1, 2), run.stderr[-3000:]
    assert [p for p in run.leftover_processes if WORKER_MODULE in p.cmdline] == []
    assert run.leftover_processes == []
    assert run.leftover_files == []


def test_sigkill_crash_scenarios_pass_on_the_reference(
        runs: dict[str, Future[Finished]]) -> None:
    run = finished(runs, "sigkill-crashes")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.clause("RES-1")["verdict"] == "pass"


def test_ctrl_c_even_twice_stops_a_check_at_once_with_one_line_and_leaves_nothing(
        tmp_path: Path) -> None:
    started = Launched("ctrl-c", ["reference"], tmp_path)
    started.wait_for_stderr(PROGRESS, timeout_s=120)
    interrupted = time.monotonic()
    started.proc.send_signal(signal.SIGINT)
    time.sleep(0.3)  # the impatient second Ctrl-C lands while the workers are being stopped
    started.proc.send_signal(signal.SIGINT)
    run = started.finish(timeout_s=60)
    assert time.monotonic() - interrupted < 10
    assert run.returncode == 130
    assert run.other_stderr_lines == ["trainspec: interrupted by SIGINT; worker processes were "
                                      "stopped and the scratch folder removed"]
    assert run.stdout == ""
    # the report of what was done is written; the checks not done are error "interrupted"
    assert run.report["summary"]["error"] >= 1
    assert run.leftover_processes == []
    assert run.leftover_files == []


# ------------------------------------------------------------------------ in-process

@pytest.fixture(scope="module")
def harness_timeout_s() -> float:
    """The shared harness (tests/conftest.py) bounds each run here at 30 s, not 60: the bad
    adapters below fail at once, and one that hangs ends sooner."""
    return 30.0


@pytest.mark.parametrize(("factory", "message"), [
    ("capabilities:UnknownCapabilities", r"declared unknown names \['early_stoping'\]"),
    ("capabilities:CapabilitiesNotASet", r"TypeError: 'int' object is not iterable"),
    ("capabilities:CapabilitiesOfMixedTypes", r"TypeError: '<' not supported between"),
    ("capabilities:CapabilitiesAsOneString",
     r"did capabilities\(\) return one name as a string\?"),
    # the description is validated in one place, which names everything missing
    ("not_adapters:make_nothing", r"lacks name, capabilities, environment, run"),
    ("not_adapters:EnvironmentNotADict", r"environment\(\) returned \['torch 2.13.0'\]; "
                                         r"expected a dict"),
    ("not_adapters:SourcesForUnknownClauses", r"framework_sources\(\) names unknown clauses "
                                              r"\['NAN1'\]"),
    ("not_adapters:SourcesNotADict", r"framework_sources\(\) returned \['pkg/callbacks.py'\]; "
                                     r"expected a dict of clause IDs"),
    ("import_crash:NeverDefined", r"KeyError: 'framework_home'"),
    ("missing_dependency:NeverDefined", r"No module named 'trainspec_no_such_framework'"),
])
def test_an_adapter_that_breaks_its_protocol_is_refused_before_any_check(
        harness: Harness, factory: str, message: str) -> None:
    target = resolve_target(f"{BAD}.{factory}")
    with pytest.raises(AdapterError, match=message) as caught:
        open_context(target, harness, world_size=1)
    assert str(caught.value).startswith(f"target {BAD}.{factory}: ")


def test_an_adapter_without_run_is_refused_before_any_check(harness: Harness) -> None:
    target = resolve_target(f"{BAD}.not_adapters:WithoutRun")
    with pytest.raises(AdapterError, match=r"\brun\b"):
        open_context(target, harness, world_size=1)


def test_an_adapter_that_prints_megabytes_then_raises_reports_the_error_not_the_noise(
        harness: Harness) -> None:
    report = run_checks(resolve_target(f"{BAD}.loud:LoudThenRaises"), clauses="LOOP-1",
                        world_size=1, harness=harness)
    clause = report.clause("LOOP-1")
    assert clause.verdict in ("fail", "error")
    assert clause.evidence.startswith("scenario 'loop-4-epochs': the run raised: "
                                      "RuntimeError: gave up after shouting")
    assert len(clause.evidence) < 1000
    assert all(len(c.detail) < 20_000 for c in clause.checks)


def test_an_adapter_module_that_exits_on_import_is_a_configuration_error() -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", repo_on_pythonpath())
        with Harness(resolve_target("reference").adapter, timeout_s=30) as h:
            target = resolve_target(f"{BAD}.exits_on_import:ExitsOnImport")
            with pytest.raises(AdapterError, match="no framework licence found"):
                open_context(target, h, world_size=1)


def test_an_environment_that_is_not_json_is_a_configuration_error() -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", repo_on_pythonpath())
        with Harness(resolve_target("reference").adapter, timeout_s=30) as h:
            target = resolve_target(f"{BAD}.not_adapters:EnvironmentNotJson")
            with pytest.raises(AdapterError, match="JSON"):
                open_context(target, h, world_size=1)
