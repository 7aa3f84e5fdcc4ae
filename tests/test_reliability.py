"""A gate that cannot be fooled or broken: the attacks of the reliability probe, re-run.

Each attack runs the real ``trainspec check`` in a subprocess with its own ``TMPDIR`` and an
environment marker (:class:`tests.test_robustness.Launched`), and is judged by its exit status,
its message, the time it took against the bound it was given, the processes it left (none) and
the temporary folders it left (none). The adapters are in ``tests/bad_adapters/rel1_*``; those
that misbehave at import are armed by ``$TRAINSPEC_REL1_ARMED``. Attacks on the inputs (config
and baseline files, bounds, report paths) run in-process: they end before any worker starts.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.test_robustness import Finished, Launched, marked_processes
from trainspec.conformance import api
from trainspec.conformance.cli import main
from trainspec.conformance.deviations import load_deviations
from trainspec.conformance.report.baseline import read_baseline
from trainspec.conformance.run.harness import Harness, World
from trainspec.conformance.run.scenario import Scenario
from trainspec.errors import ConfigError, HarnessError, UsageError

pytestmark = pytest.mark.slow  # each subprocess pays torch's import (a few seconds)

BAD = "tests.bad_adapters"
ONE_RANK = ["--world-size", "1"]
# a worker's start (torch imported, warm) on a loaded 2-core machine: outside --timeout
START_S = 25.0
STRAY = "trainspec-rel1-stray"  # in the argv of every process the rel1 adapters start


@pytest.fixture(autouse=True)
def armed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The import-time misbehaviours act in the workers the CLI starts (they inherit this)."""
    monkeypatch.setenv("TRAINSPEC_REL1_ARMED", "1")
    monkeypatch.setenv("TRAINSPEC_REL1_MARKER", STRAY)


def launch(tmp_path: Path, name: str, *args: str) -> Launched:
    return Launched(name, list(args), tmp_path)


def assert_left_nothing(run: Finished) -> None:
    assert run.leftover_processes == [], run.leftover_processes
    scratch = [f for f in run.leftover_files if f.split("/")[0].startswith("trainspec")]
    assert scratch == [], scratch


# -------------------------------------------------------------------------------- signals

@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_run_stops_workers_removes_the_scratch_and_writes_the_reports(
        tmp_path: Path, signum: signal.Signals, status: int) -> None:
    # the run starts a process in a new session, then hangs: the signal arrives meanwhile
    run = launch(tmp_path, signum.name, f"{BAD}.rel1_strays:HangsAfterASetsidStray",
                 "--clauses", "LOOP-1,LOOP-2", *ONE_RANK, "--timeout", "60")
    deadline = time.monotonic() + 60
    while not any(STRAY in p.cmdline for p in marked_processes(run.marker)):
        assert run.proc.poll() is None, run.stderr_path.read_text()
        assert time.monotonic() < deadline, "the run never started its stray"
        time.sleep(0.1)
    signalled = time.monotonic()
    run.proc.send_signal(signum)
    done = run.finish(timeout_s=15)
    assert done.returncode == status, done.stderr
    assert time.monotonic() - signalled < 10
    assert f"trainspec: interrupted by {signum.name}; worker processes were stopped and the " \
        "scratch folder removed" in done.stderr
    assert_left_nothing(done)
    clauses = {c["id"]: c for c in done.report["clauses"]}
    assert clauses["LOOP-1"]["verdict"] == "error"
    assert "interrupted" in clauses["LOOP-1"]["evidence"]


def test_closing_a_harness_removes_its_scratch_even_when_interrupted_meanwhile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    harness = Harness(api.plan("reference").target.adapter)
    harness.world(1)

    def interrupted() -> None:
        raise KeyboardInterrupt

    worlds = list(harness.worlds.values())
    for world in worlds:
        monkeypatch.setattr(world, "close", interrupted)
    with pytest.raises(KeyboardInterrupt):
        harness.close()
    assert not harness.root.exists()
    for world in worlds:  # the workers the interrupted close left
        assert isinstance(world, World)
        World.close(world)


# ---------------------------------------------------------------- adapters that break early

