"""Lightning's checkpoint files in the suite's terms: their roles, what they hold.

``ModelCheckpoint`` writes ``last.ckpt``, ``best.ckpt`` (``-vN`` when the name is taken) and,
with ``every_n_epochs``, ``epoch=N-step=M.ckpt``: the roles "last", "best" and "epoch";
``OnExceptionCheckpoint`` (the ``on_exception_checkpoint`` remedy) writes ``on_exception.ckpt``
when fit ends on an exception (SIGTERM's included): the state to resume from, role "last". A
file holds Lightning's own fields (``epoch``, ``global_step``, ``state_dict``...), read
weights-only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import torch

from trainspec.conformance.run.files import FileRecord, Role, as_int, load_dict, top_level

__all__ = ["content_of", "describe", "role"]

_PREFIX = "net."  # the module's attribute holding the task's model
_EPOCH_FILE = re.compile(r"^epoch=(\d+)-step=(\d+)(-v\d+)?\.ckpt$")


def role(name: str) -> Role | None:
    """The role of a Lightning checkpoint file under this adapter's names."""
    if not name.endswith(".ckpt"):
        return None
    if re.match(r"^last(-v\d+)?\.ckpt$", name) or name == "on_exception.ckpt":
        return "last"
    if re.match(r"^best(-v\d+)?\.ckpt$", name):
        return "best"
    return "epoch" if _EPOCH_FILE.match(name) else None


def _net_state(content: Mapping[str, object]) -> dict[str, torch.Tensor]:
    state = content.get("state_dict")
    if not isinstance(state, Mapping):
        return {}
    return {str(k).removeprefix(_PREFIX): v for k, v in state.items()
            if isinstance(v, torch.Tensor) and str(k).startswith(_PREFIX)}


def content_of(content: Mapping[str, object]
             ) -> tuple[int | None, int | None, Mapping[str, object]]:
    """A checkpoint's epoch, step and model weights in Lightning's own fields: ``epoch`` is
    trainer.current_epoch when saved (the epoch in progress, zero-based), ``global_step``
    counts optimizer steps."""
    return as_int(content.get("epoch")), as_int(content.get("global_step")), \
        _net_state(content)


def _holds(content: Mapping[str, object]) -> tuple[str, ...]:
    """What a Lightning checkpoint holds, in the spec's terms: ``epoch``, ``global_step``
    (step), ``state_dict`` (model), ``optimizer_states`` and ``lr_schedulers``; the config
    when the module saved hyperparameters (``hyper_parameters``). Lightning stores no run id."""
    present = {"epoch": "epoch", "global_step": "step", "state_dict": "model",
               "optimizer_states": "optimizer", "lr_schedulers": "scheduler",
               "hyper_parameters": "config"}
    return tuple(name for key, name in present.items() if content.get(key) not in (None, [], {}))


def describe(path: Path, record: FileRecord) -> FileRecord:
    """A checkpoint file's record completed with what it holds (loaded weights-only)."""
    content, error = load_dict(path)
    if content is None:
        return replace(record, error=error)
    epoch, step, _ = content_of(content)
    top = top_level(content)
    return replace(record, epoch=epoch, step=step, keys=tuple(top["keys"]), types=top["types"],
                   holds=_holds(content))
