"""Poutyne's checkpoint files as the suite reads them: names, roles, epochs, weights.

A ``ModelBundle`` keeps its run in one directory (``docs/frameworks/poutyne.md``): the last
checkpoint is the set of files a resume reads there (``checkpoint.ckpt``, ``checkpoint.optim``,
``checkpoint.randomstate``, ``lr_sched_<i>.lrsched`` and ``last.epoch``), described as one
record for the directory, role "last"; each best checkpoint is ``checkpoint_epoch_<e>.ckpt``
and each periodic one the adapter's ``epoch_<e>.ckpt`` (``<e>`` one-based, as Poutyne fills
``{epoch}``). Torch files are loaded weights-only, never unpickled. This module imports no
Poutyne.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from trainspec.conformance.run.files import (
    FileRecord,
    Role,
    describe_files,
    error_line,
    load_dict,
    top_level,
)
from trainspec.conformance.run.recording import FileContent, snapshot_file
from trainspec.conformance.run.records import FileSnapshot

__all__ = ["BUNDLE_DIR", "EPOCH_FILE", "MODEL_FILE", "PERIODIC_NAME", "RESUME_FILES",
           "bundle_epoch", "bundle_record", "describe_poutyne_files", "file_role", "load_weights",
           "name_epoch", "newest_best", "snapshot"]

BUNDLE_DIR = "model_bundle"  # the ModelBundle's directory under ckpt.dir
# ModelBundle's own names (MODEL_CHECKPOINT_FILENAME, OPTIMIZER_CHECKPOINT_FILENAME,
# RANDOM_STATE_CHECKPOINT_FILENAME, EPOCH_FILENAME, LR_SCHEDULER_FILENAME,
# BEST_CHECKPOINT_FILENAME)
MODEL_FILE = "checkpoint.ckpt"
OPTIMIZER_FILE = "checkpoint.optim"
RANDOM_FILE = "checkpoint.randomstate"
EPOCH_FILE = "last.epoch"
RESUME_FILES = (MODEL_FILE, OPTIMIZER_FILE, RANDOM_FILE, EPOCH_FILE)
PERIODIC_NAME = "epoch_{epoch}.ckpt"  # the adapter's periodic ModelCheckpoint
_BEST = re.compile(r"^checkpoint_epoch_(\d+)\.ckpt$")
_PERIODIC = re.compile(r"^epoch_(\d+)\.ckpt$")
_LR_FILE = re.compile(r"^lr_sched_(\d+)\.lrsched$")


def file_role(name: str) -> Role | None:
    """The role of a single file: a best or a periodic checkpoint (the last checkpoint is a
    directory's files together, see :func:`bundle_record`)."""
    if _BEST.match(name):
        return "best"
    return "epoch" if _PERIODIC.match(name) else None


def name_epoch(name: str) -> int | None:
    """The zero-based epoch in a best or periodic file's name (Poutyne fills ``{epoch}``
    one-based); None for any other name."""
    match = _BEST.match(name) or _PERIODIC.match(name)
    return None if match is None else int(match.group(1)) - 1


def bundle_epoch(directory: Path) -> int | None:
    """The zero-based epoch a bundle's ``last.epoch`` records (ModelBundle prints the one-based
    number of the last completed epoch there); None when it is absent or unreadable."""
    try:
        return int((directory / EPOCH_FILE).read_text().strip()) - 1
    except (OSError, ValueError):
        return None


def _numpy_allowlist() -> list[Any]:
    """numpy's array types, allowlisted for a weights-only load of ``checkpoint.randomstate``
    (Poutyne's ``save_random_states`` stores numpy's generator state as an array)."""
    import numpy

    core: Any = getattr(numpy, "_core", None) or numpy.core
    return [core.multiarray._reconstruct, numpy.ndarray, numpy.dtype,
            type(numpy.dtype(numpy.uint32))]


def _load_torch_file(path: Path) -> tuple[str | None, str | None]:
    """(the type of what a torch file holds and how it loaded, or why it does not load):
    weights-only, then weights-only with numpy's array types allowlisted."""
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
        return type(content).__name__, None
    except Exception as e:  # the file is what is being judged: record, do not raise
        plain = error_line(e)
    try:
        with torch.serialization.safe_globals(_numpy_allowlist()):
            content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return None, plain
    return f"{type(content).__name__} (weights-only, numpy arrays allowlisted)", None


def _resume_parts(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file()
                  and (p.name in RESUME_FILES or _LR_FILE.match(p.name)))


def bundle_record(directory: Path, root: Path) -> FileRecord | None:
    """A bundle directory's last checkpoint as one record (role "last"): the files a resume
    reads are its keys; its epoch is ``last.epoch``'s; no step is recorded anywhere. None when
    the directory holds none of those files."""
    parts = _resume_parts(directory)
    if not parts:
        return None
    stats = [p.stat() for p in parts]
    names = {p.name for p in parts}
    problems = [f"no {name}" for name in RESUME_FILES if name not in names]
    types: dict[str, str] = {}
    epoch = bundle_epoch(directory)
    if EPOCH_FILE in names:
        types[EPOCH_FILE] = "text"
        if epoch is None:
            problems.append(f"{EPOCH_FILE} holds no epoch number")
    for part in parts:
        if part.name == EPOCH_FILE:
            continue
        loaded, error = _load_torch_file(part)
        if error is not None:
            problems.append(f"{part.name} does not load weights-only ({error})")
        types[part.name] = loaded or "does not load weights-only"
    # in the spec's terms (CKPT-1): Poutyne records no step, no run id and no config
    present = {"epoch": epoch is not None, "model": MODEL_FILE in names,
               "optimizer": OPTIMIZER_FILE in names,
               "scheduler": any(_LR_FILE.match(n) for n in names)}
    return FileRecord(
        relpath=directory.relative_to(root).as_posix(), size=sum(s.st_size for s in stats),
        mtime_ns=max(s.st_mtime_ns for s in stats), role="last", epoch=epoch,
        keys=tuple(sorted(names)), types=types,
        error="; ".join(problems) if problems else None,
        holds=tuple(name for name, held in present.items() if held))


def _read_single(path: Path, record: FileRecord) -> FileRecord:
    """A best or periodic file: the network's bare state_dict (Model.save_weights)."""
    content, error = load_dict(path)
    if content is None:
        return dataclasses.replace(record, error=error)
    keys = top_level(content)
    return dataclasses.replace(record, epoch=name_epoch(path.name), keys=tuple(keys["keys"]),
                               types=keys["types"], holds=("epoch", "model"))


def describe_poutyne_files(root: Path) -> list[FileRecord]:
    """Every file under ``root`` (best and periodic checkpoints read weights-only), then every
    directory holding a bundle's resume files as its "last" record."""
    records = describe_files(root, file_role, _read_single)
    if not root.is_dir():
        return records
    directories = sorted({p.parent for p in root.rglob("*") if p.is_file()
                          and (p.name in RESUME_FILES or _LR_FILE.match(p.name))})
    for directory in directories:
        record = bundle_record(directory, root)
        if record is not None:
            records.append(record)
    return records


def _reader(name: str) -> FileContent:
    def read(content: Mapping[str, object]
             ) -> tuple[int | None, int | None, Mapping[str, object]]:
        return name_epoch(name), None, content
    return read


def snapshot(path: Path | None) -> FileSnapshot | None:
    """A best or periodic file as seen now; None when there is none, or no longer one."""
    return None if path is None else snapshot_file(path, _reader(path.name))


def newest_best(directory: Path) -> Path | None:
    """The most recently written best checkpoint in a bundle's directory."""
    if not directory.is_dir():
        return None
    found: list[tuple[int, Path]] = []
    for path in directory.iterdir():
        if _BEST.match(path.name):
            try:
                found.append((path.stat().st_mtime_ns, path))
            except OSError:
                continue
    return max(found)[1] if found else None


def load_weights(path: Path) -> Mapping[str, object] | None:
    """A best file's weights, loaded weights-only; None when it does not load."""
    content, _ = load_dict(path)
    return content