@pytest.mark.parametrize(("adapter", "says"), [
    ("rel1_import_hangs:Never", r"did not finish within 13 s(.|\n)*import_that_never_returns"),
    ("rel1_strays:CapabilitiesHang", r"did not finish within 13 s(.|\n)*in capabilities"),
    ("rel1_import_exits:Never", r"worker died while importing.*exited with status 7"),
    ("rel1_import_closes_fds:Never", r"worker died while importing"),
])
def test_an_adapter_that_hangs_or_dies_at_import_or_describe_is_a_bounded_usage_error(
        tmp_path: Path, adapter: str, says: str) -> None:
    run = launch(tmp_path, adapter.replace(":", "-"), f"{BAD}.{adapter}", "--clauses", "LOOP-1",
                 *ONE_RANK, "--timeout", "3").finish(timeout_s=120)
    assert run.returncode == 2, run.stderr
    assert f"target {BAD}.{adapter}" in run.stderr
    assert re.search(says, run.stderr), run.stderr
    assert "bug in trainspec" not in run.stderr
    assert run.wall_s < 13 + START_S
    assert_left_nothing(run)


def test_a_hanging_describe_checkpoints_is_an_error_within_the_timeout(tmp_path: Path) -> None:
    run = launch(tmp_path, "describe", f"{BAD}.rel1_strays:DescribeCheckpointsHangs",
                 "--clauses", "LOOP-1,LOOP-2", *ONE_RANK, "--timeout", "3").finish(120)
    assert run.returncode == 1, run.stderr
    for clause_id in ("LOOP-1", "LOOP-2"):
        clause = run.clause(clause_id)
        assert clause["verdict"] == "error"
        assert "describe_checkpoints did not return within 3 s" in clause["evidence"]
    assert "describe_files_forever" in run.junit_detail("LOOP-1")
    assert run.wall_s < 2 * 3 + START_S
    assert_left_nothing(run)


@pytest.mark.parametrize("adapter", ["rel1_strays:StartsASetsidStray", "rel1_import_daemon:make"])
def test_processes_that_leave_the_process_group_are_swept(tmp_path: Path, adapter: str) -> None:
    run = launch(tmp_path, adapter.replace(":", "-"), f"{BAD}.{adapter}", "--clauses", "LOOP-1",
                 *ONE_RANK, "--timeout", "10").finish(timeout_s=120)
    assert run.returncode in (0, 1), run.stderr
    assert_left_nothing(run)


# ------------------------------------------------------------------------ overall bounds

def test_repeated_identical_timeouts_stop_the_run_early(tmp_path: Path) -> None:
    run = launch(tmp_path, "fail-fast", f"{BAD}.hangs:HangsInRun", "--clauses", "LOOP",
                 *ONE_RANK, "--timeout", "2").finish(timeout_s=120)
    assert run.returncode == 1, run.stderr
    verdicts = [run.clause(f"LOOP-{n}") for n in (1, 2, 3, 4)]
    assert [c["verdict"] for c in verdicts] == ["timeout"] * 4
    # the first clauses' checks time out (LOOP-1's two), and every check after the third
    # identical timeout is stopped: the clauses after it say so
    assert "fail-fast" not in verdicts[0]["evidence"]
    stopped = [c for c in verdicts if "fail-fast: the 3 checks before this one timed out at " in
               c["evidence"]]
    assert stopped == verdicts[len(verdicts) - len(stopped):], [c["evidence"] for c in verdicts]
    assert len(stopped) >= 1, [c["evidence"] for c in verdicts]
    assert run.wall_s < 3 * (2 + 2) + START_S
    assert_left_nothing(run)


def test_past_the_deadline_the_remaining_checks_are_timeout_and_reported(
        tmp_path: Path) -> None:
    run = launch(tmp_path, "deadline", f"{BAD}.hangs:HangsInRun", "--clauses", "LOOP-1,LOOP-2",
                 *ONE_RANK, "--timeout", "60", "--deadline", "4").finish(timeout_s=120)
    assert run.returncode == 1, run.stderr
    evidence = [run.clause(c)["evidence"] for c in ("LOOP-1", "LOOP-2")]
    assert [run.clause(c)["verdict"] for c in ("LOOP-1", "LOOP-2")] == ["timeout", "timeout"]
    assert any("--deadline of 4 s" in e for e in evidence), evidence
    assert run.wall_s < 4 + START_S  # not 2 x 60 s
    assert_left_nothing(run)


# --------------------------------------------------------------------- inputs and resources

