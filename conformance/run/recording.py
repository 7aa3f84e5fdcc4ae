"""Recording helpers every adapter shares: trainer state, file snapshots, pending validations.

An adapter observes its trainer through the framework's hooks and reports records
(:mod:`trainspec.conformance.run.records`). These helpers capture the parts every adapter needs
the same way: the state a resume must restore (:func:`trainer_state`), a checkpoint file as
seen at one moment (:func:`snapshot_file`), and a validation whose verdicts the framework only
settles after its callbacks have acted (:class:`PendingValidation`).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeAlias

import torch

from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.files import as_int
from trainspec.conformance.run.reading import Loader, is_trusted, read_checkpoint
from trainspec.conformance.run.records import (
    FileSnapshot,
    Phase,
    TrainerState,
    Validation,
    Weights,
)
from trainspec.conformance.run.task import plain_weights, rng_digests
from trainspec.errors import AdapterError

__all__ = ["FileContent", "PendingValidation", "model_state_of", "newest_file",
           "seed_content", "snapshot_file", "trainer_state"]

# what a checkpoint's content says: (epoch, step, model weights); raise AdapterError when the
# content is not what the reader expects
#: A reader of a checkpoint's content: ``content -> (epoch, step, model weights)``.
FileContent = Callable[[Mapping[str, object]], tuple[int | None, int | None, Mapping[str, object]]]


def trainer_state(model: torch.nn.Module | Mapping[str, object],
                  optimizer: torch.optim.Optimizer | None = None,
                  schedulers: Sequence[object] = ()) -> TrainerState:
    """What a resume must restore, now: the model's weights (a module or a state dict), the
    optimizer's and schedulers' state dicts (one scheduler as itself, several as a list), and
    a digest of every global RNG."""
    weights = model.state_dict() if isinstance(model, torch.nn.Module) else model
    states = [s.state_dict() for s in schedulers if hasattr(s, "state_dict")]
    return TrainerState(weights=plain_weights(weights),
                        optimizer=None if optimizer is None else optimizer.state_dict(),
                        scheduler=None if not states else states[0] if len(states) == 1
                        else states,
                        rng=rng_digests())


def model_state_of(ckpt: Mapping[str, object]) -> Mapping[str, object]:
    """The model weights inside a seed-shaped checkpoint (``model_state_dict``)."""
    for key in ("model_state_dict", "model", "state_dict"):
        value = ckpt.get(key)
        if isinstance(value, Mapping) and value:
            return value
    raise AdapterError(
        f"checkpoint: expected the model's weights under 'model_state_dict' (the seed shape: "
        f"add_checkpoint_items(model=...) saves '<name>_state_dict'), found keys "
        f"{sorted(ckpt)[:12]}. Save registered items as '<name>_state_dict'.")


def seed_content(content: Mapping[str, object]
                 ) -> tuple[int | None, int | None, Mapping[str, object]]:
    """A seed-shaped checkpoint's epoch, ``train_step`` and model weights."""
    return as_int(content.get("epoch")), as_int(content.get("train_step")), \
        model_state_of(content)


def newest_file(root: Path, name: str) -> Path | None:
    """The most recently modified file called ``name`` anywhere under ``root``; a file that
    goes while the folder is listed (rank 0 replacing it as another rank looks) is skipped."""
    if not root.exists():
        return None
    found: list[tuple[int, Path]] = []
    for path in root.rglob(name):
        with contextlib.suppress(OSError):
            if path.is_file():
                found.append((path.stat().st_mtime_ns, path))
    return max(found)[1] if found else None


def snapshot_file(path: Path | None, read: FileContent = seed_content, *,
                  modules: Sequence[str] = (), load: Loader | None = None
                  ) -> FileSnapshot | None:
    """A checkpoint file as seen now, loaded as its trainer loads it
    (:func:`~trainspec.conformance.run.reading.read_checkpoint`: weights-only, else with the
    file's own classes and those of ``modules``, else, for a file the run wrote, by ``load``
    or a full unpickle in a process of its own); None when there is no such file.

    ``read`` says what the loaded content means (the seed's keys by default); a file that does
    not load at all, or that ``read`` refuses, is a snapshot with its ``error``. Whether it
    loads weights-only is CKPT-1's matter, judged on the files the run left. A file whose bytes
    were read before (by the same ``read``) is not loaded again: the same bytes say the same.
    """
    if path is None or not path.is_file():
        return None
    try:
        stat = path.stat()
        digest = _digest(path)
    except OSError:  # gone since it was found: rank 0 may replace it while another rank looks
        return None
    key = (read, digest, tuple(modules), load, is_trusted(path))
    said = _SAID.get(key)
    if said is None:
        said = _read_file(path, read, tuple(modules), load)
        with contextlib.suppress(OSError):  # kept only when the file did not change meanwhile
            if _digest(path) == digest:
                if len(_SAID) >= 64:
                    _SAID.clear()
                _SAID[key] = said
    epoch, step, weights, error = said
    return FileSnapshot(path=str(path), mtime_ns=stat.st_mtime_ns, size=stat.st_size,
                        epoch=epoch, step=step, weights=weights, error=error)


# what a file's bytes said to a reader: (epoch, step, weights, error), by (reader, digest)
_Said: TypeAlias = "tuple[int | None, int | None, Weights | None, str | None]"
_SAID: dict[tuple[FileContent, bytes, tuple[str, ...], Loader | None, bool], _Said] = {}


def _digest(path: Path) -> bytes:
    return hashlib.blake2b(path.read_bytes(), digest_size=20).digest()


def _read_file(path: Path, read: FileContent, modules: tuple[str, ...],
               load: Loader | None) -> _Said:
    loaded = read_checkpoint(path, modules=modules, load=load)
    content = loaded.content
    if content is None:
        return None, None, None, loaded.error
    try:
        epoch, step, weights = read(content)
    except AdapterError as e:
        return None, None, None, str(e)
    return epoch, step, plain_weights(weights), None


class PendingValidation:
    """A validation seen before the framework's callbacks decided on it.

    Frameworks score a validation in one hook and act on the score (best checkpoint, early
    stopping) in callbacks that run after it. :meth:`hold` keeps the score and the weights;
    :meth:`settle`, called once every callback has acted, records the validation with the
    verdicts the framework reached, then offers the ``val_after_save`` crash point: by then the
    validation is decided and saved, so a kill there must not hide it from the trace.
    """

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx
        self._held: tuple[int, Phase, float, Weights] | None = None

    @property
    def is_pending(self) -> bool:
        return self._held is not None

    def hold(self, *, epoch: int, phase: Phase, score: float,
             weights: torch.nn.Module | Mapping[str, object]) -> None:
        state = weights.state_dict() if isinstance(weights, torch.nn.Module) else weights
        self._held = (epoch, phase, score, plain_weights(state))

    def settle(self, *, improved: bool, stop: bool,
               best_file: FileSnapshot | None = None) -> Validation | None:
        """Record the held validation (None when nothing is held)."""
        if self._held is None:
            return None
        epoch, phase, score, weights = self._held
        self._held = None
        record = Validation(epoch=epoch, phase=phase, score=score, improved=improved,
                            stop=stop, weights=weights, best_file=best_file)
        self._ctx.record(record)
        if phase == "epoch":
            self._ctx.crash_point("val_after_save", epoch)
        return record
