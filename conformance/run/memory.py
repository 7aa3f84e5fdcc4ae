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

from trainspec.conformance.run.profiling import dump_forked
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
    timed_out: bool = False  # still running at the bound, or cut short: killed
    traceback: str = ""
    cut: bool = False  # cut short before the bound (the others had ended, or departed)


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
    return _forked_run(*_in_forks([produce])[0])


# a settled run's ranks still running this long after it settled are cut short
SETTLED_GRACE_S = 1.0
# how a rank cut short because no rank recorded anything for a while reads: ``still running
# {STALLED} 20 s``
STALLED = "with no rank recording anything for"


def run_ranks_in_fork(adapter: Any, scenario: Scenario, root: Path,
                      env: Callable[[int], dict[str, str]],
                      context: Callable[[Path, int], MemoryContext],
                      grace_s: float | None = None,
                      settled: Callable[[list[list[dict[str, Any]]]], bool] | None = None,
                      stall_s: float | None = None,
                      shown: Callable[[list[list[dict[str, Any]]], list[bool]], bool] | None
                      = None) -> list[ForkedRun]:
    """Every rank of ``scenario``'s world (``scenario.world_size`` of them) run at once, each in
    a process forked for it with ``env(rank)`` added to its environment (the launcher's
    ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), each recording in memory, all
    in one folder ``root`` as the ranks of one job share their checkpoint folder. Each rank's
    records come back as it makes them. Bounded as a single run is: a rank still running at
    :data:`RUN_BOUND_S` is killed (``timed_out``); one still running ``grace_s`` after another
    rank's run ended, or :data:`SETTLED_GRACE_S` after ``settled(records)`` (each rank's
    records so far, as JSON) first held (at once where ``shown(records, running)`` then
    holds), is cut short (``timed_out`` and ``cut``), and so is
    every rank once none has recorded anything for ``stall_s`` (ranks that wait on each other
    in a collective whose timeout the trainer does not honour). A killed rank keeps what it
    recorded."""
    produces = [_producer(adapter, scenario, root, functools.partial(context, root, rank), None,
                          env(rank)) for rank in range(scenario.world_size)]
    return [_forked_run(data, ended)
            for data, ended in _in_forks(produces, grace_s, settled, stall_s, shown)]


def _producer(adapter: Any, scenario: Scenario, root: Path,
              make_context: Callable[[], MemoryContext], stop: type[BaseException] | None,
              env: dict[str, str]) -> Callable[[], bytes]:
    """The body of a forked run: the run, each record sent as a JSON line as it comes, then
    the run's outcome as the last line."""
    from trainspec.conformance.run.reading import error_line, trusting

    def produce() -> bytes:
        os.environ.update(env)
        ctx = make_context()
        keep = ctx.record

        def record(record: Record) -> None:  # each record kept is sent as it comes
            n = len(ctx.records)
            try:
                keep(record)  # a context that interrupts the run raises here
            finally:
                for kept in ctx.records[n:]:
                    _send((json.dumps(to_json(kept)) + "\n").encode())

        ctx.record = record  # type: ignore[method-assign]
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
        return (json.dumps({"raised": error, "stopped": stopped, "ours": ours,
                            "traceback": text}) + "\n").encode()

    return produce


def _forked_run(data: bytes, ended: str) -> ForkedRun:
    lines = _lines(data)
    if ended != "ended":  # killed: what it recorded before (complete lines only)
        return ForkedRun(records=[from_json(x) for x in lines if "ev" in x],
                         error=f"still running after {RUN_BOUND_S:g} s" if ended == "late"
                         else f"still running {ended}", timed_out=True, cut=ended != "late")
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

    data, ended = _in_forks([produce])[0]
    if ended != "ended":
        return None, f"still running after {RUN_BOUND_S:g} s", True
    try:
        got = json.loads(data.decode())
    except ValueError:
        return None, "its process died before it returned (a signal, os._exit)", False
    return got["result"], got["error"], False


def _lines(data: bytes) -> list[dict[str, Any]]:
    """The complete JSON lines of a forked child's output (a killed one's last may be cut)."""
    return [json.loads(x) for x in data.decode(errors="replace").split("\n")[:-1] if x]


# in a forked child: the write end of its pipe, for what it sends before it returns
_PIPE: list[int] = []


def _send(data: bytes) -> None:
    view = memoryview(data)
    while view and _PIPE:
        view = view[os.write(_PIPE[0], view):]


