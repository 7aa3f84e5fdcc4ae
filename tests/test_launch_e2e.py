"""``trainspec check`` inside a launch, end to end on CPU (gloo): torchrun on one node and on
two (two agents with a c10d rendezvous on localhost), and srun's environment simulated; the
reference judged as in the suite's own world, a DIST mutant failing as there, and a rank
killed from outside ending the whole job within the bound."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainspec.conformance.run.control import SILENT_AFTER_S

ROOT = Path(__file__).resolve().parent.parent
MULTI_RANK = "DIST,RES-1,RES-3"
LAUNCH_PREFIXES = ("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "TORCHELASTIC_", "SLURM_",
                   "GROUP_", "ROLE_", "TRAINSPEC_NODE")

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return {**env, **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _check(*args: str) -> list[str]:
    return ["-m", "trainspec", "check", *args, "-n", "1"]


def _torchrun(nnodes: int, nproc: int, node_rank: int, port: int) -> list[str]:
    rdzv = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id=t{port}",
            f"--node-rank={node_rank}"] if nnodes > 1 else ["--standalone"]
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
            f"--nproc-per-node={nproc}", *rdzv]


def _wait(procs: list[subprocess.Popen[bytes]], timeout_s: float = 120.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(deadline - time.monotonic(), 1.0)))
        except subprocess.TimeoutExpired:
            for q in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(q.pid, signal.SIGKILL)
            raise
    return codes


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True)


def _verdicts(report: Path) -> dict[str, str]:
    data = json.loads(report.read_text())
    return {c["id"]: c["verdict"] for c in data["clauses"] if c["id"] in data.get(
        "selected", [c["id"] for c in data["clauses"]]) and c["verdict"] != "n/a"}


def _own_world(tmp_path: Path, *args: str) -> tuple[Path, float]:
    report = tmp_path / "own.json"
    started = time.monotonic()
    subprocess.run([sys.executable, *_check(*args, "--report", str(report))], env=_env(),
                   cwd=ROOT, capture_output=True, timeout=120, check=False)
    return report, time.monotonic() - started


def _srun(tmp_path: Path, args: list[str], nodes: tuple[str, str] = ("here", "here"),
          ) -> list[subprocess.Popen[bytes]]:
    """Two processes in the environment ``srun --ntasks=2`` gives them."""
    port, job = _free_port(), "4242"
    procs = []
    for rank in (0, 1):
        env = _env(SLURM_PROCID=str(rank), SLURM_NTASKS="2", SLURM_LOCALID="0",
                   SLURM_NODELIST="localhost", SLURM_JOB_ID=job, MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), TRAINSPEC_NODE=nodes[rank])
        procs.append(_start([sys.executable, *_check(*args)], env, tmp_path / f"r{rank}.log"))
    return procs


def test_torchrun_on_one_node_judges_the_multi_rank_clauses_as_the_suites_own_world(
        tmp_path: Path) -> None:
    report = tmp_path / "launch.json"
    started = time.monotonic()
    proc = _start([*_torchrun(1, 2, 0, 0), *_check("reference", "--clauses", MULTI_RANK,
                                                    "--report", str(report))],
                  _env(), tmp_path / "torchrun.log")
    assert _wait([proc]) == [0], (tmp_path / "torchrun.log").read_text()[-3000:]
    launched_s = time.monotonic() - started
    own, own_s = _own_world(tmp_path, "reference", "--clauses", MULTI_RANK)
    assert _verdicts(report) == _verdicts(own)
    assert set(_verdicts(report).values()) == {"pass"}
    env = json.loads(report.read_text())["environment"]
    assert (env["launcher"], env["nodes"], env["world_size"]) == ("torchrun", "1", "2")
    print(f"torchrun 1x2: {launched_s:.1f} s; the suite's own world: {own_s:.1f} s")


def test_torchrun_on_two_nodes_with_a_shared_checkpoint_root_passes_the_reference(
        tmp_path: Path) -> None:
    report, shared, port = tmp_path / "launch.json", tmp_path / "shared", _free_port()
    started = time.monotonic()
    agents = [_start([*_torchrun(2, 1, n, port), *_check(
        "reference", "--clauses", "DIST-4,RES-1", "--ckpt-root", str(shared),
        "--report", str(report))], _env(TRAINSPEC_NODE=f"node{n}"), tmp_path / f"agent{n}.log")
        for n in (0, 1)]
    assert _wait(agents) == [0, 0], (tmp_path / "agent0.log").read_text()[-3000:]
    data = json.loads(report.read_text())
    assert _verdicts(report) == {"DIST-4": "pass", "RES-1": "pass"}
    env = data["environment"]
    assert (env["nodes"], env["world_size"]) == ("2", "2")
    assert sorted(env["node_names"].split(",")) == ["node0", "node1"]
    assert list(shared.iterdir()) == []  # the check's own folder there is removed
    print(f"torchrun 2x1: {time.monotonic() - started:.1f} s")


def test_under_srun_a_dist_mutant_fails_as_in_the_suites_own_world(tmp_path: Path) -> None:
    mutant = ["--base-trainer", "tests.mutants.dist:StopVerdictOnRankZeroOnly",
              "--clauses", "DIST-2"]
    report = tmp_path / "launch.json"
    assert _wait(_srun(tmp_path, [*mutant, "--report", str(report)])) == [1, 1]
    own, _ = _own_world(tmp_path, *mutant)
    assert _verdicts(report) == _verdicts(own) == {"DIST-2": "fail"}
    clause = next(c for c in json.loads(report.read_text())["clauses"] if c["id"] == "DIST-2")
    assert "the ranks stopped after epochs {0: 1, 1: None}" in clause["evidence"]
    assert json.loads(report.read_text())["environment"]["launcher"] == "slurm"


def test_resuming_every_rank_from_a_file_only_rank_zeros_node_holds_is_a_clear_fail(
        tmp_path: Path) -> None:
    report = tmp_path / "launch.json"
    codes = _wait(_srun(tmp_path, ["reference", "--clauses", "RES-1", "--report", str(report)],
                        nodes=("node0", "node1")))
    assert codes == [1, 1]
    clause = next(c for c in json.loads(report.read_text())["clauses"] if c["id"] == "RES-1")
    assert clause["verdict"] == "fail"
    assert "the checkpoint folder is node-local" in clause["evidence"]
    assert "--ckpt-root" in clause["evidence"]


def test_a_rank_killed_from_outside_ends_the_job_within_the_bound_with_the_stacks(
        tmp_path: Path) -> None:
    report, junit = tmp_path / "launch.json", tmp_path / "launch.xml"
    procs = _srun(tmp_path, ["reference", "--clauses", "DIST", "--report", str(report),
                             "--junit", str(junit)])
    log0 = tmp_path / "r0.log"
    deadline = time.monotonic() + 90
    # the progress line of the first check done: "[1/8]", or "[ 1/11]" past nine checks
    while not re.search(r"\[ *1/\d+\]", log0.read_text(errors="replace")) \
            and time.monotonic() < deadline:
        time.sleep(0.1)  # the first check is done: the multi-rank runs are under way
    os.kill(procs[1].pid, signal.SIGKILL)
    killed = time.monotonic()
    codes = _wait(procs, timeout_s=SILENT_AFTER_S + 60)
    ended_s = time.monotonic() - killed
    assert codes == [1, -signal.SIGKILL]
    assert ended_s < SILENT_AFTER_S + 45, ended_s
    data = json.loads(report.read_text())
    broken = [c for c in data["clauses"] if c["verdict"] in ("error", "fail", "timeout")]
    assert broken, "a lost rank must not leave every clause passing"
    assert {c["verdict"] for c in broken} == {"error"}  # the launch broke, not the trainer
    assert all("stopped answering: no heartbeat" in c["evidence"] for c in broken)
    assert "--- rank 0 (" in junit.read_text()  # the stack of the rank left running
    print(f"killed rank 1: the job ended {ended_s:.1f} s later")
