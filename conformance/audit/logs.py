"""Reading audit logs: every line checked, every problem named by file and line.

A log is JSON and nothing else: each line is parsed with :func:`json.loads` (NaN literals
refused), every field checked for its type, and nothing a log holds is imported, unpickled or
run. A line that does not parse, a field of the wrong type, a log of another format version, a
log cut short: each raises :class:`AuditLogError`, a usage error naming ``file:line``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from trainspec.conformance.run.auditlog import FORMAT, LOG_FOLDER, MAX_BYTES, AuditConfig
from trainspec.errors import UsageError

__all__ = ["AuditLogError", "Event", "Log", "find_logs", "read_log"]

_KINDS = {"setup", "train_start", "train_end", "val", "final", "test", "end", "close",
          "overflow"}
# the fields each event must carry, with their types (None allowed where the tuple says)
_INT, _OPT_INT = (int,), (int, type(None))
_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "setup": {"epoch": _INT, "train_step": _INT},
    "train_start": {"epoch": _INT, "train_step": _INT, "files": (dict,)},
    "train_end": {"epoch": _INT, "train_step": _INT},
    "val": {"epoch": _INT, "phase": (str,), "stop": (bool,), "train_step": _OPT_INT},
    "final": {"weights": (str,)},
    "test": {"weights": (str,)},
    "end": {"train_step": _INT, "files": (dict,)},
}


class AuditLogError(UsageError):
    """An audit log that cannot be judged: the message names the file and the line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One event line of a log: its kind, its line number in the file, its fields."""

    kind: str
    line: int
    data: Mapping[str, object]

    def get(self, name: str) -> object:
        return self.data.get(name)

    def number(self, name: str) -> int:
        value = self.data[name]
        assert isinstance(value, int)  # checked when the log was read
        return value

    @property
    def score(self) -> float | None:
        value = self.data.get("score")
        if isinstance(value, str):
            return float(value)  # "NaN", "Infinity", "-Infinity": checked when read
        return None if value is None else float(value)  # type: ignore[arg-type]

    @property
    def files(self) -> dict[str, list[int]]:
        value = self.data.get("files")
        return dict(value) if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True, kw_only=True)
class Log:
    """One rank's log of one launch."""

    path: Path
    run_id: str
    rank: int
    world_size: int
    trainer: str
    started_ns: int
    run_dir: Path  # the folder the log sits in (where the trainer's files are)
    config: AuditConfig
    resumed_from: Mapping[str, object] | None
    events: tuple[Event, ...] = field(default=())
    closed: Mapping[str, object] | None = None  # the close line's fields; None: cut short

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    def where(self, event: Event | None = None) -> str:
        return f"{self.path}:{1 if event is None else event.line}"


def find_logs(paths: list[Path]) -> list[Path]:
    """The log files that ``paths`` name: a log itself, or a folder holding
    ``trainspec-audit/`` (itself, or folders below it, two levels deep at most).

    Raises:
        AuditLogError: a path that does not exist, or no log anywhere under them.
    """
    found: list[Path] = []
    for path in paths:
        if path.is_file():
            found.append(path)
            continue
        if not path.is_dir():
            raise AuditLogError(f"audit: {path}: no such file or folder. Give a run folder "
                                f"(the one holding {LOG_FOLDER}/) or a log file.")
        for pattern in (f"{LOG_FOLDER}/*.jsonl", f"*/{LOG_FOLDER}/*.jsonl",
                        f"*/*/{LOG_FOLDER}/*.jsonl"):
            found += sorted(path.glob(pattern))
        if path.name == LOG_FOLDER:
            found += sorted(path.glob("*.jsonl"))
    if not found:
        raise AuditLogError(
            f"audit: no audit log in {', '.join(map(str, paths))} (looked for "
            f"{LOG_FOLDER}/*.jsonl). Record the run in audit mode first: trainspec.kit.audited"
            "(MyTrainer), or a framework's audit callback (docs/audit.md).")
    unique: dict[Path, None] = dict.fromkeys(p.resolve() for p in found)
    return list(unique)


def read_log(path: Path) -> Log:
    """One log, every line checked.

    Raises:
        AuditLogError: unreadable, not JSON, another format version, a field of the wrong
            type, an unknown event, line numbers out of order, or a last line cut short.
    """
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 2**16)
    except OSError as e:
        raise AuditLogError(f"{path}: cannot read the audit log ({e})") from None
    if len(raw) > MAX_BYTES + 2**15:
        raise AuditLogError(f"{path}: larger than an audit log can be ({MAX_BYTES} bytes)")
    if not raw:
        raise AuditLogError(f"{path}:1: empty file, not an audit log (no header line)")
    if not raw.endswith(b"\n"):
        count = raw.count(b"\n") + 1
        raise AuditLogError(f"{path}:{count}: the last line is cut short (no newline at its "
                            "end): the log was truncated")
    lines = raw.decode("utf-8", errors="replace").splitlines()
    header = _parse(path, 1, lines[0])
    log = _header(path, header)
    events: list[Event] = []
    closed: Mapping[str, object] | None = None
    for number, text in enumerate(lines[1:], start=2):
        data = _parse(path, number, text)
        event = _event(path, number, data, expected_n=len(events) + 1)
        if closed is not None:
            raise AuditLogError(f"{path}:{number}: an event after the close line")
        if event.kind == "close":
            closed = data
        events.append(event)
    return replace(log, events=tuple(events), closed=closed)


