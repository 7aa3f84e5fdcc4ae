"""A run context that keeps a run's records in memory (property runs and adapter tests), and a
run in a process forked for it (each property example)."""

from __future__ import annotations

import functools
import json
import os
import select
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainspec.conformance.run.records import Record, from_json, to_json
from trainspec.conformance.run.scenario import CrashWhere, Scenario

__all__ = ["ForkedRun", "MemoryContext", "call_in_fork", "run_in_fork", "run_ranks_in_fork"]


class MemoryContext:
    """A RunContext recording in memory; no crash points (properties never crash)."""

    def __init__(self, root: Path, *, rank: int = 0, world_size: int = 1) -> None:
        self.records: list[Record] = []
        self._root = root
        self._rank, self._world_size = rank, world_size

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def ckpt_root(self) -> Path:
        return self._root

    def record(self, record: Record) -> None:
        # the same JSON round trip as a real run, so NaN, tensors and state dicts (string
        # keys) look alike to the checks
        self.records.append(from_json(json.loads(json.dumps(to_json(record)))))

    def crash_point(self, where: CrashWhere, epoch: int) -> None:
        return None


@dataclass(frozen=True, slots=True)
class ForkedRun:
    """A run made in a process of its own: its records, and how it raised (None: it
    returned)."""

    records: list[Record]
    error: str | None = None
    stopped: bool = False  # ended by the ``stop`` exception run_in_fork was given
    ours: bool = False  # the error was raised in the adapter's own code (or the suite's)
    timed_out: bool = False  # still running at the bound: killed
    traceback: str = ""


# set by the worker child serving a property: the bound on each forked run, and whether a
# traceback's innermost frame is the adapter's or the suite's own code
RUN_BOUND_S: float | None = None
def _nobodys(tb: traceback.StackSummary) -> bool:
    return False


OWN_CODE: Callable[[traceback.StackSummary], bool] = _nobodys


def _stays() -> None:
    return None


DIE_WITH_PARENT: Callable[[], None] = _stays


def run_in_fork(adapter: Any, scenario: Scenario, root: Path, *,
                context: Callable[[Path], MemoryContext] = MemoryContext,
                stop: type[BaseException] | None = None) -> ForkedRun:
    """``adapter.run(scenario, ...)`` in a process forked for it, recording in memory: no run
    sees another's process state (a trainer's module globals, a framework's registries keyed
    by time, patched functions, the working folder). Its records come back as JSON lines over
    a pipe; files under ``root`` are the run's own, read the trainer's way. ``context`` makes
    the run's context; ``stop``, an exception the context raises to end the run (an
    interruption), ends it as ``stopped``."""
    produce = _producer(adapter, scenario, root, lambda: context(root), stop, {})
    return _forked_run(_in_forks([produce])[0])


def run_ranks_in_fork(adapter: Any, scenario: Scenario, root: Path,
                      env: Callable[[int], dict[str, str]],
                      context: Callable[[Path, int], MemoryContext],
                      grace_s: float | None = None) -> list[ForkedRun]:
    """Every rank of ``scenario``'s world (``scenario.world_size`` of them) run at once, each in
    a process forked for it with ``env(rank)`` added to its environment (the launcher's
    ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), each recording in memory, all
    in one folder ``root`` as the ranks of one job share their checkpoint folder. Bounded as a
    single run is: a rank still running at :data:`RUN_BOUND_S`, or ``grace_s`` after another
    rank's run ended, is killed (``timed_out``) and the others keep what they recorded."""
    produces = [_producer(adapter, scenario, root, functools.partial(context, root, rank), None,
                          env(rank)) for rank in range(scenario.world_size)]
    return [_forked_run(data) for data in _in_forks(produces, grace_s)]


def _producer(adapter: Any, scenario: Scenario, root: Path,
              make_context: Callable[[], MemoryContext], stop: type[BaseException] | None,
              env: dict[str, str]) -> Callable[[], bytes]:
    """The body of a forked run: the run, then its records and outcome as JSON lines."""
    from trainspec.conformance.run.reading import error_line, trusting

    def produce() -> bytes:
        os.environ.update(env)
        ctx = make_context()
        error, stopped, ours, text = None, False, False, ""
        inside = str(root.resolve()) + os.sep
        try:
            with trusting(lambda p: str(Path(p).resolve()).startswith(inside)):
                adapter.run(scenario, ctx)
        except Exception as e:  # the trainer's, or the adapter's own: the run's outcome
            error = error_line(e)
            tb = traceback.extract_tb(e.__traceback__)
            ours, text = OWN_CODE(tb), "".join(traceback.format_exception(e))[-6000:]
        except BaseException as e:
            if stop is None or not isinstance(e, stop):
                raise
            stopped = True
        out = [json.dumps(to_json(x)) for x in ctx.records]
        out.append(json.dumps({"raised": error, "stopped": stopped, "ours": ours,
                               "traceback": text}))
        return ("\n".join(out) + "\n").encode()

    return produce


