"""Rank 0's side of a launch: the multi-rank world whose other ranks are the launched processes.

Inside ``torchrun``/``srun`` every process serves one rank. Rank 0 runs the checks, as in the
suite's own world, but a multi-rank run's rank ``r`` > 0 is served by launched process ``r``
(:mod:`trainspec.conformance.run.follower`), reached over the launch's control channel
(:mod:`trainspec.conformance.run.control`): the run request goes there, and the rank's records
come back as it writes them, into this run's job folder, so that the grace and the checks read
them as they read a local rank's. Each run gets its own rendezvous store, opened here on a port
the OS picks: one scenario's lost rank cannot poison the next one's process group.

A rank whose heartbeat stops (its process killed, its node lost) is ``lost`` at once, with the
other ranks cut short within their grace (their stacks in the trace); every later multi-rank
run is refused with that reason, so the check ends within its bound instead of waiting on it.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from trainspec.conformance.run.control import SILENT_AFTER_S, Channel
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.launch import Launch, nccl_env
from trainspec.conformance.run.protocol import AdapterSpec, Run, RunReply, as_run_reply
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.session import WorkerProcess
from trainspec.conformance.run.trace import RankTrace, Trace
from trainspec.conformance.run.world import (
    Grace,
    agent_store,
    grace_s,
    next_job_dir,
    rank_trace,
)
from trainspec.errors import HarnessError

__all__ = ["LaunchWorld", "Peer", "Ranks"]

_REPLY_MARGIN_S = 15.0
HELLO_TIMEOUT_S = 120.0  # every launched rank says hello within this of rank 0's start


@dataclass(slots=True, kw_only=True)
class Peer:
    """One launched rank > 0, as rank 0 sees it."""

    rank: int
    node: str
    local_rank: int
    pid: int
    lost: str = ""  # why it is gone ("" while it serves)


@dataclass(slots=True, kw_only=True)
class Ranks:
    """The launch's ranks > 0, seen from rank 0: who they are and the channel to them."""

    launch: Launch
    channel: Channel
    peers: dict[int, Peer] = field(default_factory=dict)

    @classmethod
    def greet(cls, launch: Launch, channel: Channel,
              timeout_s: float = HELLO_TIMEOUT_S) -> Ranks:
        """Wait for every rank's hello (its node, local rank and pid)."""
        ranks = cls(launch=launch, channel=channel)
        for r in range(1, launch.world_size):
            hello = channel.wait(r, timeout_s)
            ranks.peers[r] = Peer(rank=r, node=str(hello.get("node", "?")),
                                  local_rank=int(str(hello.get("local_rank", 0))),
                                  pid=int(str(hello.get("pid", 0))))
        return ranks

    @property
    def nodes(self) -> list[str]:
        """The launch's nodes, rank 0's first."""
        seen = [self.launch.node]
        seen += [p.node for p in self.peers.values() if p.node not in seen]
        return seen

    def bind(self, adapter: AdapterSpec, root: Path, ckpt_base: Path | None) -> None:
        """Every rank starts its worker for ``adapter`` now (it warms up meanwhile)."""
        for r in self.peers:
            self.channel.send(r, {"op": "bind", "adapter": adapter.to_json(),
                                  "root": str(root), "node": self.launch.node,
                                  "shared": None if ckpt_base is None else str(ckpt_base)})

    def finish(self, status: int, timeout_s: float = 10.0) -> None:
        """Tell every rank the exit status, and wait (bounded) until each has read it: a
        store rank 0 hosts goes when it exits."""
        alive = [r for r, p in self.peers.items() if not p.lost]
        for r in alive:
            self.channel.send(r, {"op": "exit", "status": status})
        deadline = time.monotonic() + timeout_s
        for r in alive:
            with contextlib.suppress(HarnessError):
                while True:
                    message = self.channel.wait(r, max(deadline - time.monotonic(), 0.0))
                    if message.get("reply") == "bye":
                        break

    def check_alive(self, r: int) -> str:
        """Why rank ``r`` is lost ("" while its heartbeat moves)."""
        peer = self.peers[r]
        if not peer.lost:
            silent = self.channel.silent_s(r)
            if silent > SILENT_AFTER_S:
                peer.lost = (f"rank {r} (pid {peer.pid} on {peer.node}) stopped answering: "
                             f"no heartbeat for {silent:.0f} s (its process was killed or its "
                             "node lost)")
        return peer.lost


