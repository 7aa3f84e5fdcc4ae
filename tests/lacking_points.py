"""An adapter whose trainer has none of the crash points: its best selection and patience step
are one block, and it marks no epoch boundary itself (tests/test_crash_points.py).

It drives the reference through the seed-shape adapter but offers the suite none of its
``ctx.crash_point`` calls: the suite interrupts at the epoch boundaries it sees in the records
and at the writes it observes, and says ``n/a`` for the points nothing marks.
"""

from __future__ import annotations

from pathlib import Path

from trainspec.adapters.base_trainer import BaseTrainerAdapter
from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.records import Record
from trainspec.conformance.run.scenario import CrashWhere, Scenario


class _NoPoints:
    """The run's context, with every crash point the trainer would offer left out."""

    def __init__(self, inner: RunContext) -> None:
        self.inner = inner

    @property
    def rank(self) -> int:
        return self.inner.rank

    @property
    def world_size(self) -> int:
        return self.inner.world_size

    @property
    def ckpt_root(self) -> Path:
        return self.inner.ckpt_root

    def record(self, record: Record) -> None:
        self.inner.record(record)

    def crash_point(self, where: CrashWhere, epoch: int) -> None:
        return None


class WithoutCrashPoints(BaseTrainerAdapter):
    """The reference, offering no crash point."""

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        super().run(scenario, _NoPoints(ctx))