def _forked_run(data: bytes | None) -> ForkedRun:
    if data is None:
        return ForkedRun(records=[], error=f"still running after {RUN_BOUND_S:g} s",
                         timed_out=True)
    lines: list[dict[str, Any]] = [json.loads(x) for x in data.decode().splitlines() if x]
    if not lines or set(lines[-1]) != {"raised", "stopped", "ours", "traceback"}:
        return ForkedRun(records=[from_json(x) for x in lines],
                         error="the run's process died before it ended (a signal, os._exit)")
    raised = lines[-1]["raised"]
    return ForkedRun(records=[from_json(x) for x in lines[:-1]],
                     error=None if raised is None else str(raised),
                     stopped=lines[-1]["stopped"] is True, ours=lines[-1]["ours"] is True,
                     traceback=str(lines[-1]["traceback"]))


def call_in_fork(func: Callable[[], object]) -> tuple[object, str | None, bool]:
    """``func()`` (its result JSON-able) in a process forked for it, bounded by
    :data:`RUN_BOUND_S`: (its result, the error it raised or None, whether it was still
    running at the bound and killed)."""
    from trainspec.conformance.run.reading import error_line

    def produce() -> bytes:
        try:
            out = {"result": func(), "error": None}
        except Exception as e:
            out = {"result": None, "error": error_line(e)}
        return json.dumps(out).encode()

    data = _in_forks([produce])[0]
    if data is None:
        return None, f"still running after {RUN_BOUND_S:g} s", True
    try:
        got = json.loads(data.decode())
    except ValueError:
        return None, "its process died before it returned (a signal, os._exit)", False
    return got["result"], got["error"], False


def _in_forks(produces: list[Callable[[], bytes]], grace_s: float | None = None
              ) -> list[bytes | None]:
    """What each ``produce()`` returns, each made in a process forked for it (all at once)
    that ends with the process that forked it (a worker's child killed mid-run leaves no run
    behind it: the hook the worker child serving a property set in DIE_WITH_PARENT); None
    for one still running at :data:`RUN_BOUND_S` (then it is killed). A child that died
    returns what it wrote before (nothing)."""
    children: list[tuple[int, int]] = []  # (read end, pid)
    try:
        for produce in produces:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # never returns
                try:
                    os.close(r)
                    for other, _ in children:  # the earlier ranks' pipes are theirs
                        os.close(other)
                    DIE_WITH_PARENT()
                    view = memoryview(produce())
                    while view:
                        view = view[os.write(w, view):]
                finally:
                    os._exit(0)
            os.close(w)  # before the next fork: only this child holds the write end
            children.append((r, pid))
    except BaseException:
        for r, pid in children:
            os.kill(pid, signal.SIGKILL)
            os.close(r)
            os.waitpid(pid, 0)
        raise
    return _read_all_within(children, RUN_BOUND_S, grace_s)


def _read_all_within(children: list[tuple[int, int]], bound_s: float | None,
                     grace_s: float | None = None) -> list[bytes | None]:
    """Everything each forked child writes to its pipe until it ends; None for one still
    running at ``bound_s``, or ``grace_s`` after another child ended (then it is killed)."""
    deadline = None if bound_s is None else time.monotonic() + bound_s
    chunks: dict[int, list[bytes]] = {r: [] for r, _ in children}
    pids = dict(children)
    reading = set(pids)
    late: set[int] = set()
    try:
        while reading:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ready, _, _ = select.select(list(reading), [], [], wait)
            if not ready:
                for r in reading:
                    os.kill(pids[r], signal.SIGKILL)
                late |= reading
                break
            for r in ready:
                chunk = os.read(r, 1 << 16)
                if chunk:
                    chunks[r].append(chunk)
                else:
                    reading.discard(r)
                    if grace_s is not None and reading:  # the others end within the grace
                        until = time.monotonic() + grace_s
                        deadline = until if deadline is None else min(deadline, until)
    finally:
        for r, pid in children:
            os.close(r)
            os.waitpid(pid, 0)
    return [None if r in late else b"".join(chunks[r]) for r, _ in children]