def _reject_constant(name: str) -> float:
    raise ValueError(f"the literal {name} is not JSON (scores are written as strings)")


def _parse(path: Path, number: int, text: str) -> dict[str, object]:
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise AuditLogError(f"{path}:{number}: not a JSON line ({e}); the log is corrupt") \
            from None
    if not isinstance(data, dict):
        raise AuditLogError(f"{path}:{number}: expected a JSON object, got "
                            f"{type(data).__name__}")
    return data


def _header(path: Path, data: Mapping[str, object]) -> Log:
    version = data.get("format")
    if version != FORMAT:
        raise AuditLogError(f"{path}:1: format {version!r}; this trainspec reads {FORMAT!r}. "
                            "Audit the log with the trainspec version that wrote it.")
    def need(name: str, kinds: tuple[type, ...]) -> object:
        return _field(path, 1, "header", data, name, kinds)

    raw_config = need("config", (dict,))
    assert isinstance(raw_config, dict)
    known = AuditConfig.__dataclass_fields__
    config = {k: v for k, v in raw_config.items() if k in known}
    for key, value in config.items():
        if value is not None and not isinstance(value, bool | int):
            raise AuditLogError(f"{path}:1: header config {key!r} is {value!r}; expected a "
                                "number, a boolean or null")
    resumed = need("resumed_from", (dict, type(None)))
    rank, world = need("rank", _INT), need("world_size", _INT)
    if not isinstance(rank, int) or not isinstance(world, int) or not 0 <= rank < world:
        raise AuditLogError(f"{path}:1: rank {rank} of world size {world}")
    return Log(path=path, run_id=str(need("run_id", (str,))), rank=rank, world_size=world,
               trainer=str(need("trainer", (str,))), started_ns=int(str(need("started_ns",
                                                                              _INT))),
               run_dir=path.resolve().parent.parent, config=AuditConfig(**config),
               resumed_from=resumed if isinstance(resumed, dict) else None)


def _field(path: Path, number: int, what: str, data: Mapping[str, object], name: str,
           kinds: tuple[type, ...]) -> object:
    value = data.get(name)
    is_int_only = int in kinds and bool not in kinds
    if name not in data or not isinstance(value, kinds) or (
            is_int_only and isinstance(value, bool)):
        expected = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise AuditLogError(f"{path}:{number}: {what} field {name!r} is "
                            f"{'missing' if name not in data else repr(value)[:60]}; "
                            f"expected {expected}")
    return value


def _event(path: Path, number: int, data: Mapping[str, object], *, expected_n: int) -> Event:
    kind = data.get("ev")
    if kind not in _KINDS:
        raise AuditLogError(f"{path}:{number}: unknown event {kind!r}; expected one of "
                            f"{sorted(_KINDS)}")
    assert isinstance(kind, str)
    if data.get("n") != expected_n:
        raise AuditLogError(f"{path}:{number}: event number {data.get('n')!r}, expected "
                            f"{expected_n}: lines are missing or out of order")
    for name, kinds in _FIELDS.get(kind, {}).items():
        _field(path, number, f"{kind!r} event", data, name, kinds)
    if kind == "val":
        _check_val(path, number, data)
    files = data.get("files", {})
    if not isinstance(files, dict) or not all(
            isinstance(v, list) and len(v) == 2 and all(type(x) is int for x in v)
            for v in files.values()):
        raise AuditLogError(f"{path}:{number}: {kind!r} files: expected an object of file "
                            "names to [size, mtime_ns]")
    return Event(kind=kind, line=number, data=data)


def _check_val(path: Path, number: int, data: Mapping[str, object]) -> None:
    score = data.get("score")
    if isinstance(score, str):
        if score not in ("NaN", "Infinity", "-Infinity"):
            raise AuditLogError(f"{path}:{number}: 'val' score {score!r}; expected a number, "
                                "\"NaN\", \"Infinity\" or \"-Infinity\"")
    elif score is not None and (isinstance(score, bool) or not isinstance(score, int | float)
                                or not math.isfinite(score)):
        raise AuditLogError(f"{path}:{number}: 'val' score {score!r}; expected a number")
    if data.get("phase") not in ("first", "epoch"):
        raise AuditLogError(f"{path}:{number}: 'val' phase {data.get('phase')!r}; expected "
                            "'first' or 'epoch'")
    if data.get("improved") is not None and not isinstance(data.get("improved"), bool):
        raise AuditLogError(f"{path}:{number}: 'val' improved {data.get('improved')!r}; "
                            "expected true, false or null")
    if score is not None and not isinstance(data.get("weights"), str):
        raise AuditLogError(f"{path}:{number}: 'val' weights {data.get('weights')!r}; "
                            "expected a digest")
