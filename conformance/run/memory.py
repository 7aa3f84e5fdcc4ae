"""A run context that keeps a run's events in memory: property runs and adapter tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainspec.conformance.run.records import Record, to_json

__all__ = ["MemoryContext"]


class MemoryContext:
    """A RunContext recording events in memory; no crash points (properties never crash)."""

    def __init__(self, root: Path) -> None:
        self.events: list[dict[str, Any]] = []
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
        self.emit(to_json(record))

    def emit(self, event: dict[str, Any]) -> None:
        # the same JSON round trip as a real run, so NaN and tensors look alike to the checks
        self.events.append(json.loads(json.dumps(event)))

    def crash_point(self, where: Any, epoch: int) -> None:
        return None
