"""A world: one worker process per rank, bound to one adapter and reused for every run.

Imports are paid once per worker; each run is a fork. A world speaks the typed requests and
replies of :mod:`trainspec.conformance.run.protocol`, and a run's reply brings the files the run
left. A multi-rank run gets the torchrun environment (``MASTER_ADDR``, ``MASTER_PORT``,
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``); its rendezvous store is hosted here, as torchrun's
agent does (``TORCHELASTIC_USE_AGENT_STORE``), on a port the OS picks, so ranks never race to
bind it and parallel suites never collide. Every run has a bound: a rank past it is reported as
``timeout`` with its stack, and no process outlives :meth:`World.close`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import select
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from trainspec.conformance.run.child import has_ended, set_parent_death_signal
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.launch import nccl_env
from trainspec.conformance.run.protocol import (
    AdapterSpec,
    Describe,
    Description,
    Failure,
    InvalidDescription,
    Property,
    PropertyOutcome,
    PropertyReply,
    Reply,
    Run,
    RunReply,
    as_run_reply,
)
from trainspec.conformance.run.records import RunError
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.session import (
    MIN_FREE_RUN_B,
    WorkerProcess,
    close_all,
    require_disk,
)
from trainspec.conformance.run.trace import (
    RankTrace,
    RunStatus,
    Trace,
    parse_rank,
    read_records,
)
from trainspec.errors import AdapterError, HarnessError

__all__ = ["Grace", "World", "agent_store", "grace_s", "next_job_dir", "rank_trace",
           "store_in_fork"]

_JOBS = itertools.count()  # job folders numbered across every world: they share one scratch

_REPLY_MARGIN_S = 15.0  # the worker bounds its child; this covers the stack dump and the kill
# an adapter's import and self-description get --timeout and this more (Lightning's: ~5 s)
_IMPORT_MARGIN_S = 10.0


def next_job_dir(root: Path, label: str) -> Path:
    """A new job folder under ``root`` for one run (numbered across every world)."""
    job_dir = root / f"job{next(_JOBS)}-{label}"[:120]
    job_dir.mkdir(parents=True)
    return job_dir


def agent_store(addr: str, size: int) -> tuple[object, dict[str, str]]:
    """A store hosted in this process for a run of ``size`` ranks on ``addr`` (torchrun's
    agent store), and the environment every rank joins it by (its own ``RANK`` and
    ``LOCAL_RANK`` aside). The store lives as long as the object returned."""
    # the package first: a thread of this process may be importing it, and importing a
    # submodule meanwhile deadlocks the two imports (a half-made torch)
    import torch  # noqa: F401
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    store = TCPStore(addr, 0, world_size=size, is_master=True, wait_for_workers=False)
    return store, {"MASTER_ADDR": addr, "MASTER_PORT": str(store.port), "WORLD_SIZE": str(size),
                   "TORCHELASTIC_USE_AGENT_STORE": "True"}


@contextlib.contextmanager
def store_in_fork(addr: str, size: int, timeout_s: float = 30.0) -> Iterator[dict[str, str]]:
    """``agent_store`` hosted in a process forked for it, ended with the block: the env the
    ranks join it by. Not hosted here: the store serves from a thread of its own, and a rank
    forked while that thread held a lock would wait on it for good (a rank never joining)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # never returns
        try:
            os.close(r)
            set_parent_death_signal()
            store_env = agent_store(addr, size)  # the store lives while this tuple does
            os.write(w, json.dumps(store_env[1]).encode())
            os.close(w)
            while True:  # until killed: the store lives as long as this process
                signal.pause()
        finally:
            os._exit(1)
    os.close(w)
    try:
        ready = select.select([r], [], [], timeout_s)[0]
        data = os.read(r, 65536) if ready else b""
        if not data:
            raise RuntimeError(f"the process hosting the store of a {size}-rank run did not "
                               f"answer within {timeout_s:g} s (no port on {addr}?)")
        yield json.loads(data)
    finally:
        os.close(r)
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def grace_s(scenario: Scenario) -> float | None:
    """How long the ranks of a multi-rank run may go on once one has ended, or while none
    records anything: the bound on its collectives and 10 s more (a rank that honours the
    bound errors within it; rank 0 finishing its own work, writing its last files, has the
    rest); None for one rank or no bound."""
    if scenario.world_size < 2:
        return None
    try:
        bound = float(scenario.get("ddp.timeout_s"))
    except (KeyError, TypeError, ValueError):
        return None
    return bound + 10.0


