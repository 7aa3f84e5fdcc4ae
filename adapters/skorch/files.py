"""skorch's checkpoints as the suite reads them: folders, roles, epoch and step, weights.

A skorch ``Checkpoint`` writes a set of files, each with its default name: ``params.pt`` (the
module's state_dict), ``optimizer.pt``, ``criterion.pt`` (``torch.save``) and ``history.json``
(the net's ``History``). The adapter gives each checkpoint its own folder under the run's
``ckpt.dir`` (see ``docs/frameworks/skorch.md``): ``last/`` and ``best/`` are one checkpoint
each, described as one record (the folder); ``epochs/`` holds the periodic ones, whose names
carry the 1-based epoch (``params_<e>.pt``, ``optimizer_<e>.pt``, ``criterion_<e>.pt``) next to
one ``history.json``, each described by its ``params_<e>.pt``. The epoch and step come from the
history (skorch records every epoch and batch there), the weights from ``params.pt`` loaded
weights-only; nothing is ever unpickled. This module imports no skorch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from trainspec.conformance.run.files import FileRecord, Role, as_int, describe_files, load_dict
from trainspec.conformance.run.records import FileSnapshot, Weights
from trainspec.conformance.run.task import plain_weights

__all__ = ["BEST_DIR", "LAST_DIR", "PERIODIC_DIR", "PERIODIC_FILES", "checkpoint_args",
           "describe_skorch_files",
           "file_role", "history_steps", "params_file", "progress", "seen_as", "snapshot"]

BEST_DIR, LAST_DIR, PERIODIC_DIR = "best", "last", "epochs"
# Checkpoint's f_* defaults, and the periodic Checkpoint's names (skorch formats
# "{last_epoch[epoch]}", the history's 1-based epoch, into f_params, f_optimizer, f_criterion;
# never into f_history)
PARAMS, OPTIMIZER, CRITERION, HISTORY = "params.pt", "optimizer.pt", "criterion.pt", \
    "history.json"
PERIODIC_FILES = {"f_params": "params_{last_epoch[epoch]}.pt",
                  "f_optimizer": "optimizer_{last_epoch[epoch]}.pt",
                  "f_criterion": "criterion_{last_epoch[epoch]}.pt", "f_history": HISTORY}
_PERIODIC = re.compile(r"^params_(\d+)\.pt$")
_ROLES: dict[str, Role] = {LAST_DIR: "last", BEST_DIR: "best"}


def file_role(name: str) -> Role | None:
    """The role of a checkpoint under the adapter's layout: the folders ``last`` and ``best``,
    and a periodic checkpoint's ``params_<e>.pt``."""
    if name in _ROLES:
        return _ROLES[name]
    return "epoch" if _PERIODIC.match(name) else None


def history_steps(rows: Sequence[object], upto: int | None = None) -> int:
    """The training batches a history records (up to the 1-based epoch ``upto``), as skorch
    counts them itself (``LRScheduler.on_train_begin``): each epoch's ``train_batch_count``, or
    its batches holding a ``train_loss`` while that epoch's training is under way."""
    total = 0
    for row in rows:
        if not isinstance(row, Mapping):
            continue
        if upto is not None and (as_int(row.get("epoch")) or 0) > upto:
            break
        count = as_int(row.get("train_batch_count"))
        if count is None:
            batches = row.get("batches")
            count = sum(1 for b in batches if isinstance(b, Mapping) and "train_loss" in b) \
                if isinstance(batches, list) else 0
        total += count
    return total


def progress(rows: Sequence[object], upto: int | None = None) -> tuple[int | None, int]:
    """(epoch, step) a history records: the zero-based last epoch (up to ``upto``, 1-based),
    None for an empty history, and the training batches up to it."""
    epochs = [e for row in rows if isinstance(row, Mapping)
              and (e := as_int(row.get("epoch"))) is not None and (upto is None or e <= upto)]
    return (max(epochs) - 1 if epochs else None), history_steps(rows, upto)


def _history(path: Path) -> tuple[list[object] | None, str | None]:
    """A history.json as skorch writes it (JSON, NaN and Infinity allowed), or why not."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return None, f"{path.name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return (rows, None) if isinstance(rows, list) else (None, f"{path.name}: not a list")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Files:
    """Where one checkpoint's files are: a folder's, or a periodic checkpoint's (``upto``: its
    1-based epoch, the last the history it shares says of it)."""

    params: Path
    optimizer: Path
    criterion: Path
    history: Path
    upto: int | None = None

    @classmethod
    def of(cls, path: Path) -> _Files:
        """The checkpoint at ``path``: a checkpoint folder, or a periodic ``params_<e>.pt``."""
        periodic = _PERIODIC.match(path.name)
        if periodic is None:
            return cls(params=path / PARAMS, optimizer=path / OPTIMIZER,
                       criterion=path / CRITERION, history=path / HISTORY)
        e, folder = periodic.group(1), path.parent
        return cls(params=path, optimizer=folder / f"optimizer_{e}.pt",
                   criterion=folder / f"criterion_{e}.pt", history=folder / HISTORY,
                   upto=int(e))

    def present(self) -> list[Path]:
        """Every file the checkpoint consists of, as it stands."""
        return [p for p in (self.params, self.optimizer, self.criterion, self.history)
                if p.is_file()]

    def identity(self) -> tuple[int, int]:
        """(mtime_ns, size) of the checkpoint: its newest file, and its files together; a
        periodic checkpoint's own files only (the history.json it shares changes at every
        save)."""
        own = [p for p in self.present() if self.upto is None or p != self.history]
        stats = [p.stat() for p in own]
        return max((s.st_mtime_ns for s in stats), default=0), sum(s.st_size for s in stats)

    def progress(self) -> tuple[int | None, int | None, str | None]:
        """(epoch, step, why not) from the history."""
        if not self.history.is_file():
            return None, None, f"no {self.history.name}"
        rows, error = _history(self.history)
        if rows is None:
            return None, None, error
        epoch, step = progress(rows, self.upto)
        return epoch, step, None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Read:
    """One checkpoint's files as read: what they say, and what went wrong."""

    epoch: int | None = None
    step: int | None = None
    weights: Weights | None = None
    types: Mapping[str, str] | None = None
    holds: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


