"""A run context that keeps a run's records in memory (property runs and adapter tests), and a
run in a process forked for it (each property example)."""

from __future__ import annotations

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

__all__ = ["ForkedRun", "MemoryContext", "call_in_fork", "run_in_fork"]


class MemoryContext:
    """A RunContext recording in memory; no crash points (properties never crash)."""

    def __init__(self, root: Path) -> None:
        self.records: list[Record] = []
        self._root = root

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

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
    from trainspec.conformance.run.reading import error_line, trusting

    def produce() -> bytes:
        ctx = context(root)
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

    data = _in_fork(produce)
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

    data = _in_fork(produce)
    if data is None:
        return None, f"still running after {RUN_BOUND_S:g} s", True
    try:
        got = json.loads(data.decode())
    except ValueError:
        return None, "its process died before it returned (a signal, os._exit)", False
    return got["result"], got["error"], False


def _in_fork(produce: Callable[[], bytes]) -> bytes | None:
    """What ``produce()`` returns, made in a process forked for it that ends with the
    process that forked it (a worker's child killed mid-run leaves no run behind it: the hook
    the worker child serving a property set in DIE_WITH_PARENT); None when it was still
    running at :data:`RUN_BOUND_S` (then it is killed). A child that died returns what it
    wrote before (nothing)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # never returns
        try:
            os.close(r)
            DIE_WITH_PARENT()
            view = memoryview(produce())
            while view:
                view = view[os.write(w, view):]
        finally:
            os._exit(0)
    os.close(w)
    data, timed_out = _read_within(r, pid, RUN_BOUND_S)
    return None if timed_out else data


def _read_within(fd: int, pid: int, bound_s: float | None) -> tuple[bytes, bool]:
    """Everything the forked run writes to ``fd`` until it ends, and whether it was still
    running at ``bound_s`` (then it is killed)."""
    deadline = None if bound_s is None else time.monotonic() + bound_s
    chunks: list[bytes] = []
    try:
        while True:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                return b"", True
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)
    finally:
        os.close(fd)
        os.waitpid(pid, 0)