@pytest.mark.parametrize("flag", ["--timeout", "--deadline"])
@pytest.mark.parametrize("value", ["inf", "1e10", "nan"])
def test_an_absurd_bound_is_a_usage_error_naming_it(
        capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    assert main(["check", "--clauses", "LOOP-1", flag, value]) == 2
    err = capsys.readouterr().err
    assert flag in err
    assert "at most" in err or "finite" in err


@pytest.mark.parametrize("content", [b"[" * 200_000, None])
def test_a_baseline_that_is_endless_or_nested_too_deeply_is_a_usage_error(
        tmp_path: Path, content: bytes | None) -> None:
    path = Path("/dev/zero") if content is None else tmp_path / "deep.json"
    if content is not None:
        path.write_bytes(content)
    started = time.monotonic()
    with pytest.raises(UsageError, match=r"--baseline .*(larger than 16 MiB|nested too deeply)"):
        read_baseline(path)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("content", [b"x = " + b"[" * 200_000, None])
def test_a_deviations_file_that_is_endless_or_nested_too_deeply_is_a_usage_error(
        tmp_path: Path, content: bytes | None) -> None:
    path = Path("/dev/zero") if content is None else tmp_path / "deep.toml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UsageError, match=r"--deviations .*(larger than 1 MiB|nested too deeply)"):
        load_deviations(path)


def test_an_unwritable_report_path_is_refused_before_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run started although a report path cannot be written")

    monkeypatch.setattr(api, "run", never)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    for flag, path in [("--report", str(tmp_path)), ("--junit", "/proc/version"),
                       ("--markdown", "/dev/full")]:
        assert main(["check", "--clauses", "LOOP-1", flag, path]) == 2
        assert f"trainspec: error: {flag} {path}: cannot write the report there" in \
            capsys.readouterr().err
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))
    assert main(["check", "--clauses", "LOOP-1"]) == 2
    assert "GITHUB_STEP_SUMMARY" in capsys.readouterr().err


def test_a_full_scratch_disk_is_an_error_naming_it_never_the_trainers_failure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.disk_usage
    free_b = [2**40]

    def usage(path: object) -> object:
        total, used, _ = real(str(path))
        return type(real(str(path)))(total, used, free_b[0])

    monkeypatch.setattr(shutil, "disk_usage", usage)
    free_b[0] = 100 * 1024
    adapter = api.plan(f"{BAD}.raises:RaisesInRun").target.adapter
    with pytest.raises(ConfigError, match=r"disk is full: 100 KiB free .* \(TMPDIR\)"):
        Harness(adapter)
    free_b[0] = 2**40
    with Harness(adapter, timeout_s=10) as harness:
        free_b[0] = 100 * 1024  # the disk fills up while the suite runs
        scenario = Scenario(name="reliability-full-disk")
        with pytest.raises(HarnessError, match="run of 'reliability-full-disk' broke and the "
                           "scratch folder's disk is full"):
            harness.run(scenario)


def test_a_property_run_that_times_out_leaves_no_temporary_folder(tmp_path: Path) -> None:
    # a property run makes a temporary folder per example; cut short, they used to stay
    run = launch(tmp_path, "property", f"{BAD}.hangs:HangsInRun", "--clauses", "PAT-5",
                 *ONE_RANK, "--timeout", "2").finish(timeout_s=120)
    assert run.returncode == 1, run.stderr
    assert run.clause("PAT-5")["verdict"] == "timeout"
    assert_left_nothing(run)


def test_a_killed_worker_names_how_it_ended() -> None:
    adapter = api.plan("reference").target.adapter
    with Harness(adapter) as harness:
        worker = harness.world(1).workers[0]
        os.kill(worker.proc.pid, signal.SIGKILL)
        assert worker.exit_status() == "was killed by SIGKILL"


@pytest.mark.parametrize(("error", "status", "says"), [
    (OSError(errno.EMFILE, "Too many open files"), 2, "ran out of file descriptors"),
    (OSError(errno.ENOSPC, "No space left on device"), 2, "ran out of disk space"),
    (MemoryError(), 2, "ran out of memory"),
    (OSError(errno.EBADF, "Bad file descriptor"), 3, "This is a bug in trainspec"),
])
def test_a_machine_out_of_a_resource_is_exit_2_naming_it_and_only_a_bug_is_exit_3(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        error: BaseException, status: int, says: str) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(api, "run", broken)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert main(["check", "--clauses", "LOOP-1"]) == status
    assert says in capsys.readouterr().err