def _in_forks(produces: list[Callable[[], bytes]], grace_s: float | None = None,
              settled: Callable[[list[list[dict[str, Any]]]], bool] | None = None,
              stall_s: float | None = None,
              shown: Callable[[list[list[dict[str, Any]]], list[bool]], bool] | None = None
              ) -> list[tuple[bytes, str]]:
    """What each ``produce()`` sends and returns, each made in a process forked for it (all
    at once) that ends with the process that forked it (a worker's child killed mid-run
    leaves no run behind it: the hook the worker child serving a property set in
    DIE_WITH_PARENT), and how it ended: ``"ended"``; ``"late"``, still running at
    :data:`RUN_BOUND_S`; or cut short, in words (``grace_s`` after another ended, or once the
    children's JSON lines ``settled``, or ``stall_s`` after any child last sent anything):
    each killed one keeps what it sent before. A child
    that died returns what it wrote before."""
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
                    _PIPE[:] = [w]
                    _send(produce())
                finally:
                    dump_forked()
                    os._exit(0)
            os.close(w)  # before the next fork: only this child holds the write end
            children.append((r, pid))
    except BaseException:
        for r, pid in children:
            os.kill(pid, signal.SIGKILL)
            os.close(r)
            os.waitpid(pid, 0)
        raise
    return _read_all_within(children, RUN_BOUND_S, _Cuts(grace_s, settled, stall_s, shown))


Lines = list[list[dict[str, Any]]]  # each child's JSON lines so far


@dataclass(slots=True)
class _Cuts:
    """When the forked children still running are cut short, and why (see :func:`_in_forks`):
    ``grace_s`` after another ended, :data:`SETTLED_GRACE_S` after ``settled(lines)`` first
    held (at once where ``shown(lines, running)`` then holds: every child still running has
    shown what the cut waits for), or ``stall_s`` after any child last sent anything."""

    grace_s: float | None = None
    settled: Callable[[Lines], bool] | None = None
    stall_s: float | None = None
    shown: Callable[[Lines, list[bool]], bool] | None = None
    at: float | None = None
    why: str = ""
    stall_at: float | None = None
    is_settled: bool = False

    def cut(self, at: float, reason: str) -> None:
        if self.at is None or at < self.at:
            self.at, self.why = at, reason

    def heard(self, lines: Lines | None) -> None:
        """A child sent something; ``lines``: every child's lines, where one was completed."""
        now = time.monotonic()
        if self.stall_s is not None:
            self.stall_at = now + self.stall_s
        if lines is not None and not self.is_settled and self.settled is not None \
                and self.settled(lines):
            self.is_settled = True
            self.cut(now + SETTLED_GRACE_S,
                     f"{SETTLED_GRACE_S:g} s after the run's verdict was settled")

    def one_ended(self, others_running: bool) -> None:
        if self.grace_s is not None and others_running:  # the others end within the grace
            self.cut(time.monotonic() + self.grace_s,
                     f"{self.grace_s:g} s after another rank's run ended")

    def look(self, lines: Lines, running: list[bool]) -> None:
        if self.is_settled and self.shown is not None and any(running) and \
                self.shown(lines, running):
            self.shown = None
            self.cut(time.monotonic(), "once every rank had shown what it decided where the "
                     "ranks parted")

    def reason(self, deadline: float | None, first: float) -> str:
        return "late" if first == deadline else self.why if first == self.at else (
            f"{STALLED} {self.stall_s:g} s")


def _read_all_within(children: list[tuple[int, int]], bound_s: float | None,
                     cuts: _Cuts | None = None) -> list[tuple[bytes, str]]:
    """Everything each forked child writes to its pipe until it ends, and how it ended (see
    :func:`_in_forks`): one still running at ``bound_s`` is killed (``"late"``), and so is one
    still running when ``cuts`` says (cut short)."""
    cuts = cuts or _Cuts()
    deadline = None if bound_s is None else time.monotonic() + bound_s
    cuts.heard(None)
    chunks: dict[int, list[bytes]] = {r: [] for r, _ in children}
    parsed: dict[int, list[dict[str, Any]]] = {r: [] for r, _ in children}
    pending: dict[int, bytes] = {r: b"" for r, _ in children}
    pids = dict(children)
    reading = set(pids)
    ended: dict[int, str] = {}
    try:
        while reading:
            limits = [t for t in (deadline, cuts.at, cuts.stall_at) if t is not None]
            wait = max(min(limits) - time.monotonic(), 0.0) if limits else None
            ready, _, _ = select.select(list(reading), [], [], wait)
            if not ready:
                for r in reading:
                    os.kill(pids[r], signal.SIGKILL)
                    ended[r] = cuts.reason(deadline, min(limits))
                break
            for r in ready:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    reading.discard(r)
                    ended[r] = "ended"
                    cuts.one_ended(bool(reading))
                    continue
                chunks[r].append(chunk)
                complete: list[bytes] = []
                if cuts.settled is not None:  # lines are read only where they may settle it
                    *complete, pending[r] = (pending[r] + chunk).split(b"\n")
                    parsed[r] += [json.loads(x) for x in complete if x]
                cuts.heard([parsed[c] for c, _ in children] if complete else None)
            if cuts.is_settled:
                cuts.look([parsed[c] for c, _ in children], [c in reading for c, _ in children])
    finally:
        for r, pid in children:
            os.close(r)
            os.waitpid(pid, 0)
    return [(b"".join(chunks[r]), ended.get(r, "ended")) for r, _ in children]
