"""The trainer's logging: stdlib ``logging`` for messages, a JSONL file for metrics.

No external sink: metrics go to ``<run dir>/metrics.jsonl`` (when the run has a directory, i.e.
checkpointing is on) and to the ``trainspec.reference`` logger. Only rank 0 writes. An epoch
progress line is drawn on rank 0 when stderr is a terminal.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import TextIO

__all__ = ["EpochProgress", "RunLogger"]

_log = logging.getLogger("trainspec.reference")


class RunLogger:
    """Messages and metrics of one run, written by rank 0 only."""

    def __init__(self, rank: int) -> None:
        self.is_writer = rank == 0
        self.metrics_path: Path | None = None
        self._pending: dict[str, float] = {}

    def info(self, message: str) -> None:
        if self.is_writer:
            _log.info(message)

    def warn(self, message: str) -> None:
        # warnings from any rank: a rank-local problem is worth seeing
        _log.warning(message)

    def log(self, name: str, value: float) -> None:
        """Stage a metric; :meth:`push` writes everything staged as one record."""
        self._pending[name] = float(value)

    def push(self, *, epoch: int, step: int) -> None:
        if not self._pending:
            return
        record = {"epoch": epoch, "step": step, **self._pending}
        self._pending.clear()
        if not self.is_writer:
            return
        _log.debug("metrics %s", record)
        if self.metrics_path is not None:
            with self.metrics_path.open("a") as f:
                # NaN is a legitimate metric value; write it as null, which JSON can carry
                f.write(json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n")


def _jsonable(value: float | int) -> float | int | None:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class EpochProgress:
    """A one-line epoch progress display on a terminal; silent elsewhere."""

    def __init__(self, *, start: int, total: int, enabled: bool,
                 stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self.done, self.total = start, total
        self.started = time.monotonic()
        self.note = ""

    def update(self, *, epoch_done: int, note: str = "") -> None:
        self.done, self.note = epoch_done, note
        if self.enabled:
            elapsed = time.monotonic() - self.started
            self.stream.write(f"\repoch {self.done}/{self.total} [{elapsed:6.1f}s] {self.note}")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
