"""A run context that keeps a run's records in memory: property runs and adapter tests."""

from __future__ import annotations

import json
from pathlib import Path

from trainspec.conformance.run.records import Record, from_json, to_json
from trainspec.conformance.run.scenario import CrashWhere

__all__ = ["MemoryContext"]


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
