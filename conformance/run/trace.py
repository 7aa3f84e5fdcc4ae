"""Traces: what a trainer did in one run, as typed records.

A run's child writes one JSON line per record while the trainer runs (so a run that is killed
still leaves what it did up to the kill); :func:`read_records` reads them back and
:func:`parse_rank` groups them into one rank's view: its set-up, training epochs, validations,
test passes, end and writes. Checkpoint files are listed after the run and loaded with
``weights_only=True``; nothing a trainer wrote is ever unpickled unsafely.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.records import (
    Crash,
    FileSnapshot,
    Record,
    RecordError,
    RunEnd,
    RunError,
    RunExit,
    Setup,
    TestPass,
    TrainEnd,
    TrainerState,
    TrainStart,
    Validation,
    Weights,
    Write,
    from_json,
    kind_of,
)

__all__ = [
    "MALFORMED",
    "RankTrace",
    "RunStatus",
    "Trace",
    "TrainEpoch",
    "Weights",
    "first_difference",
    "parse_rank",
    "read_records",
]

RunStatus = Literal["completed", "raised", "killed", "exited", "timeout", "lost"]
# the type of the RunError standing for a line that is JSON but no record (the adapter's fault)
MALFORMED = RecordError.__name__


def read_records(path: Path) -> list[Record]:
    """Every record of a rank's records file, in order.

    A line that is not JSON (torn by a kill) is dropped. A line that is JSON but no record
    becomes a :class:`RunError` of type :data:`MALFORMED`, ``ours``: the judge goes on, and the
    run's verdict names the record and the field (see :func:`parse_rank`).
    """
    records: list[Record] = []
    if not path.exists():
        return records
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        try:
            records.append(from_json(data))
        except RecordError as e:
            records.append(RunError(type=MALFORMED, message=str(e), ours=True,
                                    traceback=f"line {number} of {path.name}: {line[:500]}"))
    return records


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainEpoch:
    """One training epoch: its start and, unless the run died inside it, its end."""

    start: TrainStart
    end: TrainEnd | None = None

    @property
    def epoch(self) -> int:
        return self.start.epoch

    @property
    def start_step(self) -> int:
        return self.start.train_step

    @property
    def end_step(self) -> int | None:
        return None if self.end is None else self.end.train_step

    @property
    def batches(self) -> int | None:
        return None if self.end is None else self.end.batches

    @property
    def optimizer_steps(self) -> int | None:
        return None if self.end is None else self.end.optimizer_steps

    @property
    def loader_len(self) -> int | None:
        return None if self.end is None else self.end.loader_len

    @property
    def state(self) -> TrainerState:
        """At the epoch's start: weights, optimizer, scheduler, RNG digests."""
        return self.start.state

    @property
    def last_file_epoch(self) -> int | None:
        """The epoch last.pt recorded as visible at the start, if any."""
        return self.start.last_file_epoch

    @property
    def best_file(self) -> FileSnapshot | None:
        """The newest best file as visible at the start (rank 0)."""
        return self.start.best_file


