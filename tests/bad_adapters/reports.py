"""Adapters that drive the reference trainer but report it wrongly, one fault each: what
``trainspec check TARGET --self-test`` must name (tests/test_selftest.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trainspec.adapters.base_trainer import BaseTrainerAdapter
from trainspec.conformance.run.files import FileRecord, describe_seed_files
from trainspec.kit import (
    CrashWhere,
    Record,
    RunContext,
    RunEnd,
    Scenario,
    Setup,
    TestPass,
    TrainEnd,
    TrainStart,
    Validation,
)


class _Distorted:
    """The run's context, with every record passed through ``change`` first (None: dropped)
    and the crash points through ``crash``."""

    def __init__(self, inner: RunContext, adapter: Reporting) -> None:
        self.inner, self.adapter = inner, adapter

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
        changed = self.adapter.change(record)
        if changed is not None:
            self.inner.record(changed)

    def crash_point(self, where: CrashWhere, epoch: int) -> None:
        self.adapter.crash(self.inner, where, epoch)


class Reporting(BaseTrainerAdapter):
    """The reference, reported faithfully: the base of each fault below."""

    def change(self, record: Record) -> Record | None:
        return record

    def crash(self, ctx: RunContext, where: CrashWhere, epoch: int) -> None:
        ctx.crash_point(where, epoch)

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        super().run(scenario, _Distorted(ctx, self))


class OneBasedEpochs(Reporting):
    """Epochs as a trainer counting from 1 shows them, records and crash points alike."""

    def change(self, record: Record) -> Record | None:
        if isinstance(record, TrainStart | TrainEnd | Validation | Setup):
            return dataclasses.replace(record, epoch=record.epoch + 1)
        return record

    def crash(self, ctx: RunContext, where: CrashWhere, epoch: int) -> None:
        ctx.crash_point(where, epoch + 1)


class NoCrashPoints(Reporting):
    """Never offers a crash point."""

    def crash(self, ctx: RunContext, where: CrashWhere, epoch: int) -> None:
        return None


class NoDecisions(Reporting):
    """Reports that validations ran, never what the trainer decided."""

    def change(self, record: Record) -> Record | None:
        if isinstance(record, Validation):
            return dataclasses.replace(record, improved=False, stop=False)
        return record


class MissingRecords(Reporting):
    """No Setup, no TestPass, no best model at the end."""

    def change(self, record: Record) -> Record | None:
        if isinstance(record, Setup | TestPass):
            return None
        if isinstance(record, RunEnd):
            return dataclasses.replace(record, best_model=None)
        return record


class MeasuredScores(Reporting):
    """Reports a score of its own, not the scripted one."""

    def change(self, record: Record) -> Record | None:
        if isinstance(record, Validation):
            return dataclasses.replace(record, score=0.25)
        return record


class NoFileRoles(Reporting):
    """Describes no file as a checkpoint (its own names, left unmapped)."""

    def describe_checkpoints(self, root: Path) -> list[FileRecord]:
        return [dataclasses.replace(f, role=None) for f in describe_seed_files(root)]
