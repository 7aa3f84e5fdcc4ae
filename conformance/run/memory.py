"""A run context that keeps a run's records in memory (property runs and adapter tests), and a
run in a process forked for it (each property example)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainspec.conformance.run.records import Record, from_json, to_json
from trainspec.conformance.run.scenario import CrashWhere, Scenario

__all__ = ["ForkedRun", "MemoryContext", "run_in_fork"]


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

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # never returns
        try:
            os.close(r)
            ctx = context(root)
            error, stopped = None, False
            inside = str(root.resolve()) + os.sep
            try:
                with trusting(lambda p: str(Path(p).resolve()).startswith(inside)):
                    adapter.run(scenario, ctx)
            except Exception as e:  # the trainer's: it is the run's outcome
                error = error_line(e)
            except BaseException as e:
                if stop is None or not isinstance(e, stop):
                    raise
                stopped = True
            out = [json.dumps(to_json(x)) for x in ctx.records]
            out.append(json.dumps({"raised": error, "stopped": stopped}))
            view = memoryview(("\n".join(out) + "\n").encode())
            while view:
                view = view[os.write(w, view):]
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    lines: list[dict[str, Any]] = [json.loads(x) for x in data.decode().splitlines() if x]
    if not lines or set(lines[-1]) != {"raised", "stopped"}:
        return ForkedRun(records=[from_json(x) for x in lines],
                         error="the run's process died before it ended (a signal, os._exit)")
    raised = lines[-1]["raised"]
    return ForkedRun(records=[from_json(x) for x in lines[:-1]],
                     error=None if raised is None else str(raised),
                     stopped=lines[-1]["stopped"] is True)
