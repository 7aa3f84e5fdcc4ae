"""A trainer's own checkpoint files in the spec's terms: :class:`FileLayout` (``trainspec.kit``).

One description serves both sides: ``describe_checkpoints`` (what the run left, judged by the
checkpoint clauses) and the :class:`~trainspec.conformance.run.shapes.Recorder` (the files as
seen at each epoch's start and after each validation). Files are read by the trainer's own
reader (:mod:`trainspec.conformance.run.reading`); a checkpoint may be a folder of several files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainspec.conformance.run.files import FileRecord, Role, as_int, file_record, top_level
from trainspec.conformance.run.reading import (
    MISSING,
    CheckpointRead,
    Loader,
    lookup,
    read_checkpoint,
)
from trainspec.conformance.run.recording import FileContent, snapshot_file
from trainspec.conformance.run.records import FileSnapshot
from trainspec.conformance.run.task import plain_weights
from trainspec.errors import AdapterError

__all__ = ["CONTENTS", "FileLayout", "Progress"]

# what a checkpoint may hold, in the spec's terms (FileRecord.holds; CKPT-1 asks for all)
#: What a file may hold, in the spec's terms (``FileLayout(holds=...)``, ``FileRecord.holds``).
CONTENTS = ("epoch", "step", "run_id", "config", "model", "optimizer", "scheduler")

#: How far a file says its run got: ``(path, content) -> (epoch, step)``.
Progress = Callable[[Path, Mapping[str, object]], tuple[int | None, int | None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class FileLayout:
    """A trainer's own checkpoint files, in the spec's terms.

    ``roles`` maps a file-name pattern (``fnmatch``: ``"checkpoint-epoch*.pth"``) to its role,
    the first match winning; a pattern that matches a folder's name (``"checkpoint-*"``)
    makes the folder one checkpoint, whose content is a dict of the files inside by their
    path without the suffix (``{"model": {...}, "trainer_state": {...}}``; JSON files read as
    JSON). ``keys`` maps what a file holds in the spec's terms (:data:`CONTENTS`) to the
    trainer's key, a dotted path through dicts and objects (``{"model": "state_dict",
    "epoch": "meta.epoch", "step": "meta.iter"}``): the model's weights are read from
    ``keys["model"]`` (``""``: the file is the model's bare state dict; in a folder without
    the key, the file inside that is a bare state dict). ``epoch_base`` is the epoch value
    the trainer's files record for the first epoch (1 for a trainer counting epochs from 1,
    or one recording the next epoch to run): records and descriptions are 0-based.
    ``progress``, when given, reads (epoch, step) in the trainer's numbering from the file's
    path and content, for a trainer that keeps them elsewhere than under a key.

    Reading: ``modules`` names packages whose classes the files may hold besides the
    trainer's own (``("omegaconf",)``); ``load``, the trainer's own reader (``lambda p:
    torch.load(p, weights_only=False)``), is used for a file the run wrote that the
    restricted reading cannot rebuild (objects rebuilt through ``getattr``), in a process
    forked for the read. Without it such a file is unpickled in full there, once a scan
    found nothing in it that reaches the system.
    """

    roles: Mapping[str, Role]
    keys: Mapping[str, str] = field(default_factory=dict)
    epoch_base: int = 0
    progress: Progress | None = None
    modules: tuple[str, ...] = ()
    load: Loader | None = None

    def role_of(self, name: str) -> Role | None:
        """The role of a file (or folder) called ``name``; None for anything else."""
        return next((role for pattern, role in self.roles.items()
                     if fnmatch.fnmatchcase(name, pattern)), None)

    def value(self, content: Mapping[str, object], spec_key: str) -> Any:
        """What ``content`` holds under the trainer's key for ``spec_key`` (:data:`MISSING`
        when nothing)."""
        return lookup(content, self.keys.get(spec_key, spec_key))

    def progress_of(self, path: Path, content: Mapping[str, object]
                    ) -> tuple[int | None, int | None]:
        """(0-based epoch, step) a loaded checkpoint records; None where it records none."""
        if self.progress is not None:
            epoch, step = self.progress(path, content)
        else:
            epoch = as_int(self.value(content, "epoch"))
            step = as_int(self.value(content, "step")) if "step" in self.keys else None
        return (None if epoch is None else epoch - self.epoch_base), step

    def weights_of(self, content: Mapping[str, object]) -> Mapping[str, object]:
        """The model's weights in a loaded checkpoint."""
        key = self.keys.get("model", "model_state_dict")
        weights = content if key == "" else lookup(content, key)
        if not isinstance(weights, Mapping) and "model" not in self.keys:
            weights = next((v for v in content.values() if _is_state_dict(v)), MISSING)
        if not isinstance(weights, Mapping):
            raise AdapterError(f"checkpoint: no model weights under {key!r} (keys "
                               f"{sorted(map(str, content))[:12]}); set FileLayout.keys['model']")
        return weights

    def reader(self, path: Path) -> FileContent:
        """What the file at ``path`` says, for ``snapshot_file``: (0-based epoch, step, the
        model's weights)."""
        def read(content: Mapping[str, object]
                 ) -> tuple[int | None, int | None, Mapping[str, object]]:
            return (*self.progress_of(path, content), self.weights_of(content))
        return read

    # ------------------------------------------------------------------------ reading

    def read(self, path: Path) -> CheckpointRead:
        """The checkpoint at ``path`` (a file, or a folder of files) as its trainer reads it."""
        if not path.is_dir():
            return read_checkpoint(path, modules=self.modules, load=self.load)
        content: dict[str, Any] = {}
        types: dict[str, str] = {}
        errors: list[str] = []
        weights_only: list[str] = []
        for inner in sorted(p for p in path.rglob("*") if p.is_file()):
            name = inner.relative_to(path).with_suffix("").as_posix()
            got = _read_json(inner) if inner.suffix == ".json" else \
                read_checkpoint(inner, modules=self.modules, load=self.load)
            if got.weights_only_error:
                weights_only.append(f"{inner.name}: {got.weights_only_error}")
            if got.content is None:
                if inner.suffix == ".json" or _is_pickle(inner):
                    errors.append(f"{inner.name}: {got.error}")
                continue
            content[name] = got.content
            types[name] = type(got.content).__name__
        return CheckpointRead(None if errors or not content else content,
                              error=errors[0] if errors else None if content else
                              "an empty folder",
                              weights_only_error=weights_only[0] if weights_only else None,
                              how="folder", types=types)

    def describe(self, root: Path) -> list[FileRecord]:
        """Every file under ``root`` (a checkpoint folder as one entry), checkpoints read as
        their trainer reads them: an adapter's ``describe_checkpoints`` is ``return
        LAYOUT.describe(root)``."""
        return [self._describe_one(path, record) if record.role is not None else record
                for path, record in self._entries(root)]

    def _entries(self, root: Path) -> Iterator[tuple[Path, FileRecord]]:
        if not root.exists():
            return
        for folder, dirs, names in os.walk(root):
            here = Path(folder)
            for d in sorted(dirs):
                role = self.role_of(d)
                if role is not None:
                    yield here / d, _folder_record(here / d, root, role)
            dirs[:] = sorted(d for d in dirs if self.role_of(d) is None)
            for name in sorted(names):
                with contextlib.suppress(OSError):  # gone while listed
                    yield here / name, file_record(here / name, root, self.role_of(name))

    def _describe_one(self, path: Path, record: FileRecord) -> FileRecord:
        read = self.read(path)
        record = dataclasses.replace(record, weights_only_error=read.weights_only_error)
        content = read.content
        if content is None:
            return dataclasses.replace(record, error=read.error)
        epoch, step = self.progress_of(path, content)
        listing = top_level(content)
        holds = tuple(c for c in CONTENTS if self.value(content, c) is not MISSING
                      or (c == "model" and self.keys.get(c) == ""))
        return dataclasses.replace(record, epoch=epoch, step=step, keys=tuple(listing["keys"]),
                                   types=dict(read.types) or listing["types"], holds=holds)

    # ------------------------------------------------------------------------ newest

    def newest(self, root: Path, role: Role) -> Path | None:
        """The most recently modified file (or folder) of ``role`` under ``root``."""
        if not root.exists():
            return None
        found = [(_mtime(p), p) for pattern, r in self.roles.items() if r == role
                 for p in root.rglob(pattern)]
        found = [(t, p) for t, p in found if t >= 0]
        return max(found)[1] if found else None

    def snapshot(self, root: Path, role: Role) -> FileSnapshot | None:
        """The newest file of ``role`` as seen now (None when there is none)."""
        return self.snapshot_of(self.newest(root, role))

    def snapshot_of(self, path: Path | None) -> FileSnapshot | None:
        """The checkpoint at ``path`` as seen now (None when there is none)."""
        if path is None:
            return None
        if not path.is_dir():
            return snapshot_file(path, self.reader(path), modules=self.modules, load=self.load)
        read = self.read(path)
        epoch = step = weights = None
        error = read.error
        if read.content is not None:
            try:
                epoch, step, found = self.reader(path)(read.content)
                weights = plain_weights(found)
            except AdapterError as e:
                error = str(e)
        return FileSnapshot(path=str(path), mtime_ns=max(_mtime(path), 0),
                            size=_size(path), epoch=epoch, step=step, weights=weights,
                            error=error)


def _is_state_dict(value: object) -> bool:
    import torch

    return isinstance(value, Mapping) and bool(value) and all(
        isinstance(v, torch.Tensor) for v in value.values())


def _is_pickle(path: Path) -> bool:
    return path.suffix in (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".tar")


def _read_json(path: Path) -> CheckpointRead:
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return CheckpointRead(None, error=f"{type(e).__name__}: {e}", how="json")
    if not isinstance(content, dict):
        return CheckpointRead(None, error=f"not a dict but a {type(content).__name__}",
                              how="json")
    return CheckpointRead(content, how="json")


def _files(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]


def _mtime(path: Path) -> int:
    """A file's modification time, or a folder's newest file's; -1 when it is gone."""
    try:
        return max((p.stat().st_mtime_ns for p in _files(path)), default=path.stat().st_mtime_ns)
    except OSError:
        return -1


def _size(path: Path) -> int:
    with contextlib.suppress(OSError):
        return sum(p.stat().st_size for p in _files(path))
    return 0


def _folder_record(path: Path, root: Path, role: Role) -> FileRecord:
    return FileRecord(relpath=path.relative_to(root).as_posix(), size=_size(path),
                      mtime_ns=max(_mtime(path), 0), role=role)