def _read(files: _Files) -> _Read:
    """A checkpoint's files: the history (epoch, step), the module's weights, the optimizer
    and criterion states, each loaded weights-only."""
    types: dict[str, str] = {}
    problems: list[str] = []
    epoch, step, error = files.progress()
    if error is not None:
        problems.append(error)
    else:
        types[files.history.name] = "json"
    weights = None
    for path in (files.params, files.optimizer, files.criterion):
        if not path.is_file():
            if path == files.params:
                problems.append(f"no {path.name}")
            continue
        content, error = load_dict(path)
        if content is None:
            problems.append(f"{path.name}: {error}")
            continue
        types[path.name] = type(content).__name__
        if path == files.params:
            weights = plain_weights(content)
    present = {"epoch": epoch is not None, "step": step is not None,
               "model": weights is not None, "optimizer": files.optimizer.name in types}
    return _Read(epoch=epoch, step=step, weights=weights, types=types,
                 holds=tuple(name for name, held in present.items() if held),
                 problems=tuple(problems))


def _is_checkpoint(path: Path) -> bool:
    """A periodic params file, or a checkpoint folder with a file in it (Checkpoint creates
    its folder when the net is initialized, before it saves anything)."""
    return path.is_file() or (path.is_dir() and any(p.is_file() for p in path.iterdir()))


def _record(path: Path, root: Path, role: Role) -> FileRecord:
    files = _Files.of(path)
    read, (mtime, size) = _read(files), files.identity()
    return FileRecord(relpath=path.relative_to(root).as_posix(), size=size, mtime_ns=mtime,
                      role=role, epoch=read.epoch, step=read.step,
                      keys=tuple(sorted(p.name for p in files.present())),
                      types=read.types or {}, error="; ".join(read.problems) or None,
                      holds=read.holds)


def describe_skorch_files(root: Path) -> list[FileRecord]:
    """Every file under ``root`` (a file of a checkpoint folder with no role of its own), then
    each checkpoint as one record: the folders ``last`` and ``best``, and every periodic
    ``params_<e>.pt`` (see ``SkorchAdapter.describe_checkpoints``)."""
    def periodic(name: str) -> Role | None:  # the folders' roles are given below
        return "epoch" if _PERIODIC.match(name) else None

    records = [r if r.role is None else _record(root / r.relpath, root, r.role)
               for r in describe_files(root, periodic, lambda _path, record: record)]
    for name, role in _ROLES.items():
        if _is_checkpoint(root / name):
            records.append(_record(root / name, root, role))
    return records


def params_file(load_from: str) -> Path:
    """The module's weights file of a checkpoint: ``params.pt`` in a checkpoint folder, or the
    file itself (a weights file as ``save_params`` writes one)."""
    path = Path(load_from)
    return path / PARAMS if path.is_dir() else path


def checkpoint_args(load_from: str) -> dict[str, str]:
    """The ``Checkpoint`` arguments that name the checkpoint at ``load_from`` for
    ``LoadInitState``: a folder (``last``, ``best``) by its ``dirname``; a periodic
    ``epochs/params_<e>.pt`` by its folder and that epoch's files, next to the one
    ``history.json`` every periodic checkpoint shares (skorch never formats the epoch into
    ``f_history``)."""
    path = Path(load_from)
    match = _PERIODIC.match(path.name)
    if path.is_dir() or match is None:
        return {"dirname": str(path)}
    e = match.group(1)
    return {"dirname": str(path.parent), "f_params": path.name,
            "f_optimizer": f"optimizer_{e}.pt", "f_criterion": f"criterion_{e}.pt",
            "f_history": HISTORY}


def snapshot(path: Path | None) -> FileSnapshot | None:
    """A checkpoint (a folder, or a periodic ``params_<e>.pt``) as seen now; None when there
    is none."""
    try:
        if path is None or not _is_checkpoint(path):
            return None
        files = _Files.of(path)
        read, (mtime, size) = _read(files), files.identity()
    except OSError:  # gone while it was read
        return None
    seen = FileSnapshot(path=str(path), mtime_ns=mtime, size=size, epoch=read.epoch,
                        step=read.step)
    if read.problems:
        return replace(seen, error="; ".join(read.problems))
    return replace(seen, weights=read.weights)


def seen_as(path: Path) -> tuple[int, int, int | None, int | None] | None:
    """What tells one state of a checkpoint from another without loading its tensors: its
    identity, and the epoch and step its history records (a Checkpoint saves once an epoch);
    None when there is no checkpoint."""
    try:
        if not _is_checkpoint(path):
            return None
        files = _Files.of(path)
        epoch, step, _ = files.progress()
        return (*files.identity(), epoch, step)
    except OSError:
        return None