class Grace:
    """When the ranks of a multi-rank run still running have nothing more to show: ``grace_s``
    after a rank's run ended (its reply came, or it recorded how its adapter's run ended), or
    once no rank has recorded anything for ``grace_s``, every rank past its set-up (ranks
    waiting on each other in collectives that never complete). Either way the ranks' records
    hold what the checks judge; what is left is how they end."""

    def __init__(self, grace_s: float, job_dir: Path) -> None:
        self.grace_s, self.job_dir = grace_s, job_dir
        self._ended_at: float | None = None
        self._sizes: dict[int, int] = {}
        self._quiet_since = time.monotonic()

    def is_over(self, pending: Mapping[int, object], *, ended: bool) -> bool:
        now = time.monotonic()
        files = {r: self.job_dir / f"rank{r}.events.jsonl" for r in pending}
        if self._ended_at is None and (ended or any(has_ended(f) for f in files.values())):
            self._ended_at = now
        sizes = {r: _size(f) for r, f in files.items()}
        if sizes != self._sizes:
            self._sizes, self._quiet_since = sizes, now
        quiet = all(sizes.values()) and now - self._quiet_since >= self.grace_s
        return quiet or (self._ended_at is not None and now - self._ended_at >= self.grace_s)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class World:
    """``size`` workers, one per rank, bound to one adapter and reused across runs.

    The workers are the first ``size`` of ``slots``, a list the harness shares between the
    worlds of one adapter: runs happen one at a time, so the single-rank world's worker is
    also rank 0 of a multi-rank world, which then starts N - 1 processes rather than N
    (workers of one adapter are interchangeable: each run names its rank). ``spawn`` starts a
    worker (the harness may hand over one it started ahead of need).
    """

    def __init__(self, size: int, root: Path, adapter: AdapterSpec, *, fresh: bool = False,
                 spawn: Callable[[Path], WorkerProcess] | None = None,
                 slots: list[WorkerProcess] | None = None) -> None:
        self.size, self.root, self.adapter, self.fresh = size, root, adapter, fresh
        self._spawn = spawn or self._new_worker
        self.slots: list[WorkerProcess] = [] if slots is None else slots
        self._runs = 0
        self._start()

    @property
    def workers(self) -> list[WorkerProcess]:
        """This world's workers, rank by rank."""
        return self.slots[: self.size]

    def _start(self) -> None:
        logs = self.root / "workers"
        logs.mkdir(parents=True, exist_ok=True)
        stamp = time.monotonic_ns()
        while len(self.slots) < self.size:
            worker = self._spawn(logs / f"w{self.size}-{len(self.slots)}-{stamp}.log")
            worker.bind(self.adapter)
            self.slots.append(worker)

    def _new_worker(self, log_path: Path) -> WorkerProcess:
        return WorkerProcess(log_path)

    def restart(self) -> None:
        """New workers in this world's slots (a world sharing them gets them too)."""
        close_all(self.workers)
        logs, stamp = self.root / "workers", time.monotonic_ns()
        for i in range(self.size):
            self.slots[i] = WorkerProcess(logs / f"w{self.size}-{i}-{stamp}.log")
            self.slots[i].bind(self.adapter)

    def describe(self, timeout_s: float = 60.0) -> Description:
        """What the adapter says of itself (validated in the worker); its import and
        description are bounded by ``timeout_s`` (plus a margin for a framework's import).

        Raises:
            AdapterError: the adapter could not be imported, built or described within the
                bound, or described itself wrongly; the message names the adapter.
        """
        worker = self.workers[0]
        bound_s = timeout_s + _IMPORT_MARGIN_S
        try:
            worker.send(Describe())
            reply = worker.receive(bound_s)
        except HarnessError as e:  # the worker runs only the adapter's code after its start
            raise AdapterError(self._unanswered(worker, bound_s, str(e))) from None
        if isinstance(reply, Failure) and reply.kind == "invalid":
            raise InvalidDescription(reply.error)
        if isinstance(reply, Failure):
            raise AdapterError(f"{self.adapter.factory}: {reply.error}\n{reply.traceback}")
        if not isinstance(reply, Description):
            raise HarnessError(f"{self.adapter.factory}: expected a description, got {reply}")
        return reply

    def _unanswered(self, worker: WorkerProcess, bound_s: float, error: str) -> str:
        factory = self.adapter.factory
        if "did not answer" not in error:  # it ended: os._exit, sys.exit, closed its pipes
            return (f"{factory}: the worker died while importing, building or describing the "
                    f"adapter ({error.partition(';')[0]}); an adapter module must import, and "
                    f"its factory return, without ending the process or closing its file "
                    f"descriptors.\n{worker.log_tail()}")
        stack = worker.dump_stacks()
        self.close()
        return (f"{factory}: importing, building or describing the adapter did not finish "
                f"within {bound_s:g} s (--timeout plus {_IMPORT_MARGIN_S:g} s for imports): "
                f"the module must import, and capabilities() and environment() return, "
                f"within it; where it was stuck is below.\n{stack}")

    def run(self, scenario: Scenario, *, ckpt_root: Path, timeout_s: float,
            preload: Sequence[str] = ()) -> Trace:
        """One run of ``scenario`` on every rank; rank 0's reply lists the files it left."""
        if scenario.world_size != self.size:
            raise HarnessError(f"scenario {scenario.name!r} needs {scenario.world_size} ranks, "
                               f"this world has {self.size}")
        if self.fresh and self._runs:
            self.restart()  # fresh-process mode: nothing of an earlier run can leak into this one
        self._runs += 1
        job_dir = next_job_dir(self.root, scenario.name)
        ckpt_root.mkdir(parents=True, exist_ok=True)
        for worker in self.workers:  # every rank warm before any starts: one rendezvous
            worker.wait_settled()
        started = time.monotonic()
        store, env = self._rendezvous(scenario)
        try:
            for rank, worker in enumerate(self.workers):
                rank_env = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)} if env else {}
                worker.send(Run(scenario=scenario.to_json(), rank=rank, job_dir=str(job_dir),
                                ckpt_root=str(ckpt_root), timeout_s=timeout_s, env=rank_env,
                                # rank 0 writes the checkpoints (a rank > 0 that writes is
                                # DIST-4's finding, from the write watch): when its child has
                                # ended, its worker describes what the run left
                                preload=tuple(preload), describe_files=rank == 0))
            # rank 0's worker then describes the files, bounded by timeout_s too
            grace_for = grace_s(scenario)
            replies = self._collect(2 * timeout_s,
                                    None if grace_for is None else Grace(grace_for, job_dir))
        finally:
            del store
        duration = time.monotonic() - started
        if any(r.status != "exited" or r.code != 0 for r in replies):
            require_disk(self.root, MIN_FREE_RUN_B, during=scenario.name)
        ranks = tuple(rank_trace(rank, job_dir, reply) for rank, reply in
                      enumerate(replies))
        return Trace(scenario_name=scenario.name, ranks=ranks, files=self._files(replies[0]),
                     duration_s=duration)

    def _rendezvous(self, scenario: Scenario) -> tuple[object, dict[str, str]]:
        """A store hosted here for a multi-rank run (torchrun's agent store), and its env."""
        if self.size == 1:
            return None, {}
        store, env = agent_store("127.0.0.1", self.size)
        bound = grace_s(scenario)
        return store, {**env, **nccl_env(60.0 if bound is None else bound - 10.0, os.environ)}

    def _files(self, reply: RunReply) -> tuple[FileRecord, ...]:
        if reply.files_error:
            raise HarnessError(f"{self.adapter.factory}: describing the checkpoint files "
                               f"failed: {reply.files_error}")
        return tuple(FileRecord.from_json(entry) for entry in reply.files or ())

    def run_property(self, name: str, *, runner: str, max_examples: int,
                     timeout_s: float, run_timeout_s: float = 0.0) -> PropertyOutcome:
        """A hypothesis property run next to the trainer in one bounded child (one rank)."""
        # the folder is named by the property's name, made safe and short (a replay's name
        # holds a whole example as JSON; an engine pass's, the path of its memo)
        job_dir = next_job_dir(self.root, "property-" + re.sub(r"[^\w.=-]+", "-", name)[:60])
        worker = self.workers[0]
        worker.send(Property(name=name, runner=runner, max_examples=max_examples,
                             job_dir=str(job_dir), timeout_s=timeout_s,
                             run_timeout_s=run_timeout_s))
        reply = self._collect_one(worker, timeout_s)
        if isinstance(reply, PropertyReply) and reply.result is not None:
            return PropertyOutcome.from_json(reply.result)
        run = reply.run if isinstance(reply, PropertyReply) else as_run_reply(reply)
        log = job_dir / "rank0.log"
        tail = log.read_text(errors="replace")[-6000:] if log.exists() else ""
        return PropertyOutcome(verdict="broke", status=run.status, detail=run.stack or tail,
                               error=run.error or _property_ended(run, tail))

    def _collect_one(self, worker: WorkerProcess, timeout_s: float) -> Reply:
        try:
            return worker.receive(timeout_s + _REPLY_MARGIN_S)
        except HarnessError as e:
            self.restart()
            return RunReply.lost(str(e))

    def _collect(self, timeout_s: float, grace: Grace | None = None) -> list[RunReply]:
        """Every rank's reply, as each comes, within ``timeout_s`` (plus a margin); past its
        ``grace`` (:class:`Grace`) the ranks still running are cut short, each as a run past
        its bound."""
        bound_s = timeout_s + _REPLY_MARGIN_S
        pending = dict(enumerate(self.workers))
        replies: dict[int, RunReply] = {}
        broken: list[str] = []  # a worker died or stopped answering: the world restarts
        deadline = time.monotonic() + bound_s
        while pending and time.monotonic() < deadline:
            here = [rank for rank, worker in pending.items() if worker.has_reply()]
            if not here:
                until = min(deadline, time.monotonic() + 1.0) - time.monotonic()
                select.select([w.fileno() for w in pending.values()], [], [], max(until, 0.0))
            for rank in here:
                try:
                    replies[rank] = as_run_reply(pending.pop(rank).receive(0.0))
                except HarnessError as e:
                    broken.append(str(e))
                    replies[rank] = RunReply.lost(str(e))
            if pending and grace is not None and grace.is_over(pending, ended=bool(replies)):
                for worker in pending.values():  # their replies come as from a bound
                    worker.cut()
                grace = None
        for rank, worker in pending.items():
            broken.append(f"worker {worker.proc.pid} did not answer within {bound_s:.0f} s; "
                          f"its log: {worker.log_tail()}")
            replies[rank] = RunReply.lost(broken[-1])
        if broken:
            self.restart()
        return [replies[rank] for rank in range(len(self.workers))]

    def close(self) -> None:
        """Stop every worker of the slots (a world closes with the others of its adapter)."""
        close_all(self.slots)
        self.slots.clear()


