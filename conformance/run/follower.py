"""A launched rank > 0: serves its rank of rank 0's multi-rank runs, then exits as rank 0 does.

``torchrun ... -m trainspec check`` starts this loop in every process but rank 0's. It says
hello (its node, local rank, pid), starts one worker for the adapter rank 0 names (warm, runs
forked from it, as in the suite's own world), and then does what rank 0 asks over the control
channel: runs its rank of a run (the records the run writes go back as they grow, the reply
when it ends), cuts a run short, and finally exits with the status rank 0 sends. It writes no
report. Rank 0 gone silent (killed, its node lost) ends it within the channel's bound, with
its worker and that worker's runs.

Paths: the job folder of a run is this process's own; the checkpoint folder is rank 0's
path on the same node (node-local storage is the node's), a folder of this process's own at
the same place under its scratch root on another node, or the same path when ``--ckpt-root``
names shared storage.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

from trainspec.conformance.run.control import SILENT_AFTER_S, Channel
from trainspec.conformance.run.protocol import AdapterSpec, Run, RunReply, as_run_reply
from trainspec.conformance.run.session import WorkerProcess
from trainspec.errors import HarnessError

__all__ = ["EXIT_LOST", "Follower"]

EXIT_LOST = 3  # rank 0 went silent: an internal error of the launch, not a verdict


class Follower:
    """One launched rank > 0 and its worker."""

    def __init__(self, channel: Channel) -> None:
        self.channel, self.launch = channel, channel.launch
        self.root = Path(tempfile.mkdtemp(prefix=f"trainspec-rank{self.launch.rank}-"))
        self.worker: WorkerProcess | None = None
        self.adapter: AdapterSpec | None = None
        self.judge_root = ""  # rank 0's scratch root, mapped to this process's
        self.judge_node = ""
        self.is_shared = False
        self.job = ""  # the run in flight ("" when none)
        self._events: Path | None = None
        self._events_size = -1

    def serve(self) -> int:
        """Serve until rank 0 sends the exit status; returns it."""
        self.channel.send(0, {"hello": True, "node": self.launch.node, "pid": _pid(),
                              "local_rank": self.launch.local_rank})
        try:
            while True:
                message = self.channel.take(0)
                if message is not None:
                    status = self._handle(message)
                    if status is not None:
                        self.channel.send(0, {"reply": "bye"})
                        return status
                self._follow_run()
                silent = self.channel.silent_s(0)
                if silent > SILENT_AFTER_S:
                    print(f"trainspec: rank {self.launch.rank}: rank 0 stopped answering (no "
                          f"heartbeat for {silent:.0f} s); this rank stops its runs and "
                          "exits", file=sys.stderr)
                    return EXIT_LOST
                time.sleep(0.02)
        finally:
            self.close()

    def _handle(self, message: dict[str, object]) -> int | None:
        op = message.get("op")
        if op == "exit":
            status = message.get("status")
            return status if isinstance(status, int) else EXIT_LOST
        if op == "bind":
            raw = message.get("adapter")
            self.adapter = AdapterSpec.from_json(raw if isinstance(raw, dict) else {})
            self.judge_root = str(message.get("root", ""))
            self.judge_node = str(message.get("node", ""))
            self.is_shared = message.get("shared") is not None
            self._start_worker()
        elif op == "run":
            raw = message.get("request")
            self._start_run(str(message.get("job", "")), raw if isinstance(raw, dict) else {})
        elif op == "cut" and message.get("job") == self.job and self.worker is not None:
            self.worker.cut()
        return None

    def _start_worker(self) -> None:
        if self.worker is not None:
            self.worker.close()
        if self.adapter is None:
            return
        logs = self.root / "workers"
        logs.mkdir(parents=True, exist_ok=True)
        self.worker = WorkerProcess(logs / f"rank{self.launch.rank}-{time.monotonic_ns()}.log")
        self.worker.bind(self.adapter)

    def local_path(self, path: str, *, is_job: bool = False) -> str:
        """Rank 0's ``path`` as this process sees it (see the module's docstring)."""
        if not self.judge_root or not path.startswith(self.judge_root):
            return path  # shared storage (--ckpt-root), or a path of the scenario's own
        same_node = self.judge_node == self.launch.node and Path(self.judge_root).is_dir()
        if same_node and not is_job:
            return path
        mine = self.root / "judge" / Path(path).relative_to(self.judge_root)
        mine.mkdir(parents=True, exist_ok=True) if is_job else mine.parent.mkdir(
            parents=True, exist_ok=True)
        return str(mine)

    def _map(self, value: object) -> object:
        if isinstance(value, str):
            return self.local_path(value)
        if isinstance(value, dict):
            return {k: self._map(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._map(v) for v in value]
        return value

    def _start_run(self, job: str, raw: dict[str, object]) -> None:
        request = Run.from_json(raw)
        job_dir = self.local_path(request.job_dir, is_job=True)
        scenario = self._map(request.scenario)
        ckpt_root = self.local_path(request.ckpt_root)
        Path(ckpt_root).mkdir(parents=True, exist_ok=True)
        local = Run(scenario=scenario if isinstance(scenario, dict) else request.scenario,
                    rank=request.rank, job_dir=job_dir, ckpt_root=ckpt_root,
                    timeout_s=request.timeout_s, env=request.env, preload=request.preload,
                    describe_files=False)
        self.job = job
        self._events = Path(job_dir) / f"rank{request.rank}.events.jsonl"
        self._events_size = -1
        try:
            if self.worker is None:
                raise HarnessError(f"rank {self.launch.rank}: no adapter bound before a run")
            self.worker.send(local)
        except HarnessError as e:
            self._reply(RunReply.lost(str(e)))
            self._start_worker()

    def _follow_run(self) -> None:
        """Send the run's records as they grow, and its reply once the worker sent it."""
        if not self.job or self.worker is None:
            return
        self._send_events(final=False)
        if not self.worker.has_reply():
            return
        try:
            reply = as_run_reply(self.worker.receive(0.0))
        except HarnessError as e:
            reply = RunReply.lost(f"rank {self.launch.rank} on {self.launch.node}: {e}")
            self._start_worker()
        self._reply(reply)

    def _send_events(self, *, final: bool) -> str | None:
        if self._events is None:
            return None
        try:
            size = self._events.stat().st_size
        except OSError:
            return None
        if size == self._events_size and not final:
            return None
        self._events_size = size
        text = self._events.read_text(errors="replace")
        if not final:
            self.channel.send(0, {"job": self.job, "events": text})
        return text

    def _reply(self, reply: RunReply) -> None:
        text = self._send_events(final=True)
        message: dict[str, object] = {"job": self.job, "run": reply.to_json()}
        if text is not None:
            message["events"] = text
        self.channel.send(0, message)
        self.job, self._events = "", None

    def close(self) -> None:
        if self.worker is not None:
            with contextlib.suppress(Exception):
                self.worker.close()
            self.worker = None
        shutil.rmtree(self.root, ignore_errors=True)


def _pid() -> int:
    import os

    return os.getpid()
