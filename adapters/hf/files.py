"""The Trainer's checkpoints in the suite's terms: directories, their roles, what they hold.

A checkpoint is a directory ``checkpoint-<step>/`` (model.safetensors, optimizer.pt,
scheduler.pt, rng_state.pth, trainer_state.json, training_args.bin). "last" is the highest step,
"best" the ``best_model_checkpoint`` the newest complete ``trainer_state.json`` records, any
other "epoch" (see ``docs/frameworks/hf.md``). Torch files load weights-only, never unpickled.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from trainspec.conformance.run.files import FileRecord, Role, as_int, describe_files
from trainspec.conformance.run.records import FileSnapshot, Weights
from trainspec.conformance.run.task import plain_weights

__all__ = ["checkpoint_dirs", "completed_epoch", "describe", "describe_dir", "finetune_weights",
           "read_state", "snapshot"]

_PREFIX = "net."  # the model's attribute holding the task's model
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_STATE_FILE = "trainer_state.json"
# torch files a resume reads, loaded weights-only when described; training_args.bin (a pickled
# TrainingArguments) is written "as good practice" and never read back by the Trainer
_RESUME_FILES = ("optimizer.pt", "scheduler.pt", "rng_state.pth")
# on several ranks each rank saves its own RNG state, rng_state_<rank>.pth, instead
_RANK_RNG = re.compile(r"^rng_state_(\d+)\.pth$")


def completed_epoch(epoch: object) -> int | None:
    """The last epoch a Trainer state has completed, zero-based; -1 before the first."""
    if isinstance(epoch, bool) or not isinstance(epoch, int | float) or not math.isfinite(epoch):
        return None
    return math.floor(epoch + 1e-6) - 1


def _reason(e: BaseException) -> str:
    """One plain line: the exception's type and its message's first sentence."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first.split('. ')[0]}"


def _step(path: Path) -> int:
    match = _CHECKPOINT.match(path.name)
    return int(match.group(1)) if match else -1


def checkpoint_dirs(root: Path) -> list[Path]:
    """The Trainer's checkpoint directories under ``root``, oldest step first."""
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and _CHECKPOINT.match(p.name)),
                  key=_step)


def read_state(directory: Path) -> tuple[dict[str, object] | None, str | None]:
    """A checkpoint's trainer_state.json, or why it cannot be read."""
    path = directory / _STATE_FILE
    if not path.is_file():
        return None, f"incomplete: no {_STATE_FILE} (the Trainer writes it last)"
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return None, f"{_STATE_FILE}: {_reason(e)}"
    if not isinstance(state, dict):
        return None, f"{_STATE_FILE}: not an object"
    return state, None


def _load_weights_file(path: Path) -> Mapping[str, object]:
    """A weights file: safetensors (safe by construction) or a torch file loaded weights-only."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path), device="cpu")
    content = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(content, dict):
        raise ValueError(f"{path}: not a state dict but a {type(content).__name__}")
    return content


def _weights_file(directory: Path) -> Path | None:
    return next((directory / n for n in _WEIGHT_FILES if (directory / n).is_file()), None)


def _load_torch_file(path: Path) -> tuple[object, str | None, str | None]:
    """(content, how it loaded, error): weights-only, then weights-only with numpy's array
    types allowlisted, as the Trainer itself loads rng_state.pth (never a full unpickling)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True), "weights-only", None
    except Exception as e:  # the file is what is being judged: record, do not raise
        plain = _reason(e)
    try:
        from transformers.trainer_pt_utils import safe_globals

        allowlisted: Callable[[], Any] = safe_globals  # untyped in transformers
        with allowlisted():
            content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return None, None, plain
    return content, "weights-only, numpy arrays allowlisted (as the Trainer loads it)", None


def _resume_files(directory: Path) -> list[str]:
    """The torch files a resume from ``directory`` reads: the optimizer, the scheduler, and the
    RNG state, one file per rank (rng_state_<rank>.pth) when saved on several ranks."""
    ranks = sorted(int(m.group(1)) for p in directory.iterdir()
                   if (m := _RANK_RNG.match(p.name)))
    if ranks and not (directory / "rng_state.pth").is_file():
        return [*_RESUME_FILES[:-1], *(f"rng_state_{rank}.pth" for rank in ranks)]
    return list(_RESUME_FILES)


def _check_weights(weights: Path | None, types: dict[str, str], problems: list[str]) -> None:
    """The model's weights file: its type when it loads, else a problem."""
    if weights is None:
        problems.append(f"no {' or '.join(_WEIGHT_FILES)}")
        return
    try:
        _load_weights_file(weights)
        types[weights.name] = "safetensors" if weights.suffix == ".safetensors" else "dict"
    except Exception as e:  # the file is what is being judged
        problems.append(f"{weights.name}: {_reason(e)}")


