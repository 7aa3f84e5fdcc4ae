"""The child side of a run: the forked process that runs the adapter next to the trainer.

It records what the adapter reports (one JSON line per record, written with ``os.write`` so a
kill loses nothing recorded), watches every write into the checkpoint folder (DIST-4, DBG-3,
CKPT-2's torn write), interrupts the run at the scenario's crash point, and classifies how the
adapter's run ended (an exception in the suite or the adapter is ours, not the trainer's).
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainspec.conformance.run.profiling import note_run_time

if TYPE_CHECKING:
    from trainspec.conformance.run.records import Record
    from trainspec.conformance.run.scenario import CrashWhere, Scenario

__all__ = ["ChildContext", "become_subreaper", "child_main", "children", "has_ended",
           "set_parent_death_signal", "sweep_children"]


def _suite_dirs() -> tuple[str, ...]:
    """The real folders of the suite and its adapters (symlinks resolved)."""
    suite = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # conformance/
    return (suite + os.sep, os.path.join(os.path.dirname(suite), "adapters") + os.sep)


class ChildContext:
    """The :class:`~trainspec.conformance.run.adapter.RunContext` of a run in a forked child."""

    def __init__(self, *, rank: int, world_size: int, ckpt_root: Path, events_fd: int,
                 scenario: Scenario, job_dir: Path | None = None) -> None:
        self._rank, self._world_size, self._ckpt_root = rank, world_size, ckpt_root
        self._fd = events_fd
        self._scenario = scenario
        self._job_dir = job_dir  # where every rank of the run writes its records
        self.fired: set[tuple[str, int]] = set()  # the crash points already interrupted at
        self.began = time.monotonic()  # the run's start (the run-time benchmark)
        self._noted = False
        from trainspec.conformance.run.writewatch import WriteWatch

        self.writes = WriteWatch(ckpt_root, rank, scenario.crash, self.record)

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def ckpt_root(self) -> Path:
        return self._ckpt_root

    def record(self, record: Record) -> None:
        from trainspec.conformance.run.records import TrainEnd, TrainStart, to_json
        from trainspec.errors import AdapterError

        self.writes.look()  # a write made since the last thing the suite saw
        if isinstance(record, TrainStart):
            self._boundary(record)

        try:
            line = json.dumps(to_json(record)) + "\n"
        except (KeyError, TypeError, ValueError, RecursionError) as e:
            # raised here, in the suite's file: the run's error is the adapter's, not the
            # trainer's (an ``error`` verdict, never ``fail``)
            raise AdapterError(
                f"RunContext.record: {type(record).__name__} is not a record that travels as "
                f"JSON ({type(e).__name__}: {str(e)[:200]}). Record the types of "
                "trainspec.conformance.run.records, with tensors, numbers and strings.") from e
        # os.write on an fd opened before the run: no open() call for the audit hook to see,
        # and a line is on disk before the next statement, so a kill loses nothing recorded
        os.write(self._fd, line.encode())
        if isinstance(record, TrainEnd):
            self._boundary(record)

    def crash_point(self, where: CrashWhere, epoch: int) -> None:
        from trainspec.conformance.run.probe import crash_matches, interrupt
        from trainspec.conformance.run.records import Crash

        if where == "train_start":
            self.writes.enter_epoch(epoch)
        else:
            self.writes.look()
        crash = self._scenario.crash
        if crash is not None and crash_matches(self._scenario, where, epoch, self._rank) \
                and (where, epoch) not in self.fired:
            self.fired.add((where, epoch))
            self.record(Crash(where=where, epoch=epoch, how=crash.how, t=time.time()))
            self.note_time()  # a kill next: the run's time ends here
            several = self._world_size > 1 and self._job_dir is not None
            interrupt(crash.how, crash.stall_s, until=self.peers_ended if several else None)

    def note_time(self) -> None:
        """The run's time for the run-time benchmark, once (a crash point, then the end)."""
        if not self._noted:
            self._noted = True
            note_run_time("run", self._rank, self.began)

    def peers_ended(self) -> bool:
        """Whether every other rank has recorded how its run ended (raised, exited, done).

        A stall ends then rather than at its full length: what it is there to show, how the
        other ranks end while this one stops answering, is recorded, and no later moment can
        change it. While any rank runs on, the stall goes on.
        """
        assert self._job_dir is not None
        return all(has_ended(self._job_dir / f"rank{r}.events.jsonl")
                   for r in range(self._world_size) if r != self._rank)

    def slows_writes(self) -> bool:
        """Whether this rank's checkpoint writes are slowed down (the scenario's
        ``slow_writes_s``): on rank 0, in every epoch but the last, whose files no later epoch
        start reads (DIST-4 compares each epoch's start with the previous epoch's file)."""
        last = self._scenario.get("num_epochs")
        started = self.writes.epoch
        final = isinstance(last, int) and started is not None and started >= last - 1
        return self._rank == 0 and not final

    def _boundary(self, record: Record) -> None:
        """The epoch boundaries the suite sees in the records themselves: an adapter that
        offers no ``train_start`` or ``train_end`` crash point is interrupted there all the
        same (before its TrainStart is written, after its TrainEnd)."""
        from trainspec.conformance.run.records import TrainEnd, TrainStart

        if isinstance(record, TrainStart):
            self.crash_point("train_start", record.epoch)
        elif isinstance(record, TrainEnd):
            self.crash_point("train_end", record.epoch)


_ENDINGS = (b'"ev": "error"', b'"ev": "exit"', b'"ev": "done"')


