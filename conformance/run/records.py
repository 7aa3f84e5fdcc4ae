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
from typing import Literal, TypeAlias

import torch

from trainspec.conformance.run.scenario import CrashWhere

__all__ = [
    "RECORD_TYPES",
    "ConfigSeen",
    "Crash",
    "Done",
    "FileRecord",
    "FileSnapshot",
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
    "from_legacy_event",
    "kind_of",
    "to_json",
]

Weights: TypeAlias = dict[str, torch.Tensor]
# nested state as torch gives it (an optimizer's state_dict): dicts, lists, tensors, numbers
Nested: TypeAlias = object
Phase = Literal["first", "epoch"]
StatePart = Literal["weights", "optimizer", "scheduler", "rng"]


class RecordError(ValueError):
    """A record line that does not decode: the message names the record kind and the field."""


# -------------------------------------------------------------------------- shared parts


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSnapshot:
    """A checkpoint file as seen at one moment: identity, the epoch and step it records, the
    model weights it holds (loaded weights-only, in the worker), or why it does not load."""

    path: str
    mtime_ns: int
    size: int
    epoch: int | None = None
    step: int | None = None
    weights: Weights | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainerState:
    """What a resume must restore, captured at an epoch's start (RES-2, RES-4, FT-*).

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
    """Config values as the trainer holds them after set-up (DBG-3, DBG-6): None when the
    trainer has no such key."""

    wandb_mode: str | None = None
    save_preds_enable: bool | None = None


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


Record: TypeAlias = (Setup | TrainStart | TrainEnd | Validation | TestPass | RunEnd | Write
                     | Crash | RunError | RunExit | Done)

RECORD_TYPES: dict[str, type[Record]] = {
    "setup": Setup, "train_start": TrainStart, "train_end": TrainEnd, "val": Validation,
    "test": TestPass, "end": RunEnd, "write": Write, "crash": Crash, "error": RunError,
    "exit": RunExit, "done": Done,
}
_KIND_OF: dict[type, str] = {cls: kind for kind, cls in RECORD_TYPES.items()}


# -------------------------------------------------------------------------------- codec


def encode(obj: object) -> object:
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
        return obj  # NaN and infinities travel as JSON's NaN/Infinity literals
    return repr(obj)


def decode(obj: object) -> object:
    """Inverse of :func:`encode` (tuples come back as lists)."""
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            dtype = getattr(torch, str(obj["__tensor__"]))
            return torch.tensor(obj["data"], dtype=dtype).reshape(obj["shape"])
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return obj


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
    reader = _Reader(str(kind), data)
    built = _BUILDERS[cls](reader)
    return built


# the event dicts ``RunContext.emit`` took before records, under their old key names; goes
# with ``emit`` once every producer records
_LEGACY_KEYS = {"setup": {"train_len_seen": "train_len", "cfg_seen": "config"},
                "train_end": {"loader_lens": "eval_lens", "loader_batches": "eval_batches"}}
_LEGACY_CONFIG = {"wandb.mode": "wandb_mode", "save_preds.enable": "save_preds_enable"}


def from_legacy_event(event: Mapping[str, object]) -> Record:
    """The record an old-style event dict stands for (``emit``'s argument).

    Raises:
        RecordError: as :func:`from_json` does.
    """
    data = dict(event)
    for old, new in _LEGACY_KEYS.get(str(data.get("ev")), {}).items():
        if old in data and new not in data:
            data[new] = data.pop(old)
    config = data.get("config")
    if data.get("ev") == "setup" and isinstance(config, Mapping):
        data["config"] = {_LEGACY_CONFIG.get(str(k), str(k)): v for k, v in config.items()}
    return from_json(data)


class _Reader:
    """Typed access to one record's fields, each failure naming the record and the field."""

    def __init__(self, kind: str, data: Mapping[str, object]) -> None:
        self.kind, self.data = kind, data

    def _bad(self, name: str, expected: str) -> RecordError:
        value = self.data.get(name, "<missing>")
        return RecordError(f"record {self.kind!r}: field {name!r} should be {expected}, got "
                           f"{str(value)[:80]!r}")

    def integer(self, name: str) -> int:
        value = self.data.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise self._bad(name, "an integer")

    def opt_int(self, name: str) -> int | None:
        return None if self.data.get(name) is None else self.integer(name)

    def number(self, name: str, default: float | None = None) -> float:
        value = decode(self.data.get(name))
        if value is None and default is not None:
            return default
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise self._bad(name, "a number")

    def text(self, name: str, default: str | None = None) -> str:
        value = self.data.get(name, default)
        if isinstance(value, str):
            return value
        raise self._bad(name, "a string")

    def flag(self, name: str) -> bool:
        value = self.data.get(name)
        if isinstance(value, bool):
            return value
        raise self._bad(name, "true or false")

    def weights(self, name: str) -> Weights:
        value = decode(self.data.get(name))
        if isinstance(value, dict) and all(isinstance(v, torch.Tensor) for v in value.values()):
            return {str(k): v for k, v in value.items()}
        raise self._bad(name, "a dict of tensors")

    def opt_weights(self, name: str) -> Weights | None:
        return None if self.data.get(name) is None else self.weights(name)

    def snapshot(self, name: str) -> FileSnapshot | None:
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._bad(name, "a file snapshot")
        sub = _Reader(f"{self.kind}.{name}", value)
        return FileSnapshot(path=sub.text("path"), mtime_ns=sub.integer("mtime_ns"),
                            size=sub.integer("size"), epoch=sub.opt_int("epoch"),
                            step=sub.opt_int("step"), weights=sub.opt_weights("weights"),
                            error=None if value.get("error") is None else sub.text("error"))

    def sizes(self, name: str) -> dict[str, int | None]:
        value = self.data.get(name, {})
        if not isinstance(value, dict):
            raise self._bad(name, "a dict of loader names to sizes")
        out: dict[str, int | None] = {}
        for key, size in value.items():
            if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
                raise self._bad(name, "a dict of loader names to integers or null")
            out[str(key)] = size
        return out

    def state(self, name: str) -> TrainerState:
        value = self.data.get(name)
        if not isinstance(value, dict):
            raise self._bad(name, "a trainer state")
        sub = _Reader(f"{self.kind}.{name}", value)
        rng = value.get("rng") or {}
        if not isinstance(rng, dict):
            raise sub._bad("rng", "a dict of generator names to digests")
        return TrainerState(weights=sub.weights("weights"),
                            optimizer=decode(value.get("optimizer")),
                            scheduler=decode(value.get("scheduler")),
                            rng={str(k): str(v) for k, v in rng.items()})

    def config(self, name: str) -> ConfigSeen:
        value = self.data.get(name) or {}
        if not isinstance(value, dict):
            raise self._bad(name, "the config values seen")
        mode, preds = value.get("wandb_mode"), value.get("save_preds_enable")
        return ConfigSeen(wandb_mode=None if mode is None else str(mode),
                          save_preds_enable=None if preds is None else bool(preds))


def _phase(r: _Reader) -> Phase:
    phase = r.text("phase")
    if phase not in ("first", "epoch"):
        raise r._bad("phase", "'first' or 'epoch'")
    return "first" if phase == "first" else "epoch"


_BUILDERS: dict[type, Callable[[_Reader], Record]] = {
    Setup: lambda r: Setup(epoch=r.integer("epoch"), train_step=r.integer("train_step"),
                           train_len=r.integer("train_len"), config=r.config("config")),
    TrainStart: lambda r: TrainStart(
        epoch=r.integer("epoch"), train_step=r.integer("train_step"), state=r.state("state"),
        last_file_epoch=r.opt_int("last_file_epoch"), best_file=r.snapshot("best_file")),
    TrainEnd: lambda r: TrainEnd(
        epoch=r.integer("epoch"), train_step=r.integer("train_step"), batches=r.integer("batches"),
        optimizer_steps=r.integer("optimizer_steps"), loader_len=r.integer("loader_len"),
        loader_batch_size=r.opt_int("loader_batch_size"), eval_lens=r.sizes("eval_lens"),
        eval_batches=r.sizes("eval_batches")),
    Validation: lambda r: Validation(
        epoch=r.integer("epoch"), phase=_phase(r), score=r.number("score", math.nan),
        improved=r.flag("improved"), stop=r.flag("stop"), weights=r.weights("weights"),
        best_file=r.snapshot("best_file")),
    TestPass: lambda r: TestPass(weights=r.weights("weights")),
    RunEnd: lambda r: RunEnd(train_step=r.integer("train_step"),
                             final_weights=r.weights("final_weights"),
                             best_model=r.opt_weights("best_model"),
                             best_file=r.snapshot("best_file")),
    Write: lambda r: Write(path=r.text("path"), via=_via(r), t=r.number("t", 0.0)),
    Crash: lambda r: Crash(where=_where(r), how=r.text("how"), epoch=r.opt_int("epoch"),
                           bytes=r.opt_int("bytes"), t=r.number("t", 0.0)),
    RunError: lambda r: RunError(type=r.text("type"), message=r.text("message"),
                                 traceback=r.text("traceback", ""), ours=r.flag("ours"),
                                 t=r.number("t", 0.0)),
    RunExit: lambda r: RunExit(code=r.integer("code"), message=r.text("message", ""),
                               t=r.number("t", 0.0)),
    Done: lambda r: Done(t=r.number("t", 0.0)),
}


def _via(r: _Reader) -> Literal["open", "rename", "torch.save"]:
    via = r.text("via")
    if via == "open":
        return "open"
    if via == "rename":
        return "rename"
    if via == "torch.save":
        return "torch.save"
    raise r._bad("via", "'open', 'rename' or 'torch.save'")


def _where(r: _Reader) -> CrashWhere:
    where = r.text("where")
    for known in ("train_start", "train_end", "val_start", "val_after_save", "write"):
        if where == known:
            return known
    raise r._bad("where", "a crash point")


# ------------------------------------------------------------------------- file records


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
    role: Literal["last", "best", "epoch"] | None = None
    epoch: int | None = None
    step: int | None = None
    keys: tuple[str, ...] = ()
    types: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None
    holds: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return self.relpath.rsplit("/", 1)[-1]

    def to_json(self) -> dict[str, object]:
        return {"relpath": self.relpath, "size": self.size, "mtime_ns": self.mtime_ns,
                "role": self.role, "epoch": self.epoch, "step": self.step,
                "keys": list(self.keys), "types": dict(self.types), "error": self.error,
                "holds": None if self.holds is None else list(self.holds)}

    @classmethod
    def from_json(cls, entry: object) -> FileRecord:
        """Raises RecordError naming the field when ``entry`` is not a file description."""
        if not isinstance(entry, dict):
            raise RecordError(f"file description: expected a JSON object, got "
                              f"{type(entry).__name__}")
        r = _Reader(f"file {entry.get('relpath')!r}", entry)
        role = entry.get("role")
        if role not in (None, "last", "best", "epoch"):
            raise r._bad("role", "'last', 'best', 'epoch' or null")
        types = entry.get("types") or {}
        holds = entry.get("holds")
        if not isinstance(types, dict) or not isinstance(entry.get("keys", []), list) or (
                holds is not None and not isinstance(holds, list)):
            raise r._bad("keys", "a list of names, types a dict, holds a list or null")
        return cls(relpath=r.text("relpath"), size=r.integer("size"),
                   mtime_ns=r.integer("mtime_ns"), role=role, epoch=r.opt_int("epoch"),
                   step=r.opt_int("step"),
                   keys=tuple(str(k) for k in entry.get("keys", [])),
                   types={str(k): str(v) for k, v in types.items()},
                   error=None if entry.get("error") is None else str(entry["error"]),
                   holds=None if holds is None else tuple(str(h) for h in holds))
