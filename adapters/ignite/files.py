"""Ignite's checkpoint files as the suite reads them: names, roles, epoch and step, weights.

The Ignite adapter's handlers write three kinds of file (see ``docs/frameworks/ignite.md``);
this module maps them onto the spec's roles and reads them weights-only. It imports no Ignite.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from stat import S_ISREG

from trainspec.conformance.run.files import (
    FileRecord,
    Role,
    as_int,
    describe_files,
    load_dict,
    top_level,
)
from trainspec.conformance.run.recording import FileContent, snapshot_file
from trainspec.conformance.run.records import FileSnapshot, Weights
from trainspec.conformance.run.task import plain_weights

__all__ = ["describe_ignite_files", "file_role", "model_weights", "newest", "progress",
           "snapshot"]

# Checkpoint's default names: {prefix}_{name}_{global_step}_{score_name}={score}.pt for the best
# model (name "model": one object saved), checkpoint_{iteration}.pt for the last checkpoint,
# epoch_checkpoint_{iteration}.pt for the periodic ones
_BEST_FILE = re.compile(r"^best_model_(\d+)_score=.*\.pt$")
_LAST_FILE = re.compile(r"^checkpoint_(\d+)\.pt$")
_EPOCH_FILE = re.compile(r"^epoch_checkpoint_(\d+)\.pt$")


def file_role(name: str) -> Role | None:
    """The role of an Ignite checkpoint file under the adapter's handlers."""
    if _BEST_FILE.match(name):
        return "best"
    if _LAST_FILE.match(name):
        return "last"
    return "epoch" if _EPOCH_FILE.match(name) else None


def _holds(name: str, content: Mapping[str, object]) -> tuple[str, ...]:
    """What a file holds in the spec's terms. A best file is the model's bare state_dict (its
    epoch is in its name only); a last or periodic file holds the model, the optimizer, the
    LR scheduler(s) and the trainer's state (epoch and iteration, the step). Ignite stores no
    run id and no config."""
    if file_role(name) == "best":
        return ("epoch", "model")
    names = {"model": "model", "optimizer": "optimizer", "lr_scheduler": "scheduler"}
    held = [spec for key, spec in names.items() if key in content]
    if isinstance(content.get("trainer"), dict):
        held[:0] = ["epoch", "step"]
    return tuple(held)


def progress(name: str, content: Mapping[str, object]) -> tuple[int | None, int | None]:
    """(epoch, step) of a checkpoint in the suite's terms: the zero-based epoch it ends, and
    Ignite's iteration counter.

    A last or periodic file holds the trainer's ``state_dict`` (``iteration``,
    ``epoch_length``): its epoch is ``iteration // epoch_length - 1``. The best file holds the
    model's bare state_dict; its epoch is only in its name (``global_step_from_engine(trainer)``
    gives the count of completed epochs, 0 for val.first), and no step is recorded anywhere.
    """
    best = _BEST_FILE.match(name)
    if best:
        return int(best.group(1)) - 1, None
    trainer = content.get("trainer")
    if not isinstance(trainer, Mapping):
        return None, None
    iteration, length = as_int(trainer.get("iteration")), as_int(trainer.get("epoch_length"))
    if iteration is None or not length:
        return None, iteration
    return iteration // length - 1, iteration


def model_weights(content: Mapping[str, object]) -> Weights:
    """The model's weights in a best file (a bare state_dict) or a last file (under "model"),
    copied to the CPU. Ignite's Checkpoint saves a DDP model's module, so the names carry no
    ``module.`` prefix on any number of ranks."""
    state = content.get("model", content)
    return plain_weights(state) if isinstance(state, Mapping) else {}


def _read(path: Path, record: FileRecord) -> FileRecord:
    content, error = load_dict(path)
    if content is None:
        return dataclasses.replace(record, error=error)
    epoch, step = progress(path.name, content)
    keys = top_level(content)
    return dataclasses.replace(record, epoch=epoch, step=step, keys=tuple(keys["keys"]),
                               types=keys["types"], holds=_holds(path.name, content))


def describe_ignite_files(root: Path) -> list[FileRecord]:
    """Every file under ``root``, Ignite's checkpoints read weights-only (see
    ``IgniteAdapter.describe_checkpoints``)."""
    return describe_files(root, file_role, _read)


def _reader(name: str) -> FileContent:
    """What an Ignite file of that name says: (epoch, step, the model's weights)."""
    def read(content: Mapping[str, object]
             ) -> tuple[int | None, int | None, Mapping[str, object]]:
        state = content.get("model", content)
        return (*progress(name, content), state if isinstance(state, Mapping) else {})
    return read


def snapshot(path: Path | None) -> FileSnapshot | None:
    """A checkpoint file as seen now; None when there is none, or no longer one."""
    return None if path is None else snapshot_file(path, _reader(path.name))


def newest(root: Path, role: Role) -> Path | None:
    """The most recently modified file of that role under ``root``."""
    if not root.exists():
        return None
    found: list[tuple[Path, int]] = []
    for path in root.rglob("*.pt"):
        if file_role(path.name) != role:
            continue
        try:  # on several ranks, rank 0 may remove a file while another rank lists them
            stat = path.stat()
        except OSError:
            continue
        if S_ISREG(stat.st_mode):
            found.append((path, stat.st_mtime_ns))
    return max(found, key=lambda f: f[1])[0] if found else None
