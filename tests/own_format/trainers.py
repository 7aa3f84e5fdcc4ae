"""Seed-shaped trainers whose files the suite's reading does not decide for them.

``CannotLoadItsOwnFiles`` pickles a framework object rebuilt through ``getattr`` (a bound class
method) into every checkpoint and loads weights-only: as a training engine on torch 2.6 and
later, it cannot resume from its own files. ``FolderCheckpoints`` writes each checkpoint as a
folder of two files, and its resume unpickles one of them with ``pickle.load``;
``FolderAdapter`` describes those folders for the suite. ``RemovesTheOldFileFirst`` writes
through a temporary file and a rename, as an atomic write does, but removes the previous file
before it starts: a kill inside the temporary file's write loses that file.
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import torch

from trainspec.adapters.base_trainer import BaseTrainerAdapter
from trainspec.conformance.run.files import (
    FileRecord,
    as_int,
    file_record,
    read_checkpoint,
    top_level,
)
from trainspec.reference import BaseTrainer
from trainspec.reference.checkpoint import load_checkpoint


class LoggedValues:
    """A framework's logged history, pickled through a bound class method."""

    def __init__(self, values: list[float]) -> None:
        self.values = values

    @classmethod
    def rebuild(cls, values: list[float]) -> LoggedValues:
        return cls(values)

    def __reduce__(self) -> tuple[Any, tuple[list[float]]]:
        return (LoggedValues.rebuild, (self.values,))  # getattr on unpickling


class CannotLoadItsOwnFiles(BaseTrainer):
    """Saves its logged history object with every checkpoint and reads its files weights-only,
    which refuses the object: every resume and finetune from its own files raises."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        super()._write_file(path, {**state, "message_hub": LoggedValues([0.5])})


class FolderCheckpoints(BaseTrainer):
    """Writes each checkpoint as a folder (``last/``, ``best/``): ``weights.pt``, read
    weights-only, and ``trainer_state.pkl``, the progress and best tracking, which its resume
    unpickles with ``pickle.load``."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        folder = path.with_suffix("")
        tmp = folder.with_name(f".{folder.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        torch.save(state, tmp / "weights.pt")
        with open(tmp / "trainer_state.pkl", "wb") as f:
            pickle.dump({k: state[k] for k in ("epoch", "train_step", "trainer_state")}, f)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)

    def _load_checkpoint(self) -> dict[str, Any] | None:
        load_from = self.cfg.ckpt.load_from
        if load_from is None:
            return None
        folder = Path(load_from)
        folder = folder.parent if folder.is_file() else folder
        ckpt = load_checkpoint(folder / "weights.pt")
        with open(folder / "trainer_state.pkl", "rb") as f:
            ckpt.update(pickle.load(f))  # its own file, it trusts: the unsafe load
        self.ckpt_path = folder
        self.is_resumed = self._is_resume()
        if self.is_resumed:
            self.epoch, self.train_step = int(ckpt["epoch"]) + 1, int(ckpt["train_step"])
            self._completed_epoch = int(ckpt["epoch"])
        return ckpt


class RemovesTheOldFileFirst(BaseTrainer):
    """Clears the way before each write: the previous file at the path is removed, then the
    new one is written to a temporary file and renamed over the path."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        path.unlink(missing_ok=True)
        super()._write_file(path, state)


_ROLES = {"last": "last", "best": "best"}


class FolderAdapter(BaseTrainerAdapter):
    """The seed-shape adapter, describing ``FolderCheckpoints``' folders: a folder's role by
    its name, what it holds from the ``weights.pt`` inside."""

    def __init__(self) -> None:
        super().__init__("tests.own_format.trainers:FolderCheckpoints")

    def describe_checkpoints(self, root: Path) -> list[FileRecord]:
        out = []
        for folder in sorted(p for p in root.rglob("*") if p.is_dir() and p.name in _ROLES):
            weights = folder / "weights.pt"
            if not weights.is_file():
                continue
            record = file_record(weights, root, "last" if folder.name == "last" else "best")
            read = read_checkpoint(weights)
            content = read.content or {}
            listing = top_level(content)
            out.append(FileRecord(relpath=folder.relative_to(root).as_posix(),
                                  size=record.size, mtime_ns=record.mtime_ns, role=record.role,
                                  epoch=as_int(content.get("epoch")),
                                  step=as_int(content.get("train_step")),
                                  keys=tuple(listing["keys"]) if content else (),
                                  types=listing["types"] if content else {}, error=read.error,
                                  weights_only_error=read.weights_only_error))
        return out
