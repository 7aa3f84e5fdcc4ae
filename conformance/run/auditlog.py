"""The audit log: what a team's real run did, streamed per rank as bounded JSON lines.

``trainspec audit RUN_DIR`` judges a real run from these logs (docs/audit.md documents the
format). A log is written next to the trainer, in its run folder, under ``trainspec-audit/``:
one file per rank and launch, ``<run_id>.rank<r>.jsonl``. Its first line is a header (format
version, run id, rank, world size, the config in the spec's terms, where a resume started
from); each further line is one event with its line number ``n``; the last is ``close``, so a
log cut short is told apart from one that ended. A run killed by a pre-emption leaves no
``close``: the audit then reads the log as an interrupted launch.

Weights never enter a log: a validation, the test pass and the end carry a digest of the
model's weights (:func:`weights_digest`), which the audit compares with the digest of the
weights in the trainer's files. Files are listed by name, size and modification time. So a
log grows by a few hundred bytes an epoch, and ``max_bytes`` bounds it: past the bound one
``overflow`` line is written and nothing more (the audit reports it as an error).

:class:`AuditLog` is also a :class:`~trainspec.conformance.run.adapter.RunContext`: an
adapter's :class:`~trainspec.conformance.run.shapes.Recorder` can report into it unchanged. In
a real run there are no crash points (:meth:`AuditLog.crash_point` does nothing) and no
scripted scores: the hooks pass the trainer's own.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainspec.conformance.run.records import (
    FileSnapshot,
    Record,
    RunEnd,
    Setup,
    TestPass,
    TrainEnd,
    TrainStart,
    Validation,
)
from trainspec.conformance.run.scenario import CrashWhere
from trainspec.errors import UsageError

if TYPE_CHECKING:
    import torch

__all__ = ["FORMAT", "LOG_FOLDER", "MAX_BYTES", "AuditConfig", "AuditLog", "folder_listing",
           "json_score", "weights_digest"]

FORMAT = "trainspec-audit/1"
LOG_FOLDER = "trainspec-audit"
MAX_BYTES = 16 * 2**20  # a log of 10,000 epochs is ~5 MiB: past this something is wrong
_MAX_LISTED = 512  # files listed per event: a run folder holds a few checkpoints


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditConfig:
    """The run's config in the spec's terms; None where the trainer has no such setting (the
    clauses that need it are then ``n/a``)."""

    num_epochs: int | None = None
    val_first: bool | None = None
    val_every_n_epochs: int | None = None
    minimize: bool | None = None
    patience: int | None = None  # None also when patience is unset: see has_patience
    has_patience: bool | None = None
    start_patience: int | None = None
    test_enable: bool | None = None
    ckpt_enable: bool | None = None
    save_last: bool | None = None
    ckpt_every_n_epochs: int | None = None
    debug: bool | None = None


def weights_digest(state: Mapping[str, object]) -> str:
    """A digest of a state dict's tensors, under DDP-independent names: equal weights, equal
    digest, whichever process computed it (a validation's weights and a file's)."""
    import torch

    h = hashlib.blake2b(digest_size=16)
    for name in sorted(k.removeprefix("module.") for k in state):
        value = state.get(name, state.get(f"module.{name}"))
        if not isinstance(value, torch.Tensor):
            continue
        t = value.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        if t.numel():
            h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
    return h.hexdigest()


def folder_listing(root: Path, *, skip: str = LOG_FOLDER) -> dict[str, list[int]]:
    """Every file under ``root`` (``skip`` aside) as ``relative name -> [size, mtime_ns]``."""
    out: dict[str, list[int]] = {}
    if not root.is_dir():
        return out
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != skip)
        for name in sorted(files):
            path = Path(folder, name)
            try:
                stat = path.stat()
            except OSError:  # replaced while listed (an atomic save's temporary file)
                continue
            out[path.relative_to(root).as_posix()] = [stat.st_size, stat.st_mtime_ns]
            if len(out) >= _MAX_LISTED:
                return out
    return out


def json_score(score: float) -> float | str:
    """A score as strict JSON: non-finite values as the strings ``NaN``, ``Infinity``,
    ``-Infinity``."""
    if math.isfinite(score):
        return float(score)
    return "NaN" if math.isnan(score) else ("Infinity" if score > 0 else "-Infinity")


class AuditLog:
    """One rank's log of one launch of a real run; also a ``RunContext`` for a ``Recorder``.

    Raises:
        UsageError: the log file cannot be created (the message names it).
    """

    def __init__(self, run_dir: Path, *, rank: int, world_size: int, run_id: str,
                 trainer: str, config: AuditConfig,
                 resumed_from: Mapping[str, object] | None = None,
                 max_bytes: int = MAX_BYTES) -> None:
        self._rank, self._world_size = rank, world_size
        self.run_dir = Path(run_dir)
        self.max_bytes = max_bytes
        self._n, self._bytes, self._is_full, self._is_closed = 0, 0, False, False
        self.path = self._new_path(run_id)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND,
                               0o644)
        except OSError as e:
            raise UsageError(f"audit: cannot create the log {self.path} ({e}). Give the "
                             "trainer a writable run folder.") from None
        self._write({"format": FORMAT, "run_id": run_id, "rank": rank,
                     "world_size": world_size, "trainer": trainer, "started_ns": time.time_ns(),
                     "run_dir": str(self.run_dir), "config": asdict(config),
                     "resumed_from": None if resumed_from is None else dict(resumed_from)})

    def _new_path(self, run_id: str) -> Path:
        folder = self.run_dir / LOG_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id) or "run"
        path, i = folder / f"{safe}.rank{self._rank}.jsonl", 1
        while path.exists():  # the same run id launched again: a log of its own
            i += 1
            path = folder / f"{safe}.{i}.rank{self._rank}.jsonl"
        return path

    # ----------------------------------------------------------------- RunContext

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def ckpt_root(self) -> Path:
        return self.run_dir

    def crash_point(self, where: CrashWhere, epoch: int) -> None:
        """A real run is never interrupted by the suite."""

    def record(self, record: Record) -> None:
        """A Recorder's record, written as the event it stands for (weights as digests)."""
        if isinstance(record, Setup):
            self.event("setup", epoch=record.epoch, train_step=record.train_step,
                       train_len=record.train_len)
        elif isinstance(record, TrainStart):
            self.event("train_start", epoch=record.epoch, train_step=record.train_step)
        elif isinstance(record, TrainEnd):
            self.event("train_end", epoch=record.epoch, train_step=record.train_step,
                       optimizer_steps=record.optimizer_steps, batches=record.batches)
        elif isinstance(record, Validation):
            self.validation(epoch=record.epoch, phase=record.phase, score=record.score,
                            improved=record.improved, stop=record.stop,
                            weights=record.weights)
        elif isinstance(record, TestPass):
            self.event("test", weights=weights_digest(record.weights))
        elif isinstance(record, RunEnd):
            self.end(train_step=record.train_step, final_weights=record.final_weights,
                     best_model=record.best_model, best_file=record.best_file)

    # ----------------------------------------------------------------- events

    def validation(self, *, epoch: int, phase: str, score: float, improved: bool | None,
                   stop: bool, weights: Mapping[str, torch.Tensor] | str,
                   train_step: int | None = None, pooled: bool | None = None) -> None:
        """A validation with the trainer's own verdicts, and the run folder right after
        (``improved`` None: the trainer keeps no best model, so there is no verdict to judge;
        ``pooled``: the score is a mean the ranks pooled, None when that is not known)."""
        self.event("val", epoch=epoch, phase=phase, score=json_score(score),
                   improved=None if improved is None else bool(improved), stop=bool(stop),
                   train_step=train_step, pooled=pooled,
                   weights=weights if isinstance(weights, str) else weights_digest(weights),
                   files=folder_listing(self.run_dir))

    def end(self, *, train_step: int, final_weights: Mapping[str, Any] | None,
            best_model: Mapping[str, Any] | None, best_file: FileSnapshot | None = None
            ) -> None:
        """The run returned: its step counter, weights and files; then the log is closed."""
        self.event("end", train_step=train_step,
                   final_weights=None if final_weights is None else weights_digest(final_weights),
                   best_model=None if best_model is None else weights_digest(best_model),
                   files=folder_listing(self.run_dir))
        self.close()

    def event(self, kind: str, **fields: object) -> None:
        """One event line; nothing once the log is closed or full."""
        if self._is_closed or self._is_full:
            return
        self._n += 1
        self._write({"n": self._n, "ev": kind, "t": round(time.time(), 3), **fields})

    def close(self, **fields: object) -> None:
        """The ``close`` line (once); the file is closed."""
        if self._is_closed:
            return
        self.event("close", **fields)
        self._is_closed = True
        os.close(self._fd)

    def _write(self, data: Mapping[str, object]) -> None:
        import json

        line = (json.dumps(data, allow_nan=False, separators=(",", ":")) + "\n").encode()
        if self._bytes + len(line) > self.max_bytes:
            self._is_full = True
            line = (json.dumps({"n": self._n, "ev": "overflow", "max_bytes": self.max_bytes})
                    + "\n").encode()
        os.write(self._fd, line)  # one write per line: a kill leaves whole lines only
        self._bytes += len(line)