def has_ended(events: Path) -> bool:
    """Whether a rank's records file ends with how its adapter's run ended (its last whole
    line): raised, exited or done, whether or not its process has ended yet."""
    try:
        with events.open("rb") as f:
            f.seek(max(f.seek(0, os.SEEK_END) - 65536, 0))
            tail = f.read()
    except OSError:
        return False
    last = tail[: tail.rfind(b"\n")].rpartition(b"\n")[2]
    return last.startswith(b"{") and any(e in last[:40] for e in _ENDINGS)


def set_parent_death_signal() -> None:
    """Linux: the child dies with its worker, so no run outlives the harness."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def become_subreaper() -> bool:
    """Linux: orphaned descendants (a ``setsid`` daemon, a double fork) are re-parented to this
    process instead of init, so :func:`sweep_children` can end them. False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(36, 1, 0, 0, 0)) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def children() -> set[int]:
    """The process IDs whose parent is this process (from /proc; empty where it is missing)."""
    me, out = os.getpid(), set()
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    # "pid (comm) state ppid ...": comm may hold spaces and parentheses
                    fields = f.read().rpartition(b")")[2].split()
                if int(fields[1]) == me:
                    out.add(int(entry.name))
    return out


def sweep_children(keep: set[int] | frozenset[int] = frozenset()) -> int:
    """Kill every child of this process but ``keep`` (with its group), and reap them; repeat
    while killing re-parents more (a subreaper inherits its orphans' children). The count."""
    killed = 0
    for _ in range(10):
        found = children() - set(keep)
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed += 1
        time.sleep(0.05)
        for pid in found:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)
    return killed


def _error_is_ours(tb: traceback.StackSummary, adapter: object) -> bool:
    """Whether the innermost frame lies in the suite, its adapters, or the target's adapter:
    the harness or the adapter broke, not the trainer it drives."""
    if not tb:
        return False
    where = os.path.realpath(tb[-1].filename)
    module = sys.modules.get(type(adapter).__module__)
    adapter_file = getattr(module, "__file__", None)
    if adapter_file and where == os.path.realpath(adapter_file):
        return True
    return any(where.startswith(d) for d in _suite_dirs())


def _child_setup(req: dict[str, Any]) -> None:
    """Point the child's output at its log, arm the stack dump, take the run's environment."""
    job_dir = Path(req["job_dir"])
    log = os.open(job_dir / f"rank{req['rank']}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.environ.update(req.get("env", {}))


def child_main(req: dict[str, Any], adapter: Any) -> int:
    _child_setup(req)
    if req["op"] == "property":
        return _property_child(req, adapter)
    return _run_child(req, adapter)


def _property_child(req: dict[str, Any], adapter: Any) -> int:
    from trainspec.conformance.run.adapter import load_object

    # the judging code is named by the request (checks/ sits above run/ and is never imported
    # here by name): ``runner(property_name, adapter, max_examples=...) -> JSON-able dict``
    runner = load_object(req["runner"])
    from trainspec.conformance.run import memory

    memory.RUN_BOUND_S = float(req.get("run_timeout_s") or 0.0) or None  # each forked run's
    memory.OWN_CODE = lambda tb: _error_is_ours(tb, adapter)
    memory.DIE_WITH_PARENT = set_parent_death_signal
    began = time.monotonic()
    result = runner(req["property"], adapter, max_examples=int(req["max_examples"]))
    note_run_time("property", int(req["rank"]), began)
    out = Path(req["job_dir"]) / "property.json"
    out.write_text(json.dumps(result))
    return 0


def _run_child(req: dict[str, Any], adapter: Any) -> int:
    from trainspec.conformance.run.scenario import Scenario

    job_dir = Path(req["job_dir"])
    scenario = Scenario.from_json(req["scenario"])
    events_fd = os.open(job_dir / f"rank{req['rank']}.events.jsonl",
                        os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    ctx = ChildContext(rank=req["rank"], world_size=scenario.world_size,
                       ckpt_root=Path(req["ckpt_root"]), events_fd=events_fd, scenario=scenario,
                       job_dir=job_dir)
    ctx.writes.install(scenario.task.slow_writes_s, ctx.slows_writes)
    ctx.began = time.monotonic()
    try:
        return _run_adapter(adapter, scenario, ctx)
    finally:
        ctx.note_time()


def _launch_group(scenario: Any) -> None:
    """The default process group, made before the trainer is built when the scenario asks the
    launch to make it (``task.group == "launch"``), from the environment every rank has
    (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``). It is not destroyed: the run
    ends with its process (``os._exit``), and a trainer may destroy it itself."""
    if scenario.world_size == 1 or scenario.task.group != "launch":
        return
    from datetime import timedelta

    import torch.distributed as dist

    backend = "nccl" if scenario.get("ddp.backend") == "nccl" else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=float(
        scenario.get("ddp.timeout_s"))))


def _run_adapter(adapter: Any, scenario: Any, ctx: ChildContext) -> int:
    from trainspec.conformance.run.reading import trusting
    from trainspec.conformance.run.records import Done, RunError, RunExit

    try:
        with trusting(ctx.writes.has_written):  # the trainer's own files: read its own way
            _launch_group(scenario)
            adapter.run(scenario, ctx)
    except SystemExit as e:
        # sys.exit() and sys.exit(None) mean status 0; a message means status 1 (as Python's)
        code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
        message = "" if e.code is None or isinstance(e.code, int) else str(e.code)[:2000]
        ctx.record(RunExit(code=code, message=message, t=time.time()))
        return code
    except BaseException as e:
        tb = traceback.extract_tb(e.__traceback__)
        ctx.record(RunError(type=type(e).__name__, message=str(e)[:2000],
                            traceback="".join(traceback.format_exception(e))[-8000:],
                            ours=_error_is_ours(tb, adapter), t=time.time()))
        return 1
    ctx.writes.look()  # a write the run ended on
    ctx.record(Done(t=time.time()))
    return 0
