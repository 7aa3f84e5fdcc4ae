"""The harness: worlds of worker processes that run scenarios, bounded in time.

A :class:`World` is one worker process per rank, started once and reused for every scenario
(imports are paid once; each run is a fork). A multi-rank run gets the torchrun environment
(``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``); its rendezvous store
is hosted here, as torchrun's agent does (``TORCHELASTIC_USE_AGENT_STORE``), on a port the OS
picks, so ranks never race to bind it and parallel suites never collide. Every run has a bound:
a rank past it is reported as ``timeout`` with its stack, and no process outlives :meth:`close`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from torch.distributed import TCPStore  # type: ignore[attr-defined]

from trainspec.conformance.run.records import RunError
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import (
    FileRecord,
    RankTrace,
    RunStatus,
    Trace,
    parse_rank,
    read_records,
)
from trainspec.errors import AdapterError, HarnessError

__all__ = ["AdapterSpec", "Harness", "World"]

_START_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class AdapterSpec:
    """How a worker builds the adapter: ``factory(*args)`` with ``factory`` as MODULE:OBJECT."""

    factory: str
    args: tuple[str, ...] = ()
    preload: tuple[str, ...] = ()  # modules the worker imports before forking (paid once)

    def to_json(self) -> dict[str, Any]:
        return {"factory": self.factory, "args": list(self.args)}


class _Worker:
    """One worker process and its JSON-lines pipe."""

    def __init__(self, log_path: Path) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
               "TORCH_CPP_LOG_LEVEL": os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR")}
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainspec.conformance.run.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env,
            start_new_session=True, text=True, bufsize=1,
        )
        self._ids = itertools.count()
        self._ready = False

    def wait_ready(self) -> None:
        if not self._ready:
            self._read(_START_TIMEOUT_S)
            self._ready = True

    def send(self, req: dict[str, Any]) -> int:
        self.wait_ready()
        req_id = next(self._ids)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({**req, "id": req_id}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise HarnessError(f"worker {self.proc.pid} is gone ({e}); "
                               f"its log: {self.log_tail()}") from None
        return req_id

    def receive(self, timeout_s: float) -> dict[str, Any]:
        return self._read(timeout_s)

    def _read(self, timeout_s: float) -> dict[str, Any]:
        stdout: IO[str] | None = self.proc.stdout
        assert stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(stdout, selectors.EVENT_READ)
            if not sel.select(timeout_s):
                raise HarnessError(f"worker {self.proc.pid} did not answer within "
                                   f"{timeout_s:.0f} s; its log: {self.log_tail()}")
        line = stdout.readline()
        if not line:
            raise HarnessError(f"worker {self.proc.pid} exited (status {self.proc.poll()}); "
                               f"its log: {self.log_tail()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def log_tail(self, limit: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-limit:].strip() or "(empty)"
        return "(unreadable)"

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.write(json.dumps({"op": "shutdown"}) + "\n")
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdout, self.proc.stdin):
            with contextlib.suppress(OSError, ValueError):
                if stream is not None:
                    stream.close()
        self._log.close()


class World:
    """``size`` workers, one per rank, reused across runs."""

    def __init__(self, size: int, root: Path, *, fresh: bool = False) -> None:
        self.size, self.root, self.fresh = size, root, fresh
        self.workers: list[_Worker] = []
        self._jobs = itertools.count()
        self._runs = 0
        self._start()

    def _start(self) -> None:
        logs = self.root / "workers"
        logs.mkdir(parents=True, exist_ok=True)
        stamp = time.monotonic_ns()
        self.workers = [_Worker(logs / f"w{self.size}-r{r}-{stamp}.log") for r in range(self.size)]

    def restart(self) -> None:
        for w in self.workers:
            w.close()
        self._start()

    def describe(self, adapter: AdapterSpec) -> dict[str, Any]:
        worker = self.workers[0]
        worker.send({"op": "describe", "adapter": adapter.to_json(),
                     "preload": list(adapter.preload)})
        reply = worker.receive(_START_TIMEOUT_S)
        if reply.get("status") == "worker_error":
            raise AdapterError(f"{adapter.factory}: {reply['error']}\n{reply['traceback']}")
        return reply

    def run(self, scenario: Scenario, *, adapter: AdapterSpec, ckpt_root: Path,
            timeout_s: float, preload: Sequence[str] = ()) -> Trace:
        """One run of ``scenario`` on every rank; files under ``ckpt_root`` are read after."""
        if scenario.world_size != self.size:
            raise HarnessError(f"scenario {scenario.name!r} needs {scenario.world_size} ranks, "
                               f"this world has {self.size}")
        if self.fresh and self._runs:
            self.restart()  # fresh-process mode: nothing of an earlier run can leak into this one
        self._runs += 1
        job_dir = self.root / f"job{next(self._jobs)}-{scenario.name}"[:120]
        job_dir.mkdir(parents=True)
        ckpt_root.mkdir(parents=True, exist_ok=True)
        store = None
        env: dict[str, str] = {}
        if self.size > 1:
            store = TCPStore("127.0.0.1", 0, world_size=self.size, is_master=True,
                             wait_for_workers=False)
            env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port),
                   "WORLD_SIZE": str(self.size), "TORCHELASTIC_USE_AGENT_STORE": "True"}
        started = time.monotonic()
        try:
            for rank, worker in enumerate(self.workers):
                rank_env = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)} if env else {}
                worker.send({"op": "run", "adapter": adapter.to_json(),
                             "preload": [*adapter.preload, *preload],
                             "scenario": scenario.to_json(), "rank": rank,
                             "job_dir": str(job_dir), "ckpt_root": str(ckpt_root),
                             "timeout_s": timeout_s, "env": rank_env})
            replies = self._collect(timeout_s)
            files = self._describe_files(adapter, ckpt_root)
        finally:
            del store
        duration = time.monotonic() - started
        ranks = tuple(self._rank_trace(rank, job_dir, reply) for rank, reply in
                      enumerate(replies))
        return Trace(scenario_name=scenario.name, ranks=ranks, files=files,
                     duration_s=duration)

    def _describe_files(self, adapter: AdapterSpec, root: Path) -> tuple[FileRecord, ...]:
        """What the run left under ``root``, described by the adapter in a worker."""
        worker = self.workers[0]
        worker.send({"op": "files", "adapter": adapter.to_json(), "ckpt_root": str(root),
                     "preload": list(adapter.preload)})
        reply = self._collect_one(worker, _START_TIMEOUT_S)
        if "files" not in reply:
            raise HarnessError(f"{adapter.factory}: describing the checkpoint files failed: "
                               f"{reply.get('error')}\n{reply.get('traceback', '')}")
        return tuple(FileRecord.from_json(entry) for entry in reply["files"])

    def run_property(self, name: str, *, runner: str, adapter: AdapterSpec, max_examples: int,
                     timeout_s: float) -> dict[str, Any]:
        """A hypothesis property run next to the trainer in one bounded child (one rank)."""
        job_dir = self.root / f"job{next(self._jobs)}-property-{name}"
        job_dir.mkdir(parents=True)
        worker = self.workers[0]
        worker.send({"op": "property", "adapter": adapter.to_json(), "property": name,
                     "runner": runner, "max_examples": max_examples, "rank": 0,
                     "job_dir": str(job_dir), "timeout_s": timeout_s,
                     "preload": list(adapter.preload)})
        reply = self._collect_one(worker, timeout_s)
        out = job_dir / "property.json"
        if reply.get("status") == "exited" and reply.get("code") == 0 and out.exists():
            result: dict[str, Any] = json.loads(out.read_text())
            return result
        log = job_dir / "rank0.log"
        tail = log.read_text(errors="replace")[-6000:] if log.exists() else ""
        return {"passed": None, "status": reply.get("status"), "detail": reply.get("stack") or
                tail, "error": reply.get("error", f"the property run {reply.get('status')}")}

    def _collect_one(self, worker: _Worker, timeout_s: float) -> dict[str, Any]:
        try:
            return worker.receive(timeout_s + 15.0)
        except HarnessError as e:
            self.restart()
            return {"status": "lost", "error": str(e)}

    def _collect(self, timeout_s: float) -> list[dict[str, Any]]:
        replies: list[dict[str, Any]] = []
        broken: HarnessError | None = None
        for worker in self.workers:
            try:
                # the worker bounds its child; the margin covers the stack dump and the kill
                replies.append(worker.receive(timeout_s + 15.0))
            except HarnessError as e:
                broken = e
                replies.append({"status": "lost", "error": str(e)})
        if broken is not None:
            self.restart()
        return replies

    @staticmethod
    def _rank_trace(rank: int, job_dir: Path, reply: dict[str, Any]) -> RankTrace:
        records = read_records(job_dir / f"rank{rank}.events.jsonl")
        kind = reply.get("status")
        status: RunStatus
        error = detail = ""
        errors = [e for e in records if isinstance(e, RunError)]
        if kind == "timeout":
            status, error = "timeout", f"still running after {reply.get('timeout_s')} s"
            detail = str(reply.get("stack", ""))
        elif kind == "killed":
            sig = int(reply.get("signal", 0))
            status, error = "killed", f"killed by {signal.Signals(sig).name}"
        elif kind == "exited" and reply.get("code") == 0:
            status = "completed"
        elif kind == "exited" and errors:
            status = "raised"
            error = f"{errors[-1].type}: {errors[-1].message}".splitlines()[0][:300]
            detail = errors[-1].traceback
        elif kind == "exited":
            status, error = "exited", f"exited with status {reply.get('code')}"
        else:
            status, error = "lost", str(reply.get("error", reply))
            detail = str(reply.get("traceback", ""))
        return parse_rank(rank, records, status, error, detail)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.workers = []


class Harness:
    """The worlds a check session uses, a scratch folder, and the bound on every run."""

    def __init__(self, adapter: AdapterSpec, *, timeout_s: float = 60.0,
                 fresh: bool = False, backend: str | None = None) -> None:
        self.adapter = adapter
        self.timeout_s = timeout_s
        self.fresh = fresh  # new worker processes for every run: isolation over speed
        # gloo or nccl for multi-rank runs; unset: the trainer picks (nccl with enough GPUs)
        self.backend = backend if backend is not None else os.environ.get("TRAINSPEC_BACKEND")
        self.root = Path(tempfile.mkdtemp(prefix="trainspec-"))
        self.worlds: dict[int, World] = {}
        self._dirs = itertools.count()

    def world(self, size: int) -> World:
        if size not in self.worlds:
            self.worlds[size] = World(size, self.root, fresh=self.fresh)
        return self.worlds[size]

    def new_ckpt_root(self, label: str) -> Path:
        path = self.root / "runs" / f"{next(self._dirs)}-{label}"[:100]
        path.mkdir(parents=True)
        return path

    def describe(self, adapter: AdapterSpec | None = None) -> dict[str, Any]:
        return self.world(1).describe(adapter or self.adapter)

    def run(self, scenario: Scenario, *, adapter: AdapterSpec | None = None,
            ckpt_root: Path | None = None, timeout_s: float | None = None) -> Trace:
        root = ckpt_root if ckpt_root is not None else self.new_ckpt_root(scenario.name)
        preload = ("torchmetrics",) if scenario.task.metric == "torchmetrics" else ()
        if self.backend and scenario.world_size > 1:
            scenario = scenario.with_config(**{"ddp.backend": self.backend})
        return self.world(scenario.world_size).run(
            scenario, adapter=adapter or self.adapter, ckpt_root=root,
            timeout_s=timeout_s or self.timeout_s, preload=preload)

    def property(self, name: str, *, runner: str, max_examples: int,
                 adapter: AdapterSpec | None = None) -> dict[str, Any]:
        """A property run (``runner``: MODULE:FUNCTION judging it next to the trainer)."""
        # a property is many runs: its bound scales with the examples it may take
        return self.world(1).run_property(name, runner=runner, adapter=adapter or self.adapter,
                                          max_examples=max_examples,
                                          timeout_s=self.timeout_s + 0.5 * max_examples)

    def close(self) -> None:
        for world in self.worlds.values():
            world.close()
        self.worlds.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