def rank_trace(rank: int, job_dir: Path, reply: RunReply) -> RankTrace:
    """Rank ``rank``'s trace from its records in ``job_dir`` and how its worker says it ended."""
    records = read_records(job_dir / f"rank{rank}.events.jsonl")
    kind = reply.status
    status: RunStatus
    error = detail = ""
    errors = [e for e in records if isinstance(e, RunError)]
    if kind == "timeout":
        status, error = "timeout", reply.error or f"still running after {reply.timeout_s} s"
        detail = reply.stack
    elif kind == "killed":
        status, error = "killed", f"killed by {signal.Signals(reply.signal or 0).name}"
    elif kind == "exited" and reply.code == 0:
        status = "completed"
    elif kind == "exited" and errors:
        status = "raised"
        error = f"{errors[-1].type}: {errors[-1].message}".splitlines()[0][:300]
        detail = errors[-1].traceback
    elif kind == "exited":
        status, error = "exited", f"exited with status {reply.code}"
    else:
        status, error = "lost", reply.error
        detail = reply.traceback
    return parse_rank(rank, records, status, error, detail)


def _property_ended(run: RunReply, log_tail: str) -> str:
    """How a property run's process ended without a result: its status, and the error its
    log ends with (a traceback's last line), so the report names the cause."""
    how = {"exited": f"exited with status {run.code}",
           "killed": f"was killed by signal {run.signal}"}.get(run.status, run.status)
    lines = [x for x in log_tail.splitlines() if x.strip()]
    raised = lines[-1].strip() if "Traceback (most recent call last)" in log_tail and lines \
        else ""
    return f"the property run {how}" + (f": {raised}" if raised else "")
