"""Traces: what a trainer did in one run, as typed records.

A run's child writes one JSON line per record while the trainer runs (so a run that is killed
still leaves what it did up to the kill); :func:`read_records` reads them back and
:func:`parse_rank` groups them into one rank's view: its set-up, training epochs, validations,
test passes, end and writes. Checkpoint files are listed and read after the run, in the worker
(``files.read_checkpoint``); this process never unpickles anything a trainer wrote.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from trainspec.conformance.run.files import FileRecord, actionable_line
from trainspec.conformance.run.records import (
    Crash,
    Done,
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
    "OVERFLOW",
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


# The judge's bound on what one rank's run may record. The reference's largest run, over the
# whole suite, records 31 KB in 62 records, its longest one 2.5 KB (a tiny model: its state is
# a few dozen numbers); a run past these bounds (hundreds of times more) floods, as an adapter
# recording in a loop until its timeout does, and is read no further.
MAX_RECORDS = 20_000
MAX_RECORD_BYTES = 4 * 2**20  # one line
MAX_RUN_BYTES = 32 * 2**20  # all the lines of one rank's run
OVERFLOW = "RecordOverflow"  # the type of the RunError standing for the records not read


def read_records(path: Path, *, max_records: int = MAX_RECORDS,
                 max_bytes: int = MAX_RUN_BYTES,
                 max_line_bytes: int = MAX_RECORD_BYTES) -> list[Record]:
    """Every record of a rank's records file, in order, streamed line by line.

    A line that is not JSON (torn by a kill) is dropped. A line that is JSON but no record
    becomes a :class:`RunError` of type :data:`MALFORMED`, ``ours``: the judge goes on, and the
    run's verdict names the record and the field (see :func:`parse_rank`). Past
    ``max_records`` records or ``max_bytes`` bytes, or at a line over ``max_line_bytes``,
    reading stops with a :class:`RunError` of type :data:`OVERFLOW` naming the bound: the
    judge's memory stays bounded whatever a run records.
    """
    records: list[Record] = []
    if not path.exists():
        return records
    read = 0
    with path.open("rb") as f:
        for number in itertools.count(1):
            raw = f.readline(max_line_bytes + 1)
            if not raw:
                return records
            read += len(raw)
            bound = _bound_passed(raw, len(records), read, max_records, max_bytes,
                                  max_line_bytes, number)
            if bound is not None:
                records.append(RunError(type=OVERFLOW, message=f"{path.name}: {bound}; the "
                                        "rest was not read", ours=True, traceback=""))
                return records
            record = _decode_line(raw.decode(errors="replace"), number, path.name)
            if record is not None:
                records.append(record)
    return records  # pragma: no cover - itertools.count never ends


def _bound_passed(raw: bytes, count: int, read: int, max_records: int, max_bytes: int,
                  max_line_bytes: int, number: int) -> str | None:
    if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
        return f"line {number} is longer than {max_line_bytes} bytes"
    if read > max_bytes:
        size = f"{max_bytes // 2**20} MiB" if max_bytes >= 2**20 else f"{max_bytes} bytes"
        return f"the run recorded more than {size}"
    if count >= max_records:
        return f"the run recorded more than {max_records} records"
    return None


def _decode_line(line: str, number: int, name: str) -> Record | None:
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None  # torn by a kill
    except RecursionError:
        return RunError(type=MALFORMED, message=f"record on line {number} of {name}: nested "
                        "too deep to read", ours=True, traceback=line[:500])
    try:
        return from_json(data)
    except RecordError as e:
        return RunError(type=MALFORMED, message=str(e), ours=True,
                        traceback=f"line {number} of {name}: {line[:500]}")


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
    # False: the rank ran on another node than rank 0 with a node-local checkpoint folder
    # (a launch without --ckpt-root), so rank 0's files were never there for it to see
    sees_rank0_files: bool = True

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

    A record that did not decode, or records past the judge's bound, make the rank ``raised``
    (unless it timed out or its worker was lost), with that as its error: the adapter broke
    its contract, and every check judging this run says so rather than judging a trace with a
    hole in it. A run whose process ended with status 0 before the adapter's run returned
    (``os._exit``, ``sys.exit(0)`` inside the trainer) is ``exited``, not ``completed``, and
    a ``sys.exit`` keeps its message.
    """
    status, error, detail = _how_it_ended(records, status, error, detail)
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


def _how_it_ended(records: Sequence[Record], status: RunStatus, error: str,
                  detail: str) -> tuple[RunStatus, str, str]:
    broken = next((r for r in records if isinstance(r, RunError)
                   and r.type in (MALFORMED, OVERFLOW)), None)
    if broken is not None:
        line = f"{broken.type}: {broken.message}".splitlines()[0][:300]
        if status == "timeout":
            return status, f"{error}; {line}", detail
        if status != "lost":
            return "raised", line, broken.traceback
        return status, error, detail
    exits = [r for r in records if isinstance(r, RunExit)]
    ended = any(isinstance(r, RunEnd) for r in records)
    if status == "completed" and not ended:
        if exits:
            return "exited", f"{_exit_words(exits[-1])} before the run recorded its end", detail
        if not any(isinstance(r, Done) for r in records):
            return "exited", ("the process exited with status 0 before the adapter's run "
                              "returned (os._exit inside the run?)"), detail
    if status == "exited" and exits and exits[-1].message:  # a status alone says it all
        return status, f"{_exit_words(exits[-1])}: {error}", detail
    if status == "raised":
        raised = [r for r in records if isinstance(r, RunError)]
        if raised:
            return status, f"{raised[-1].type}: {actionable_line(raised[-1].message)}"[:300], \
                detail
    return status, error, detail


def _exit_words(e: RunExit) -> str:
    said = f"sys.exit({e.message!r})" if e.message else f"sys.exit({e.code})"
    return f"the run called {said}"


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
    torch = sys.modules.get("torch")  # without torch imported, nothing is a tensor
    if torch is not None and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
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
