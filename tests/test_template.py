"""Workers forked from a warm template: each starts without importing torch, with the
environment the harness gives it, sharing nothing with another worker's adapter; how each ended
is known as for a worker started as a new interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harnesses import repo_harness
from trainspec.conformance.run import template
from trainspec.conformance.run.protocol import AdapterSpec, Describe, Description
from trainspec.conformance.run.session import WorkerProcess
from trainspec.conformance.run.template import ForkedProcess

PROBE = "tests.bad_adapters.forked_probe"


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Path]:
    """Templates held as a harness holds them (the repository on the workers' path)."""
    with repo_harness(AdapterSpec(factory=f"{PROBE}:Probe")):
        yield tmp_path


def _described(worker: WorkerProcess, factory: str) -> Description:
    worker.bind(AdapterSpec(factory=factory))
    worker.send(Describe())
    reply = worker.receive(60)
    assert isinstance(reply, Description), reply
    return reply


def test_each_worker_is_forked_bound_alone_and_given_its_own_environment(
        held: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # not a variable the warm-up reads: both workers come from one template, each given its own
    monkeypatch.setenv("FORKED_PROBE_VAR", "first")
    first = WorkerProcess(held / "first.log")
    monkeypatch.setenv("FORKED_PROBE_VAR", "second")
    second = WorkerProcess(held / "second.log")
    try:
        assert isinstance(first.proc, ForkedProcess)
        assert isinstance(second.proc, ForkedProcess)
        a, b = _described(first, f"{PROBE}:Probe"), _described(second, f"{PROBE}:OtherProbe")
        # one template forked both; neither sees the adapter the other built
        assert a.environment["parent"] == b.environment["parent"] != str(os.getpid())
        assert (a.environment["registry"], b.environment["registry"]) == ("Probe", "OtherProbe")
        assert (a.environment["probe_var"], b.environment["probe_var"]) == ("first", "second")
    finally:
        first.close()
        second.close()
    assert (first.proc.returncode, second.proc.returncode) == (0, 0)


def test_a_forked_worker_killed_reads_as_killed_and_a_dead_template_is_replaced(
        held: Path) -> None:
    worker = WorkerProcess(held / "killed.log")
    try:
        parent = _described(worker, f"{PROBE}:Probe").environment["parent"]
        os.killpg(worker.proc.pid, signal.SIGKILL)
        assert worker.proc.wait(timeout=10) == -signal.SIGKILL
        assert worker.exit_status() == "was killed by SIGKILL"
    finally:
        worker.close()
    template.kill_all()  # as an interrupt does
    after = WorkerProcess(held / "after.log")
    try:
        assert isinstance(after.proc, ForkedProcess)
        described = _described(after, f"{PROBE}:OtherProbe")
        assert described.environment["parent"] != parent
        assert described.environment["registry"] == "OtherProbe"
    finally:
        after.close()


def test_without_a_harness_a_worker_is_a_new_interpreter(tmp_path: Path) -> None:
    worker = WorkerProcess(tmp_path / "alone.log")
    try:
        assert isinstance(worker.proc, subprocess.Popen)
    finally:
        worker.close()
