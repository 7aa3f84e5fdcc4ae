"""Traces: what a trainer did in one run, as data.

A worker records events as JSON lines while the trainer runs (so a run that is killed still
leaves what it did up to the kill); :func:`parse_rank` turns them into typed views. Tensors
travel as JSON lists: float32 values round-trip exactly through Python floats, so bitwise
comparisons stay bitwise. Checkpoint files are listed after the run and loaded with
``weights_only=True``; nothing a trainer wrote is ever unpickled unsafely.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

__all__ = [
    "BestFile",
    "FileRecord",
    "RankTrace",
    "RunStatus",
    "Trace",
    "TrainEpoch",
    "Validation",
    "Weights",
    "decode",
    "encode",
    "first_difference",
    "read_events",
]

Weights = dict[str, torch.Tensor]
RunStatus = Literal["completed", "raised", "killed", "exited", "timeout", "lost"]


def encode(obj: Any) -> Any:
    """A JSON-able form of nested containers of tensors, numbers and strings."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu()
        return {"__tensor__": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                "data": t.reshape(-1).tolist()}
    if isinstance(obj, Mapping):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [encode(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    return repr(obj)


def decode(obj: Any) -> Any:
    """Inverse of :func:`encode` (tuples come back as lists)."""
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            dtype = getattr(torch, obj["__tensor__"])
            return torch.tensor(obj["data"], dtype=dtype).reshape(obj["shape"])
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return obj


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of an events file; a line torn by a kill is dropped."""
    events: list[dict[str, Any]] = []
    if not path.exists():
        return events
    for line in path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


@dataclass(frozen=True, slots=True, kw_only=True)
class BestFile:
    """The newest ``best.pt`` as seen right after a validation: identity and content."""

    path: str
    mtime_ns: int
    size: int
    epoch: int | None
    step: int | None
    weights: Weights | None
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Validation:
    epoch: int  # the trainer's ``epoch`` attribute during the validation
    phase: Literal["first", "epoch"]  # before any training of this run, or after an epoch
    score: float  # the pooled score the trainer computed on this rank
    improved: bool
    stop: bool  # the verdict step_patience returned
    weights: Weights  # the model's weights when validated
    best_file: BestFile | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainEpoch:
    epoch: int
    start_step: int
    end_step: int | None  # None: the run died inside the epoch
    batches: int | None
    optimizer_steps: int | None
    loader_len: int | None
    state: dict[str, Any]  # at the epoch's start: weights, optimizer, scheduler, rng digests
    last_file_epoch: int | None  # epoch field of last.pt as visible at the start, if any
    best_file: BestFile | None  # the newest best.pt as visible at the start (rank 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class RankTrace:
    """One rank's view of one run."""

    rank: int
    status: RunStatus
    error: str  # one line: exception type and message, or how the process ended
    detail: str  # a traceback, or the stack of a stuck process
    events: tuple[dict[str, Any], ...]
    setup: dict[str, Any] | None
    train_epochs: tuple[TrainEpoch, ...]
    validations: tuple[Validation, ...]
    tests: tuple[dict[str, Any], ...]
    end: dict[str, Any] | None
    writes: tuple[str, ...]  # checkpoint-folder paths this rank's process wrote to

    @property
    def epochs_trained(self) -> list[int]:
        return [e.epoch for e in self.train_epochs]

    @property
    def best_model(self) -> Weights | None:
        if self.end is None:
            return None
        return self.end.get("best_model")

    @property
    def final_weights(self) -> Weights | None:
        return None if self.end is None else self.end.get("final_weights")


@dataclass(frozen=True, slots=True, kw_only=True)
class FileRecord:
    """A file left under the run's checkpoint folder, as its adapter describes it.

    ``role`` is "last", "best" or "epoch" for a checkpoint, None for anything else;
    ``keys``/``types`` are its top-level entries; ``error`` says why it does not load
    (weights-only). ``holds``, when the adapter gives it, names what the file holds in the
    spec's terms, whatever the framework's own key names: any of "epoch", "step", "run_id",
    "config", "model", "optimizer", "scheduler" (CKPT-1 then judges it instead of the seed's
    key names).
    """

    relpath: str
    size: int
    mtime_ns: int
    role: str | None = None
    epoch: int | None = None
    step: int | None = None
    keys: tuple[str, ...] = ()
    types: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    holds: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return Path(self.relpath).name

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> FileRecord:
        def integer(value: object) -> int | None:
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        role = entry.get("role")
        return cls(relpath=str(entry["relpath"]), size=int(entry.get("size", 0)),
                   mtime_ns=int(entry.get("mtime_ns", 0)),
                   role=role if role in ("last", "best", "epoch") else None,
                   epoch=integer(entry.get("epoch")), step=integer(entry.get("step")),
                   keys=tuple(str(k) for k in entry.get("keys", ())),
                   types={str(k): str(v) for k, v in dict(entry.get("types", {})).items()},
                   error=None if entry.get("error") is None else str(entry["error"]),
                   holds=None if entry.get("holds") is None
                   else tuple(str(h) for h in entry["holds"]))


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


def parse_rank(rank: int, events: Sequence[dict[str, Any]], status: RunStatus, error: str,
               detail: str) -> RankTrace:
    """Typed views over one rank's events."""
    setup = None
    epochs: list[TrainEpoch] = []
    validations: list[Validation] = []
    tests: list[dict[str, Any]] = []
    end = None
    writes: list[str] = []
    open_epoch: dict[str, Any] | None = None
    for ev in events:
        kind = ev.get("ev")
        if kind == "setup":
            setup = ev
        elif kind == "train_start":
            if open_epoch is not None:
                epochs.append(_epoch(open_epoch, None))
            open_epoch = ev
        elif kind == "train_end" and open_epoch is not None:
            epochs.append(_epoch(open_epoch, ev))
            open_epoch = None
        elif kind == "val":
            validations.append(_validation(ev))
        elif kind == "test":
            tests.append({**ev, "weights": decode(ev.get("weights"))})
        elif kind == "end":
            end = {k: decode(v) for k, v in ev.items()}
        elif kind == "write":
            writes.append(str(ev.get("path")))
    if open_epoch is not None:
        epochs.append(_epoch(open_epoch, None))
    return RankTrace(rank=rank, status=status, error=error, detail=detail, events=tuple(events),
                     setup=setup, train_epochs=tuple(epochs), validations=tuple(validations),
                     tests=tuple(tests), end=end, writes=tuple(writes))


def _epoch(start: dict[str, Any], end: dict[str, Any] | None) -> TrainEpoch:
    last = start.get("last_file_epoch")
    return TrainEpoch(
        epoch=int(start["epoch"]), start_step=int(start["train_step"]),
        end_step=None if end is None else int(end["train_step"]),
        batches=None if end is None else int(end["batches"]),
        optimizer_steps=None if end is None else int(end["optimizer_steps"]),
        loader_len=None if end is None else int(end["loader_len"]),
        state=decode(start.get("state", {})),
        last_file_epoch=last if isinstance(last, int) else None,
        best_file=_best_file(start.get("best_file")),
    )


def _validation(ev: dict[str, Any]) -> Validation:
    best_file = _best_file(ev.get("best_file"))
    score = ev.get("score")
    return Validation(epoch=int(ev["epoch"]), phase=ev["phase"],
                      score=math.nan if score is None else float(score),
                      improved=bool(ev["improved"]), stop=bool(ev["stop"]),
                      weights=decode(ev.get("weights", {})), best_file=best_file)


def _best_file(best: object) -> BestFile | None:
    if not isinstance(best, dict):
        return None
    return BestFile(path=str(best["path"]), mtime_ns=int(best["mtime_ns"]),
                    size=int(best["size"]), epoch=best.get("epoch"), step=best.get("step"),
                    weights=decode(best.get("weights")), error=best.get("error"))


def end_best_file(end: dict[str, Any] | None) -> BestFile | None:
    """The newest best.pt as the run ended (rank 0)."""
    return None if end is None else _best_file(end.get("best_file"))


def first_difference(expected: Mapping[str, Any], observed: Mapping[str, Any],
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


def _difference(a: Any, b: Any, where: str) -> str | None:
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
