"""Audit mode from a framework's hooks: what every ready audit callback shares.

A framework decides a validation in several callbacks that run one after another: its hook
sees the score, its checkpoint callback keeps the best model, its early-stopping callback sets
the stop. An audit callback sees the score first and the verdicts later. :class:`AuditHooks`
holds the validation (its score, the weights' digest and the step at that moment) until the
callback gives the verdicts the framework reached (:meth:`AuditHooks.settle`), then writes it,
with the run folder as the checkpoint callbacks left it, to the run's audit log
(:class:`~trainspec.conformance.run.auditlog.AuditLog`). A validation still held when the next
epoch starts is settled with the verdicts the callback reads then (the run went on: no stop).

Epochs are 0-based here, as in the log: a callback converts a framework's 1-based count. The
ready callbacks (``trainspec.adapters.<framework>.audit``) build on this class; a team's own
framework hooks can too::

    hooks = kit.AuditHooks(run_dir, run_id=kit.shared_run_id(), trainer="mylib.Trainer",
                           config=kit.AuditConfig(num_epochs=10, minimize=True, ...))
    hooks.setup(epoch=0, train_step=0, train_len=len(loader))
    ... hooks.train_start(epoch, train_step=step) ... hooks.train_end(epoch, train_step=step)
    hooks.hold(epoch=epoch, score=score, weights=model, train_step=step)
    hooks.settle(improved=..., stop=...)   # once the framework's callbacks decided
    hooks.end(train_step=step, best_model=best_state)
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from trainspec.conformance.run.auditlog import (
    MAX_BYTES,
    AuditConfig,
    AuditLog,
    folder_listing,
    weights_digest,
)

if TYPE_CHECKING:
    import torch

__all__ = ["AuditHooks", "Decision", "shared_run_id"]

Phase = Literal["first", "epoch"]
Decision = Callable[[], tuple[bool | None, bool]]  # () -> (improved, stop), read when settled


def shared_run_id(explicit: str | None = None) -> str:
    """The launch's run id, the same on every rank: ``explicit`` if given, else torchrun's
    ``TORCHELASTIC_RUN_ID`` (when it is not torchrun's default ``none``), else SLURM's job and
    step, else a new id that rank 0 draws and broadcasts when a process group is up.

    Every rank of a launch must log the same run id: ``trainspec audit`` refuses ranks that
    disagree."""
    if explicit:
        return explicit
    elastic = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if elastic and elastic != "none":
        return elastic
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        return f"slurm-{job}-{os.environ.get('SLURM_STEP_ID', '0')}"
    drawn = uuid.uuid4().hex[:12]
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        box: list[object] = [drawn]
        dist.broadcast_object_list(box, src=0)
        drawn = str(box[0])
    return drawn


def _digest(weights: torch.nn.Module | Mapping[str, object] | str) -> str:
    if isinstance(weights, str):
        return weights
    state = weights if isinstance(weights, Mapping) else weights.state_dict()
    return weights_digest(state)


@dataclass(slots=True)
class _Held:
    epoch: int
    phase: Phase
    score: float
    weights: str
    train_step: int | None


class AuditHooks:
    """One rank's audit of one launch, fed from a framework's hooks (0-based epochs).

    Raises:
        UsageError: the log cannot be created in ``run_dir`` (the message names it).
    """

    def __init__(self, run_dir: Path | str, *, run_id: str, trainer: str,
                 config: AuditConfig, rank: int = 0, world_size: int = 1,
                 resumed_from: Mapping[str, object] | None = None,
                 max_bytes: int = MAX_BYTES) -> None:
        self.log = AuditLog(Path(run_dir), rank=rank, world_size=world_size, run_id=run_id,
                            trainer=trainer, config=config, resumed_from=resumed_from,
                            max_bytes=max_bytes)
        self._held: _Held | None = None
        self._is_training = False
        self.epochs_trained = 0

    @property
    def run_dir(self) -> Path:
        return self.log.run_dir

    @property
    def is_pending(self) -> bool:
        """A validation is held, waiting for the framework's verdicts."""
        return self._held is not None

    @property
    def has_trained(self) -> bool:
        """An epoch's training started in this launch (a validation before it is ``first``)."""
        return self.epochs_trained > 0 or self._is_training

    def setup(self, *, epoch: int, train_step: int, train_len: int | None = None) -> None:
        """The trainer is built: ``epoch`` is the first it will train."""
        self.log.event("setup", epoch=int(epoch), train_step=int(train_step),
                       train_len=None if train_len is None else int(train_len))

    def train_start(self, epoch: int, *, train_step: int,
                    decided: Decision | None = None) -> None:
        """An epoch's training begins; a validation still held is settled first with
        ``decided()`` (the run went on, so its stop is False unless the framework says so)."""
        if self._held is not None:
            improved, stop = decided() if decided is not None else (None, False)
            self.settle(improved=improved, stop=stop)
        self._is_training = True
        self.log.event("train_start", epoch=int(epoch), train_step=int(train_step),
                       files=folder_listing(self.run_dir))

    def train_end(self, epoch: int, *, train_step: int, optimizer_steps: int) -> None:
        """An epoch's training ended (before its validation)."""
        self._is_training = False
        self.epochs_trained += 1
        self.log.event("train_end", epoch=int(epoch), train_step=int(train_step),
                       optimizer_steps=int(optimizer_steps))

    def hold(self, *, epoch: int, score: float,
             weights: torch.nn.Module | Mapping[str, object] | str,
             train_step: int | None = None, phase: Phase | None = None) -> None:
        """A validation's score, with the weights it scored (digested now: later callbacks may
        change the model); ``phase`` defaults to ``first`` before any epoch trained."""
        chosen: Phase = phase or ("epoch" if self.has_trained else "first")
        self._held = _Held(epoch=int(epoch), phase=chosen, score=float(score),
                           weights=_digest(weights),
                           train_step=None if train_step is None else int(train_step))

    def settle(self, *, improved: bool | None, stop: bool) -> None:
        """Write the held validation with the framework's verdicts (``improved`` None: the
        framework keeps no best model to judge); nothing when none is held."""
        held, self._held = self._held, None
        if held is None:
            return
        self.log.validation(epoch=held.epoch, phase=held.phase, score=held.score,
                            improved=improved, stop=stop, weights=held.weights,
                            train_step=held.train_step)

    def final(self, weights: torch.nn.Module | Mapping[str, object] | str) -> None:
        """The weights training ended with (before a test pass loads the best); a digest
        already taken is written as is."""
        self.log.event("final", weights=_digest(weights))

    def test(self, weights: torch.nn.Module | Mapping[str, object] | str) -> None:
        """The weights the test pass scores."""
        self.log.event("test", weights=_digest(weights))

    def end(self, *, train_step: int, decided: Decision | None = None,
            final_weights: Mapping[str, object] | None = None,
            best_model: Mapping[str, object] | None = None, close: bool = True) -> None:
        """The run returned: a held validation is settled with ``decided()`` (default: no
        stop), then the end is written and the log closed; ``close=False`` keeps it open for
        a test pass the framework runs as a call of its own after training (:meth:`test`,
        then :meth:`close`; a log left open at exit still reads as a run that returned)."""
        if self._held is not None:
            improved, stop = decided() if decided is not None else (None, False)
            self.settle(improved=improved, stop=stop)
        if close:
            self.log.end(train_step=int(train_step), final_weights=final_weights,
                         best_model=best_model)
            return
        self.log.event("end", train_step=int(train_step),
                       final_weights=None if final_weights is None
                       else weights_digest(final_weights),
                       best_model=None if best_model is None else weights_digest(best_model),
                       files=folder_listing(self.run_dir))

    def close(self) -> None:
        """Close the log (once; nothing after)."""
        self.log.close()

    def raised(self, error: BaseException) -> None:
        """The run raised: the log is closed with the error (a held validation is dropped:
        the framework never decided it)."""
        self._held = None
        if isinstance(error, SystemExit):
            self.log.close(exit=error.code if isinstance(error.code, int) else 1)
        else:
            self.log.close(raised=f"{type(error).__name__}: {error}"[:500])