def _check_torch_files(directory: Path, types: dict[str, str], problems: list[str]) -> None:
    """The torch files a resume reads (and training_args.bin): how each loads, or a problem."""
    for name in (*_resume_files(directory), "training_args.bin"):
        path = directory / name
        needed = name != "training_args.bin"  # never read back by the Trainer
        if not path.is_file():
            if needed:
                problems.append(f"no {name}")
            continue
        content, how, load_error = _load_torch_file(path)
        if load_error is not None:
            types[name] = f"does not load weights-only ({load_error})"
            if needed:
                problems.append(f"{name} does not load weights-only ({load_error})")
        else:
            types[name] = f"{type(content).__name__} ({how})"


def describe_dir(directory: Path, root: Path, role: Role | None) -> FileRecord:
    """One checkpoint directory as one record: its files are its top-level keys."""
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    stats = [p.stat() for p in files]
    types: dict[str, str] = {}
    problems: list[str] = []
    epoch = step = None
    state, error = read_state(directory)
    if state is None:
        problems.append(str(error))
    else:
        epoch, step = completed_epoch(state.get("epoch")), as_int(state.get("global_step"))
        types[_STATE_FILE] = "json"
    weights = _weights_file(directory)
    _check_weights(weights, types, problems)
    _check_torch_files(directory, types, problems)
    # in the spec's terms (CKPT-1): the config is only in training_args.bin, a pickle no
    # weights-only load reads, and HF records no run id
    present = {"epoch": epoch is not None, "step": step is not None, "model": weights is not None,
               "optimizer": (directory / "optimizer.pt").is_file(),
               "scheduler": (directory / "scheduler.pt").is_file()}
    return FileRecord(
        relpath=directory.relative_to(root).as_posix(), size=sum(s.st_size for s in stats),
        mtime_ns=max([directory.stat().st_mtime_ns, *(s.st_mtime_ns for s in stats)]),
        role=role, epoch=epoch, step=step,
        keys=tuple(str(p.relative_to(directory)) for p in files), types=types,
        error="; ".join(problems) if problems else None,
        holds=tuple(name for name, held in present.items() if held))


def _best_name(dirs: Sequence[Path]) -> str | None:
    """The best checkpoint's directory name, as the newest complete trainer_state.json says."""
    for directory in reversed(dirs):
        state, _ = read_state(directory)
        if state is not None:
            best = state.get("best_model_checkpoint")
            return Path(best).name if isinstance(best, str) and best else None
    return None


def describe(root: Path) -> list[FileRecord]:
    """Every file under ``root`` (role None), then every checkpoint directory as one record
    per role it has: "last", "best" (both for a directory newest and best), else "epoch"."""
    records = describe_files(root, lambda name: None, lambda path, record: record)
    dirs = checkpoint_dirs(root)
    best = _best_name(dirs)
    for directory in dirs:
        roles: list[Role] = ["last"] if directory == dirs[-1] else []
        if directory.name == best:
            roles.append("best")
        records += [describe_dir(directory, root, role) for role in roles or ["epoch"]]
    return records


def _net_state(state: Mapping[str, object]) -> Weights:
    return plain_weights({k.removeprefix(_PREFIX): v for k, v in state.items()
                          if k.startswith(_PREFIX)})


def snapshot(directory: Path | None) -> FileSnapshot | None:
    """A checkpoint directory as seen now: identity, epoch, step, the model's weights."""
    if directory is None or not directory.is_dir():
        return None
    record = describe_dir(directory, directory.parent, None)
    seen = FileSnapshot(path=str(directory), mtime_ns=record.mtime_ns, size=record.size,
                        epoch=record.epoch, step=record.step)
    weights = _weights_file(directory)
    if weights is None:
        return replace(seen, error=record.error)
    try:
        return replace(seen, weights=_net_state(_load_weights_file(weights)))
    except Exception as e:  # the file is what is being judged: record, do not raise
        return replace(seen, error=f"{weights.name}: {_reason(e)}")


def finetune_weights(load_from: str) -> Mapping[str, object]:
    """The model weights of a checkpoint directory (or of a weights file), for a finetune."""
    path = Path(load_from)
    if path.is_dir():
        found = _weights_file(path)
        if found is None:
            raise FileNotFoundError(f"checkpoint {path}: no {' or '.join(_WEIGHT_FILES)} in "
                                    "this directory")
        path = found
    elif not path.is_file():
        raise FileNotFoundError(f"checkpoint {path}: no such file or directory")
    return _load_weights_file(path)