@dataclass(frozen=True, slots=True, kw_only=True)
class RankTrace:
    """One rank's view of one run."""

    rank: int
    status: RunStatus
    error: str  # one line: exception type and message, or how the process ended
    detail: str  # a traceback, or the stack of a stuck process
    records: tuple[Record, ...] = ()
    setup: Setup | None = None
    train_epochs: tuple[TrainEpoch, ...] = ()
    validations: tuple[Validation, ...] = ()
    tests: tuple[TestPass, ...] = ()
    end: RunEnd | None = None
    writes: tuple[Write, ...] = ()  # checkpoint-folder writes this rank's process made

    @property
    def epochs_trained(self) -> list[int]:
        return [e.epoch for e in self.train_epochs]

    @property
    def best_model(self) -> Weights | None:
        return None if self.end is None else self.end.best_model

    @property
    def final_weights(self) -> Weights | None:
        return None if self.end is None else self.end.final_weights

    @property
    def crashes(self) -> tuple[Crash, ...]:
        """The crash points the harness triggered on this rank."""
        return tuple(r for r in self.records if isinstance(r, Crash))

    @property
    def errors(self) -> tuple[RunError, ...]:
        """How the adapter's run raised, and any record that did not decode."""
        return tuple(r for r in self.records if isinstance(r, RunError))

    @property
    def is_ours(self) -> bool:
        """The suite or the adapter broke, not the trainer: an error raised there, a record
        that did not decode, or a worker lost."""
        return self.status == "lost" or any(e.ours for e in self.errors)

    @property
    def ended_at(self) -> float | None:
        """When the adapter's run raised or exited (the first such record), if it did."""
        return next((r.t for r in self.records if isinstance(r, RunError | RunExit)), None)

    @property
    def kinds(self) -> list[str]:
        """The kind of each record, in order."""
        return [kind_of(r) for r in self.records]


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """Everything observed of one run, on every rank."""

    scenario_name: str
    ranks: tuple[RankTrace, ...]
    files: tuple[FileRecord, ...] = field(default=())
    duration_s: float = 0.0

    @property
    def rank0(self) -> RankTrace:
        return self.ranks[0]

    @property
    def completed(self) -> bool:
        return all(r.status == "completed" for r in self.ranks)

    def newest(self, role: str) -> FileRecord | None:
        """The newest checkpoint of that role ("last", "best", "epoch") across run directories
        (a resume may write into a new one)."""
        matches = [f for f in self.files if f.role == role]
        return max(matches, key=lambda f: f.mtime_ns) if matches else None

    def with_role(self, role: str) -> list[FileRecord]:
        return [f for f in self.files if f.role == role]


def parse_rank(rank: int, records: Sequence[Record], status: RunStatus, error: str,
               detail: str) -> RankTrace:
    """One rank's view over its records.

    A record that did not decode makes the rank ``raised`` (unless it timed out or its worker
    was lost), with the decoding error as its error: the adapter broke its contract, and every
    check judging this run says so rather than judging a trace with a hole in it.
    """
    malformed = next((r for r in records if isinstance(r, RunError) and r.type == MALFORMED),
                     None)
    if malformed is not None and status not in ("timeout", "lost"):
        status, error = "raised", f"{MALFORMED}: {malformed.message}".splitlines()[0][:300]
        detail = malformed.traceback
    epochs: list[TrainEpoch] = []
    for r in records:
        if isinstance(r, TrainStart):
            epochs.append(TrainEpoch(start=r))
        elif isinstance(r, TrainEnd) and epochs and epochs[-1].end is None:
            epochs[-1] = TrainEpoch(start=epochs[-1].start, end=r)
    return RankTrace(
        rank=rank, status=status, error=error, detail=detail, records=tuple(records),
        setup=next((r for r in reversed(records) if isinstance(r, Setup)), None),
        train_epochs=tuple(epochs),
        validations=tuple(r for r in records if isinstance(r, Validation)),
        tests=tuple(r for r in records if isinstance(r, TestPass)),
        end=next((r for r in reversed(records) if isinstance(r, RunEnd)), None),
        writes=tuple(r for r in records if isinstance(r, Write)))


def first_difference(expected: Mapping[str, object], observed: Mapping[str, object],
                     prefix: str = "") -> str | None:
    """The first differing entry of two nested states, as one line; None when bitwise equal."""
    for key in sorted(set(expected) | set(observed)):
        where = f"{prefix}{key}"
        if key not in observed:
            return f"{where} missing"
        if key not in expected:
            return f"{where} unexpected"
        diff = _difference(expected[key], observed[key], where)
        if diff is not None:
            return diff
    return None


def _difference(a: object, b: object, where: str) -> str | None:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{where}: shape/dtype {tuple(a.shape)}/{a.dtype} vs {tuple(b.shape)}/{b.dtype}"
        if torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                                 and torch.equal(a.nan_to_num(), b.nan_to_num())):
            return None
        gap = (a.double() - b.double()).abs().nan_to_num(nan=math.inf).max().item()
        return f"{where}: max |diff| {gap:.3g}"
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return first_difference(a, b, f"{where}.")
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff = _difference(x, y, f"{where}[{i}]")
            if diff is not None:
                return diff
        return None
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    return None if a == b else f"{where}: {a!r} vs {b!r}"
