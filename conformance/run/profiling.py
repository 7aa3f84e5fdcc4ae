"""The benchmarks' profiling hook: every process of a run writes its cProfile statistics.

Off unless asked for: ``TRAINSPEC_PROFILE_DIR=DIR trainspec check ...`` (read by the command
line) makes the suite's process, each worker and each run's child write ``LABEL-PID.prof``
(cProfile, wall-clock) and ``LABEL-PID.cpu`` (the process's own CPU seconds) into ``DIR``.
A process forked from a profiled one without a profile of its own (a generated run, a
forked file read) writes ``fork-PID.prof`` as it ends: what its parent had profiled so far
and its own calls. The mutation benchmark's clause map (``benchmarks/mutation.py``) reads
them: which reference functions each clause's runs call.
"""

from __future__ import annotations

import contextlib
import cProfile
import os
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["RUN_TIMES_ENV", "dump_forked", "note_run_time", "profiled"]

# ``TRAINSPEC_RUN_TIMES=FILE trainspec check ...``: every run's child appends one line to FILE,
# ``KIND RANK SECONDS``, the time from the start of the adapter's ``run`` (or of a property
# child's examples) to its end or its crash point; the team-trainer benchmark sums them
RUN_TIMES_ENV = "TRAINSPEC_RUN_TIMES"


@contextlib.contextmanager
def profiled(folder: str | Path | None, label: str) -> Iterator[None]:
    """Profile the block into ``folder`` as ``LABEL-PID``; nothing when ``folder`` is None."""
    if folder is None:
        yield
        return
    profiler = cProfile.Profile()
    _ACTIVE.append((profiler, Path(folder)))
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        _ACTIVE.pop()
        name = Path(folder) / f"{label}-{os.getpid()}"
        profiler.dump_stats(f"{name}.prof")
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


def note_run_time(kind: str, rank: int, began: float) -> None:
    """Append ``KIND RANK SECONDS`` (since ``began``, a ``time.monotonic()``) to the file
    :data:`RUN_TIMES_ENV` names; nothing when it is unset or cannot be written."""
    path = os.environ.get(RUN_TIMES_ENV)
    if not path:
        return
    with contextlib.suppress(OSError), open(path, "a", encoding="ascii") as f:
        f.write(f"{kind} {rank} {time.monotonic() - began:.6f}\n")
