"""Keras's checkpoint files as the suite reads them: names, roles, epoch and step, weights.

ModelCheckpoint writes ``.keras`` archives, BackupAndRestore a ``.weights.h5`` and a JSON
epoch count (see ``docs/frameworks/keras.md``). They are read with zipfile, json and h5py,
never unpickled; h5py is imported inside the functions only.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from trainspec.conformance.run.files import FileRecord, Role, describe_files, error_line
from trainspec.conformance.run.records import FileSnapshot, Weights

__all__ = ["BACKUP_DIR", "BACKUP_WEIGHTS", "BEST_FILE", "PERIODIC_PATTERN", "WeightNames",
           "backup_epoch", "describe_keras_files", "file_role", "snapshot"]

BEST_FILE = "best.keras"
BACKUP_DIR = "backup"
# BackupAndRestore's own names inside its backup_dir
BACKUP_WEIGHTS = "latest.weights.h5"
BACKUP_METADATA = "training_metadata.json"
PERIODIC_PATTERN = "epoch{epoch:02d}.keras"
_PERIODIC_FILE = re.compile(r"^epoch\d+\.keras$")

# each layer's name and its variables' names (``layer/variable``), in the order Keras saves them
WeightNames = list[tuple[str, list[str]]]


def file_role(name: str) -> Role | None:
    """The role of a file under the adapter's names: BackupAndRestore's weights are the last
    checkpoint, ModelCheckpoint's best and periodic ``.keras`` files the others."""
    if name == BACKUP_WEIGHTS:
        return "last"
    if name == BEST_FILE:
        return "best"
    return "epoch" if _PERIODIC_FILE.match(name) else None


def _h5_bytes(path: Path) -> io.BytesIO | Path:
    """What h5py opens for a Keras file: the ``.weights.h5`` itself, or the weights inside a
    ``.keras`` zip archive (read as bytes; nothing in it is unpickled or executed)."""
    if path.suffix == ".keras":
        with zipfile.ZipFile(path) as archive:
            return io.BytesIO(archive.read("model.weights.h5"))
    return path


def _stored_step(h5: Any) -> int | None:
    """The optimizer's iteration counter as stored (its first variable; raw batches seen when
    gradient accumulation is on), or None when the file holds no optimizer."""
    value = h5.get("optimizer/vars/0")
    if value is None or value.shape != () or value.dtype.kind not in "iu":
        return None
    return int(value[()])


def backup_epoch(weights: Path) -> int | None:
    """The epoch of a BackupAndRestore backup: its metadata holds the number of epochs done
    (the next epoch to run), so the backed-up epoch is one less."""
    meta = weights.parent / BACKUP_METADATA
    try:
        epoch = json.loads(meta.read_text())["epoch"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return epoch - 1 if isinstance(epoch, int) and not isinstance(epoch, bool) else None


def _read(path: Path, record: FileRecord) -> FileRecord:
    """Top-level entries, epoch and step of a Keras checkpoint, and what it holds in the
    spec's terms (CKPT-1): a .keras archive's config.json is the model's architecture, not the
    run's config; Keras records no run id, and its schedules hold no state to save."""
    import h5py  # type: ignore[import-untyped]

    keys: tuple[str, ...] = ()
    types: dict[str, str] = {}
    try:
        if path.suffix == ".keras":
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
            keys, types = tuple(sorted(names)), dict.fromkeys(names, "file")
        with h5py.File(_h5_bytes(path), "r") as h5:
            if path.suffix != ".keras":
                keys = tuple(sorted(h5.keys()))
                types = {k: type(v).__name__ for k, v in h5.items()}
            step = _stored_step(h5)
            has_model, has_optimizer = "layers" in h5, "optimizer" in h5
    except Exception as e:  # the file is what is being judged: record, do not raise
        return dataclasses.replace(record, keys=keys, types=types, error=error_line(e))
    # a .keras archive (config.json, metadata.json, model.weights.h5) stores no epoch;
    # BackupAndRestore keeps its epoch beside its weights
    epoch = backup_epoch(path) if path.name == BACKUP_WEIGHTS else None
    present = {"epoch": epoch is not None, "step": step is not None, "model": has_model,
               "optimizer": has_optimizer}
    return dataclasses.replace(record, epoch=epoch, step=step, keys=keys, types=types,
                               holds=tuple(name for name, held in present.items() if held))


def describe_keras_files(root: Path) -> list[FileRecord]:
    """Every file under ``root``, Keras's checkpoints read without unpickling (see
    ``KerasAdapter.describe_checkpoints``)."""
    return describe_files(root, file_role, _read)


def _file_weights(h5: Any, names: WeightNames) -> Weights:
    """A Keras weights file's layer variables under the live model's names: Keras stores each
    layer's variables as ``layers/<key>/vars/<i>``, the layer's name an attribute of ``vars``."""
    groups = {str(g.attrs.get("name", "")): g
              for g in (layer.get("vars") for layer in h5.get("layers", {}).values())
              if g is not None}
    out: Weights = {}
    for layer, keys in names:
        group = groups.get(layer)
        if group is None:
            continue
        for i, key in enumerate(keys):
            data = group.get(str(i))
            if data is not None:
                out[key] = torch.from_numpy(data[()].copy())
    return out


def snapshot(path: Path, names: WeightNames) -> FileSnapshot:
    """A ``.keras`` file as seen now: its stored step and its weights under ``names`` (a
    .keras archive stores no epoch)."""
    import h5py

    stat = path.stat()
    step = None
    try:
        with h5py.File(_h5_bytes(path), "r") as h5:
            step = _stored_step(h5)
            weights = _file_weights(h5, names)
    except Exception as e:  # the file is what is being judged: record, do not raise
        return FileSnapshot(path=str(path), mtime_ns=stat.st_mtime_ns, size=stat.st_size,
                            step=step, error=error_line(e))
    return FileSnapshot(path=str(path), mtime_ns=stat.st_mtime_ns, size=stat.st_size,
                        step=step, weights=weights)