class LaunchWorld:
    """A world of ``size`` ranks: rank 0 is this process's worker (the single-rank world's),
    ranks 1..size-1 are launched processes."""

    def __init__(self, size: int, root: Path, adapter: AdapterSpec, *, ranks: Ranks,
                 slots: list[WorkerProcess], spawn_log: Path, is_shared: bool) -> None:
        if size > ranks.launch.world_size:
            raise HarnessError(f"a run needs {size} ranks; the launch has "
                               f"{ranks.launch.world_size}: launch as many processes")
        self.size, self.root, self.adapter, self.ranks = size, root, adapter, ranks
        self.is_shared = is_shared  # the checkpoint folder is on storage every node sees
        self.slots = slots
        if not slots:
            slots.append(WorkerProcess(spawn_log))
            slots[0].bind(adapter)

    @property
    def workers(self) -> list[WorkerProcess]:
        return self.slots[:1]

    def run(self, scenario: Scenario, *, ckpt_root: Path, timeout_s: float,
            preload: tuple[str, ...] | list[str] = ()) -> Trace:
        if scenario.world_size != self.size:
            raise HarnessError(f"scenario {scenario.name!r} needs {scenario.world_size} ranks, "
                               f"this world has {self.size}")
        others = range(1, self.size)
        lost = [self.ranks.check_alive(r) for r in others]
        if any(lost):
            raise HarnessError(f"scenario {scenario.name!r} not run: "
                               f"{'; '.join(m for m in lost if m)}; the launch cannot run a "
                               f"{self.size}-rank run any more")
        job_dir = next_job_dir(self.root, scenario.name)
        ckpt_root.mkdir(parents=True, exist_ok=True)
        local = self.slots[0]
        local.wait_settled()
        started = time.monotonic()
        addr = os.environ.get("TRAINSPEC_RENDEZVOUS_ADDR") or self.ranks.launch.master_addr
        store, env = agent_store(addr, self.size)
        bound = grace_s(scenario)
        env = {**env, **nccl_env(60.0 if bound is None else bound - 10.0, os.environ)}
        job = job_dir.name
        try:
            for r in range(self.size):
                local_rank = self.ranks.launch.local_rank if r == 0 else \
                    self.ranks.peers[r].local_rank
                request = Run(scenario=scenario.to_json(), rank=r, job_dir=str(job_dir),
                              ckpt_root=str(ckpt_root), timeout_s=timeout_s,
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(local_rank)},
                              preload=tuple(preload), describe_files=r == 0)
                if r == 0:
                    local.send(request)
                else:
                    self.ranks.channel.send(r, {"op": "run", "job": job,
                                                "request": request.to_json()})
            grace_for = grace_s(scenario)
            replies = self._collect(job, job_dir, 2 * timeout_s,
                                    None if grace_for is None else Grace(grace_for, job_dir))
        finally:
            del store
        traces = tuple(rank_trace(r, job_dir, reply) for r, reply in enumerate(replies))
        if replies[0].files_error:
            raise HarnessError(f"{self.adapter.factory}: describing the checkpoint files "
                               f"failed: {replies[0].files_error}")
        gone = [self.ranks.peers[r].lost for r in others if self.ranks.peers[r].lost]
        if gone:  # the launch broke under the run: no verdict on the trainer from it
            stacks = "\n".join(f"--- rank {t.rank} ({t.status}{': ' if t.error else ''}"
                                f"{t.error}) ---\n{t.detail}" for t in traces)
            raise HarnessError(f"scenario {scenario.name!r}: {'; '.join(gone)}; every other "
                               f"rank ended within its bound. How each ended, with its "
                               f"stack:\n{stacks}")
        files = tuple(FileRecord.from_json(e) for e in replies[0].files or ())
        return Trace(scenario_name=scenario.name, ranks=self._noted(traces, scenario),
                     files=files, duration_s=time.monotonic() - started)

    def _noted(self, traces: tuple[RankTrace, ...], scenario: Scenario
               ) -> tuple[RankTrace, ...]:
        """Ranks on other nodes than rank 0's, with node-local checkpoint folders: they never
        see rank 0's files (``sees_rank0_files``), and when one broke resuming from a file
        rank 0 wrote, every broken rank's error says why."""
        if self.is_shared:
            return traces
        from dataclasses import replace

        elsewhere = {r for r, p in self.ranks.peers.items() if p.node != self.ranks.launch.node}
        traces = tuple(replace(t, sees_rank0_files=False) if t.rank in elsewhere else t
                       for t in traces)
        load_from = _get(scenario, "ckpt.load_from")
        broke = [t.rank for t in traces if t.rank in elsewhere and t.status != "completed"]
        if not load_from or not broke:
            return traces
        note = (f" (rank {broke[0]} runs on node {self.ranks.peers[broke[0]].node}, rank 0 on "
                f"{self.ranks.launch.node}, and the checkpoint folder is node-local: "
                f"ckpt.load_from={load_from} exists only on rank 0's node. Load on rank 0 and "
                "broadcast, or pass --ckpt-root on storage every node sees)")
        return tuple(replace(t, error=t.error + note) if t.status != "completed" else t
                     for t in traces)

    def _collect(self, job: str, job_dir: Path, timeout_s: float,
                 grace: Grace | None) -> list[RunReply]:
        """Every rank's reply within ``timeout_s`` (plus a margin), the remote ranks' records
        written into ``job_dir`` as they come; past the grace the ranks still running are cut."""
        local = self.slots[0]
        pending = set(range(self.size))
        replies: dict[int, RunReply] = {}
        deadline = time.monotonic() + timeout_s + _REPLY_MARGIN_S
        while pending and time.monotonic() < deadline:
            if 0 in pending and local.has_reply():
                pending.discard(0)
                try:
                    replies[0] = as_run_reply(local.receive(0.0))
                except HarnessError as e:
                    replies[0] = RunReply.lost(str(e))
                    self._restart_local()
            for r in sorted(pending - {0}):
                reply = self._drain(r, job, job_dir)
                if reply is None and self.ranks.check_alive(r):
                    reply = RunReply.lost(self.ranks.peers[r].lost)
                if reply is not None:
                    replies[r] = reply
                    pending.discard(r)
            if pending and grace is not None and grace.is_over(
                    dict.fromkeys(pending), ended=bool(replies)):
                self._cut(pending, job)
                grace = None
            time.sleep(0.02)
        for r in pending:
            replies[r] = RunReply.lost(f"rank {r} did not answer within "
                                       f"{timeout_s + _REPLY_MARGIN_S:.0f} s")
            if r == 0:
                self._restart_local()
        return [replies[r] for r in range(self.size)]

    def _drain(self, r: int, job: str, job_dir: Path) -> RunReply | None:
        """Rank ``r``'s messages about ``job``: its records so far, and its reply when it
        came."""
        while (message := self.ranks.channel.take(r)) is not None:
            if message.get("job") != job:
                continue  # a late word about an earlier run, cut short since
            text = message.get("events")
            if isinstance(text, str):
                (job_dir / f"rank{r}.events.jsonl").write_text(text)
            run = message.get("run")
            if isinstance(run, dict):
                return RunReply.from_json(run)
        return None

    def _cut(self, pending: set[int], job: str) -> None:
        for r in pending:
            if r == 0:
                self.slots[0].cut()
            else:
                self.ranks.channel.send(r, {"op": "cut", "job": job})

    def _restart_local(self) -> None:
        log = self.slots[0].log_path.with_suffix(".restarted.log")
        self.slots[0].close()
        self.slots[0] = WorkerProcess(log)
        self.slots[0].bind(self.adapter)

    def close(self) -> None:
        from trainspec.conformance.run.session import close_all

        close_all(self.slots)
        self.slots.clear()


def _get(scenario: Scenario, key: str) -> object:
    try:
        return scenario.get(key)
    except (KeyError, TypeError):
        return None
