"""Records: what a run reports, one frozen dataclass per kind, and their JSON codec.

An adapter reports its trainer's run through ``RunContext.record(...)`` with these types: the
set-up (:class:`Setup`), each training epoch's start and end (:class:`TrainStart`,
:class:`TrainEnd`), each validation with the trainer's own improved/stop decisions
(:class:`Validation`), the test pass (:class:`TestPass`) and the end (:class:`RunEnd`). The
harness adds what it observes itself: writes into the checkpoint folder (:class:`Write`), the
crash point it triggered (:class:`Crash`), and how the adapter's ``run`` ended
(:class:`RunError`, :class:`RunExit`, :class:`Done`).

Records travel as JSON lines (``to_json`` / ``from_json``): tensors as flat lists, which
round-trip float32 values exactly, so bitwise comparisons stay bitwise. A record that does not
decode raises :class:`RecordError` naming the record and the field, never a bare ``KeyError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Literal, TypeAlias

from trainspec.conformance.run.jsonfields import FieldReader, RecordError, decode, encode
from trainspec.conformance.run.scenario import CrashWhere

if TYPE_CHECKING:
    import torch

__all__ = [
    "RECORD_TYPES",
    "ConfigSeen",
    "Crash",
    "Done",
    "FileSnapshot",
    "ItemsOnRaise",
    "Phase",
    "Record",
    "RecordError",
    "RunEnd",
    "RunError",
    "RunExit",
    "Setup",
    "StatePart",
    "TestPass",
    "TrainEnd",
    "TrainStart",
    "TrainerState",
    "Validation",
    "Weights",
    "Write",
    "decode",
    "encode",
    "from_json",
    "kind_of",
    "to_json",
]

#: A model's weights as a state dict (parameter name -> tensor).
Weights: TypeAlias = "dict[str, torch.Tensor]"  # a string: importing records costs no torch
# nested state as torch gives it (an optimizer's state_dict): dicts, lists, tensors, numbers
Nested: TypeAlias = object
#: When a validation ran: ``"first"`` (``val.first``, before any epoch) or after an ``"epoch"``.
Phase = Literal["first", "epoch"]
StatePart = Literal["weights", "optimizer", "scheduler", "rng"]


# -------------------------------------------------------------------------- shared parts


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSnapshot:
    """A checkpoint file as seen at one moment: identity, the epoch and step it records, the
    model weights it holds (read as its trainer reads it, next to the trainer), or why it does
    not load at all."""

    path: str
    mtime_ns: int
    size: int
    epoch: int | None = None
    step: int | None = None
    weights: Weights | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainerState:
    """What a resume must restore, captured at an epoch's start (RES-2, RES-4, the FT clauses).

    ``optimizer``/``scheduler`` are the state dicts (None: the trainer has none); ``rng`` maps
    each generator (``torch``, ``python``, ``numpy``) to a digest of its state.
    """

    weights: Weights
    optimizer: Nested | None = None
    scheduler: Nested | None = None
    rng: Mapping[str, str] = field(default_factory=dict)

    def part(self, name: StatePart) -> Nested | None:
        """One part by name, for comparisons that walk the parts in turn."""
        value: Nested | None = getattr(self, name)
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigSeen:
    """Config values as the trainer holds them after set-up (DBG-3, DBG-6), or as the caller's
    config reads after the run (DBG-2): None when the config has no such key."""

    wandb_mode: str | None = None
    save_preds_enable: bool | None = None
    num_epochs: int | None = None


# -------------------------------------------------------------------- what adapters record


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    """The trainer is built (a resume has loaded its checkpoint): where it will start."""

    epoch: int  # 0-based epoch the loop starts at
    train_step: int  # optimizer steps taken so far
    train_len: int  # len(train_loader) as set-up saw it (DBG-5: before debug truncation)
    config: ConfigSeen = field(default_factory=ConfigSeen)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainStart:
    """An epoch's training begins (0-based ``epoch``)."""

    epoch: int
    train_step: int
    state: TrainerState
    last_file_epoch: int | None = None  # the epoch last.pt records, as visible now
    best_file: FileSnapshot | None = None  # the newest best file, as visible now (rank 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainEnd:
    """An epoch's training ended: batches drawn, optimizer steps taken, loader sizes."""

    epoch: int
    train_step: int
    batches: int
    optimizer_steps: int
    loader_len: int  # len(train_loader)
    loader_batch_size: int | None = None
    # per evaluation loader ("val_loader", "test_loader", "eval_loader"): its len() and the
    # batches it really yields; None for a loader the trainer does not have (DBG-1)
    eval_lens: Mapping[str, int | None] = field(default_factory=dict)
    eval_batches: Mapping[str, int | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Validation:
    """A validation and the trainer's own verdicts on it, recorded once they are final (after
    every callback that acts on the score has run)."""

    epoch: int  # the epoch attribute during the validation
    phase: Phase  # "first": before any training of this run; "epoch": after an epoch
    score: float  # the pooled score the trainer computed on this rank (NaN allowed)
    improved: bool
    stop: bool
    weights: Weights  # the model's weights when validated
    best_file: FileSnapshot | None = None  # the newest best file right after (rank 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class TestPass:
    """The test pass ran, on these weights."""

    __test__ = False  # not a pytest test class, though tests import it by its name

    weights: Weights


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEnd:
    """The run returned normally."""

    train_step: int
    final_weights: Weights  # the weights after the last training step
    best_model: Weights | None  # the trainer's in-memory best, None when it has none
    best_file: FileSnapshot | None = None  # the newest best file at the end (rank 0)
    user_config: ConfigSeen | None = None  # the config passed to the trainer, read now (DBG-2)


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemsOnRaise:
    """The trainer's construction raised after set-up registered its items: which of them (the
    model aside) had changed since (RES-5: a refused resume restores none of them)."""

    changed: tuple[str, ...]
    unchanged: tuple[str, ...]


# ------------------------------------------------------------ what the harness records


@dataclass(frozen=True, slots=True, kw_only=True)
class Write:
    """This rank's process wrote a file under the checkpoint folder."""

    path: str
    via: Literal["open", "rename", "torch.save"]
    t: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Crash:
    """The harness interrupted the run at the scenario's crash point."""

    where: CrashWhere
    how: str  # sigkill, sigterm, stall, raise
    epoch: int | None = None
    bytes: int | None = None  # for a torn write: the bytes written before the kill
    path: str | None = None  # for a torn write: the file torn (relative to the folder)
    t: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RunError:
    """The adapter's ``run`` raised."""

    type: str
    message: str
    traceback: str
    ours: bool  # raised in the suite or the adapter, not in the trainer it drives
    t: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RunExit:
    """The adapter's ``run`` called ``sys.exit``."""

    code: int
    message: str
    t: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Done:
    """The adapter's ``run`` returned."""

    t: float = 0.0


#: Every record a run reports.
Record: TypeAlias = (Setup | TrainStart | TrainEnd | Validation | TestPass | RunEnd
                     | ItemsOnRaise | Write | Crash | RunError | RunExit | Done)

RECORD_TYPES: dict[str, type[Record]] = {
    "setup": Setup, "train_start": TrainStart, "train_end": TrainEnd, "val": Validation,
    "test": TestPass, "end": RunEnd, "items_on_raise": ItemsOnRaise, "write": Write,
    "crash": Crash, "error": RunError, "exit": RunExit, "done": Done,
}
_KIND_OF: dict[type, str] = {cls: kind for kind, cls in RECORD_TYPES.items()}


# -------------------------------------------------------------------------------- codec


def kind_of(record: Record) -> str:
    """The record's kind as its JSON line names it (``"train_start"``, ``"val"``, ...)."""
    return _KIND_OF[type(record)]


def to_json(record: Record) -> dict[str, object]:
    """One record as a JSON-able dict tagged with its kind (``"ev"``)."""
    out: dict[str, object] = {"ev": kind_of(record)}
    for f in fields(record):
        out[f.name] = _to_plain(getattr(record, f.name))
    return out


def _to_plain(value: object) -> object:
    if isinstance(value, FileSnapshot | TrainerState | ConfigSeen):
        return {f.name: _to_plain(getattr(value, f.name)) for f in fields(value)}
    return encode(value)


def from_json(data: object) -> Record:
    """The record a JSON line holds.

    Raises:
        RecordError: not a record: unknown kind, a missing field or a value of the wrong type.
    """
    if not isinstance(data, dict):
        raise RecordError(f"record: expected a JSON object, got {type(data).__name__}")
    kind = data.get("ev")
    cls = RECORD_TYPES.get(str(kind))
    if cls is None:
        raise RecordError(f"record: unknown kind {kind!r}; expected one of "
                          f"{sorted(RECORD_TYPES)}")
    return _BUILDERS[cls](FieldReader("record", str(kind), data))


def _snapshot(r: FieldReader, name: str) -> FileSnapshot | None:
    sub = r.optional_object(name, "a file snapshot")
    if sub is None:
        return None
    return FileSnapshot(path=sub.text("path"), mtime_ns=sub.integer("mtime_ns"),
                        size=sub.integer("size"), epoch=sub.opt_int("epoch"),
                        step=sub.opt_int("step"), weights=sub.opt_weights("weights"),
                        error=sub.opt_text("error"))


def _state(r: FieldReader, name: str) -> TrainerState:
    sub = r.object(name, "a trainer state")
    return TrainerState(weights=sub.weights("weights"), optimizer=sub.nested("optimizer"),
                        scheduler=sub.nested("scheduler"),
                        rng=sub.strings("rng", "a dict of generator names to digests"))


def _config(r: FieldReader, name: str) -> ConfigSeen:
    sub = r.optional_object(name, "the config values seen")
    if sub is None:
        return ConfigSeen()
    return ConfigSeen(wandb_mode=sub.opt_text("wandb_mode"),
                      save_preds_enable=sub.opt_flag("save_preds_enable"),
                      num_epochs=sub.opt_int("num_epochs"))


def _phase(r: FieldReader) -> Phase:
    phase = r.text("phase")
    if phase not in ("first", "epoch"):
        raise r.bad("phase", "'first' or 'epoch'")
    return "first" if phase == "first" else "epoch"


_BUILDERS: dict[type, Callable[[FieldReader], Record]] = {
    Setup: lambda r: Setup(epoch=r.integer("epoch"), train_step=r.integer("train_step"),
                           train_len=r.integer("train_len"), config=_config(r, "config")),
    TrainStart: lambda r: TrainStart(
        epoch=r.integer("epoch"), train_step=r.integer("train_step"), state=_state(r, "state"),
        last_file_epoch=r.opt_int("last_file_epoch"), best_file=_snapshot(r, "best_file")),
    TrainEnd: lambda r: TrainEnd(
        epoch=r.integer("epoch"), train_step=r.integer("train_step"), batches=r.integer("batches"),
        optimizer_steps=r.integer("optimizer_steps"), loader_len=r.integer("loader_len"),
        loader_batch_size=r.opt_int("loader_batch_size"), eval_lens=r.sizes("eval_lens"),
        eval_batches=r.sizes("eval_batches")),
    Validation: lambda r: Validation(
        epoch=r.integer("epoch"), phase=_phase(r), score=r.number("score", math.nan),
        improved=r.flag("improved"), stop=r.flag("stop"), weights=r.weights("weights"),
        best_file=_snapshot(r, "best_file")),
    TestPass: lambda r: TestPass(weights=r.weights("weights")),
    RunEnd: lambda r: RunEnd(train_step=r.integer("train_step"),
                             final_weights=r.weights("final_weights"),
                             best_model=r.opt_weights("best_model"),
                             best_file=_snapshot(r, "best_file"),
                             user_config=None if r.optional_object("user_config", "a config")
                             is None else _config(r, "user_config")),
    ItemsOnRaise: lambda r: ItemsOnRaise(changed=r.names("changed"),
                                         unchanged=r.names("unchanged")),
    Write: lambda r: Write(path=r.text("path"), via=_via(r), t=r.number("t", 0.0)),
    Crash: lambda r: Crash(where=_where(r), how=r.text("how"), epoch=r.opt_int("epoch"),
                           bytes=r.opt_int("bytes"), path=r.opt_text("path"),
                           t=r.number("t", 0.0)),
    RunError: lambda r: RunError(type=r.text("type"), message=r.text("message"),
                                 traceback=r.text("traceback", ""), ours=r.flag("ours"),
                                 t=r.number("t", 0.0)),
    RunExit: lambda r: RunExit(code=r.integer("code"), message=r.text("message", ""),
                               t=r.number("t", 0.0)),
    Done: lambda r: Done(t=r.number("t", 0.0)),
}


def _via(r: FieldReader) -> Literal["open", "rename", "torch.save"]:
    via = r.text("via")
    if via == "open":
        return "open"
    if via == "rename":
        return "rename"
    if via == "torch.save":
        return "torch.save"
    raise r.bad("via", "'open', 'rename' or 'torch.save'")


def _where(r: FieldReader) -> CrashWhere:
    where = r.text("where")
    for known in ("train_start", "train_end", "val_start", "val_after_save", "write"):
        if where == known:
            return known
    raise r.bad("where", "a crash point")
