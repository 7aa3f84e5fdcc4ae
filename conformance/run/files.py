"""What a run left in its checkpoint folder, described as data.

The checks never parse checkpoint files themselves: an adapter describes them, in a worker
process, as JSON-able entries (``relpath``, ``role``, ``epoch``, ``step``, the top-level ``keys``
and their ``types``, a load ``error`` and a ``weights_only_error``). Trainers in the seed's shape
write ``last.pt``, ``best.pt`` and ``epoch_<e>.pt`` holding ``epoch`` and ``train_step``:
:func:`describe_seed_files` reads those with :func:`read_checkpoint`. A framework adapter maps its
own files onto the same roles (its ``describe_checkpoints(root)``), so every checkpoint clause
reads one vocabulary.

The file format never gates behaviour: resume, finetune and best-file checks judge what a file
holds whatever its format, and whether it loads with ``torch.load(weights_only=True)`` is a fact
of its own (``weights_only_error``), judged under CKPT-1 alone. Files are read by the trainer's
own reader (:mod:`trainspec.conformance.run.reading`): weights-only, else with the file's own
classes and plain data, else (a file the trainer wrote in the run, never one the suite planted)
by the adapter's ``load`` or a full unpickle in a process forked for it. It runs in a worker or
a run's child, which already run the trainer's code; the suite's own process never unpickles
anything.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainspec.conformance.run.jsonfields import FieldReader, RecordError
from trainspec.conformance.run.reading import (
    CheckpointRead,
    actionable_line,
    error_line,
    read_checkpoint,
)

__all__ = ["ROLES", "CheckpointRead", "FileRecord", "Role", "actionable_line", "as_int",
           "describe_files", "describe_seed_files", "error_line", "file_record", "load_dict",
           "read_checkpoint", "seed_role", "top_level"]

#: What a checkpoint file is for: the newest (``last``), the best, or an epoch's own.
Role = Literal["last", "best", "epoch"]
#: Every :data:`Role`.
ROLES: tuple[Role, ...] = ("last", "best", "epoch")

_EPOCH_FILE = re.compile(r"^epoch_\d+\.pt$")


def seed_role_name(role: object) -> Role | None:
    """``role`` as a :data:`Role` (validated by the caller), or None."""
    for known in ROLES:
        if role == known:
            return known
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class FileRecord:
    """A file left under the run's checkpoint folder, as its adapter describes it.

    ``role`` is "last", "best" or "epoch" for a checkpoint, None for anything else;
    ``keys``/``types`` are its top-level entries; ``error`` says why it does not load at all,
    as its trainer loads it (nothing in it can then be judged); ``weights_only_error`` why it
    does not load with ``torch.load(weights_only=True)`` (CKPT-1's matter alone: the rest of
    the record, read the trainer's way, is judged as usual). An adapter that reads its files
    weights-only only may leave ``weights_only_error`` unset and say why in ``error``.
    ``holds``, when the adapter gives it, names what the file holds in the spec's terms,
    whatever the framework's own key names: any of "epoch", "step", "run_id", "config",
    "model", "optimizer", "scheduler" (CKPT-1 then judges it instead of the seed's key names).
    """

    relpath: str
    size: int
    mtime_ns: int
    role: Role | None = None
    epoch: int | None = None
    step: int | None = None
    keys: tuple[str, ...] = ()
    types: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None
    holds: tuple[str, ...] | None = None
    weights_only_error: str | None = None

    @property
    def name(self) -> str:
        return self.relpath.rsplit("/", 1)[-1]

    def to_json(self) -> dict[str, object]:
        return {"relpath": self.relpath, "size": self.size, "mtime_ns": self.mtime_ns,
                "role": self.role, "epoch": self.epoch, "step": self.step,
                "keys": list(self.keys), "types": dict(self.types), "error": self.error,
                "holds": None if self.holds is None else list(self.holds),
                "weights_only_error": self.weights_only_error}

    @classmethod
    def from_json(cls, entry: object) -> FileRecord:
        """Raises RecordError naming the field when ``entry`` is not a file description."""
        if not isinstance(entry, dict):
            raise RecordError(f"file description: expected a JSON object, got "
                              f"{type(entry).__name__}")
        r = FieldReader("file", str(entry.get("relpath")), entry)
        role = entry.get("role")
        if role is not None and role not in ROLES:
            raise r.bad("role", "'last', 'best', 'epoch' or null")
        return cls(relpath=r.text("relpath"), size=r.integer("size"),
                   mtime_ns=r.integer("mtime_ns"), role=seed_role_name(role),
                   epoch=r.opt_int("epoch"), step=r.opt_int("step"), keys=r.names("keys"),
                   types=r.strings("types", "a dict of key names to type names"),
                   error=r.opt_text("error"),
                   holds=None if entry.get("holds") is None else r.names("holds"),
                   weights_only_error=r.opt_text("weights_only_error"))


def seed_role(name: str) -> Role | None:
    """The role of a file under the seed's names; None for anything else (temporaries...)."""
    if name == "last.pt":
        return "last"
    if name == "best.pt":
        return "best"
    return "epoch" if _EPOCH_FILE.match(name) else None


def as_int(value: object) -> int | None:
    """``value`` when it is an int (a bool is not), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def load_dict(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A checkpoint file loaded with ``weights_only=True`` as a dict, or why it does not load
    so (never unpickled any other way)."""
    try:
        import torch  # in the worker, where it is imported already

        content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # the file is what is being judged: record, do not raise
        return None, error_line(e)
    if not isinstance(content, dict):
        return None, f"not a dict but a {type(content).__name__}"
    return content, None


def top_level(content: dict[str, Any]) -> dict[str, Any]:
    """An entry's ``keys`` and ``types``: a loaded checkpoint's top-level names and types."""
    return {"keys": sorted(str(k) for k in content),
            "types": {str(k): type(v).__name__ for k, v in content.items()}}


def describe_seed_files(root: Path) -> list[FileRecord]:
    """Every file under ``root`` under the seed's names; each ``.pt`` file (a checkpoint or a
    temporary one) read with :func:`read_checkpoint`, never trusted."""
    if not root.exists():
        return []
    return [_read_seed(path, file_record(path, root, seed_role(path.name)))
            if path.suffix == ".pt" else file_record(path, root, seed_role(path.name))
            for path in sorted(p for p in root.rglob("*") if p.is_file())]


def _read_seed(path: Path, record: FileRecord) -> FileRecord:
    read = read_checkpoint(path)
    content = read.content
    record = dataclasses.replace(record, weights_only_error=read.weights_only_error)
    if content is None:
        return dataclasses.replace(record, error=read.error)
    listing = top_level(content)
    return dataclasses.replace(record, epoch=as_int(content.get("epoch")),
                               step=as_int(content.get("train_step")),
                               keys=tuple(listing["keys"]),
                               types=dict(read.types) or listing["types"])


def file_record(path: Path, root: Path, role: Role | None) -> FileRecord:
    """A file under ``root`` before its content is read: where, how big, when, its role."""
    stat = path.stat()
    return FileRecord(relpath=path.relative_to(root).as_posix(), size=stat.st_size,
                      mtime_ns=stat.st_mtime_ns, role=role)


def describe_files(root: Path, role_of: Callable[[str], Role | None],
                   read: Callable[[Path, FileRecord], FileRecord]) -> list[FileRecord]:
    """Every file under ``root`` (sorted), each given the role ``role_of(name)`` says; a
    checkpoint (a file with a role) is then completed by ``read(path, record)``, which returns
    the record with what the file holds (``dataclasses.replace``: epoch, step, keys, types,
    holds, or the load error). An adapter's ``describe_checkpoints`` is this call with its
    framework's names and format."""
    if not root.exists():
        return []
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        record = file_record(path, root, role_of(path.name))
        out.append(read(path, record) if record.role is not None else record)
    return out
