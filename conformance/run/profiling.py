"""The benchmarks' profiling hook: every process of a run writes its cProfile statistics.

Off unless asked for: ``TRAINSPEC_PROFILE_DIR=DIR trainspec check ...`` (read by the command
line) makes the suite's process, each worker and each run's child write ``LABEL-PID.prof``
(cProfile, wall-clock) and ``LABEL-PID.cpu`` (the process's own CPU seconds) into ``DIR``.
A process forked from a profiled one without a profile of its own (a generated run, a
forked file read) writes ``fork-PID.prof`` as it ends: what its parent had profiled so far
and its own calls. The mutation benchmark's clause map (``benchmarks/mutation.py``) reads
them: which reference functions each clause's runs call.

With ``TRAINSPEC_TRACE_LINES=DIR`` as well, every profiled process also notes each line it runs
of the Python files under ``DIR`` and writes them as ``LABEL-PID.lines`` (or
``fork-PID.lines``; JSON, each file's real path -> its lines): the mutation benchmark's line
map, so a mutant is checked on the clauses whose runs execute its line.
"""

from __future__ import annotations

import contextlib
import cProfile
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["RUN_TIMES_ENV", "TRACE_LINES_ENV", "dump_forked", "note_run_time", "profiled"]

# ``TRAINSPEC_RUN_TIMES=FILE trainspec check ...``: every run's child appends one line to FILE,
# ``KIND RANK SECONDS``, the time from the start of the adapter's ``run`` (or of a property
# child's examples) to its end or its crash point; the team-trainer benchmark sums them
RUN_TIMES_ENV = "TRAINSPEC_RUN_TIMES"
# ``TRAINSPEC_TRACE_LINES=DIR``: profiled processes also note the lines they run under DIR
TRACE_LINES_ENV = "TRAINSPEC_TRACE_LINES"


@contextlib.contextmanager
def profiled(folder: str | Path | None, label: str) -> Iterator[None]:
    """Profile the block into ``folder`` as ``LABEL-PID``; nothing when ``folder`` is None."""
    if folder is None:
        yield
        return
    profiler = cProfile.Profile()
    _ACTIVE.append((profiler, Path(folder)))
    tracing = _trace_lines()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        _ACTIVE.pop()
        name = Path(folder) / f"{label}-{os.getpid()}"
        profiler.dump_stats(f"{name}.prof")
        _dump_lines(Path(f"{name}.lines"))
        if tracing:
            _stop_lines()
        cpu = os.times()  # this process's own CPU seconds (cProfile's clock is wall time)
        Path(f"{name}.cpu").write_text(f"{cpu.user + cpu.system:.3f}\n")


# the profilers enabled in this process (a forked child inherits them, enabled), with folders
_ACTIVE: list[tuple[cProfile.Profile, Path]] = []


def dump_forked() -> None:
    """In a process forked from a profiled one, just before it ends (``os._exit`` writes
    nothing): the inherited profiler's statistics as ``fork-PID.prof``; nothing when the
    process that forked it was not profiled."""
    if not _ACTIVE:
        return
    profiler, folder = _ACTIVE[-1]
    profiler.disable()
    with contextlib.suppress(OSError):
        profiler.dump_stats(str(folder / f"fork-{os.getpid()}.prof"))
    _dump_lines(folder / f"fork-{os.getpid()}.lines")


class _Lines:
    """A trace function noting the lines run of the files under one folder (a process's
    frames elsewhere get no line events, so the rest runs at the cost of one call each)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root) + os.sep
        self.wanted: dict[str, str | None] = {}  # code's file name -> its real path, if under
        self.seen: dict[str, set[int]] = {}

    def call(self, frame: FrameType, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        if name not in self.wanted:
            path = os.path.realpath(name)
            self.wanted[name] = path if path.startswith(self.root) else None
        real = self.wanted[name]
        if real is None:
            return None
        lines = self.seen.setdefault(real, set())

        def line(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                lines.add(frame.f_lineno)
            return line

        return line


# this process's (a forked child's: inherited, lines and all), with the trace functions it
# replaced
_TRACER: list[tuple[_Lines, Any, Any]] = []


def _trace_lines() -> bool:
    """Start noting lines where :data:`TRACE_LINES_ENV` asks for it, unless this process
    already does: whether this call started it."""
    root = os.environ.get(TRACE_LINES_ENV)
    if not root or _TRACER:
        return False
    tracer = _Lines(root)
    _TRACER.append((tracer, sys.gettrace(), threading.gettrace()))
    sys.settrace(tracer.call)
    threading.settrace(tracer.call)
    return True


def _stop_lines() -> None:
    _, before, before_threads = _TRACER.pop()
    sys.settrace(before)
    threading.settrace(before_threads)


def _dump_lines(path: Path) -> None:
    if not _TRACER:
        return
    lines = {file: sorted(seen) for file, seen in _TRACER[0][0].seen.items()}
    with contextlib.suppress(OSError):
        path.write_text(json.dumps(lines))


def note_run_time(kind: str, rank: int, began: float) -> None:
    """Append ``KIND RANK SECONDS`` (since ``began``, a ``time.monotonic()``) to the file
    :data:`RUN_TIMES_ENV` names; nothing when it is unset or cannot be written."""
    path = os.environ.get(RUN_TIMES_ENV)
    if not path:
        return
    with contextlib.suppress(OSError), open(path, "a", encoding="ascii") as f:
        f.write(f"{kind} {rank} {time.monotonic() - began:.6f}\n")
