"""Checkpoint files: written atomically, read without ever running code embedded in them.

A write goes to a temporary file in the destination folder, is flushed and fsynced, then renamed
over the destination with ``os.replace``: a crash at any point leaves either the old file or the
new one at that path, never a torn one (CKPT-2). A read uses ``torch.load(weights_only=True)``,
which refuses pickled callables (CKPT-3); a missing file names every location tried and a
corrupt one names the file (CKPT-4).
"""

from __future__ import annotations

import errno
import os
import pickle
import re
import shutil
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from trainspec.errors import CheckpointCorruptError, CheckpointNotFoundError, CheckpointWriteError

__all__ = ["find_checkpoint", "load_checkpoint", "save_checkpoint"]


def save_checkpoint(path: Path, state: Mapping[str, Any], *, fsync: bool = True) -> Path:
    """Write ``state`` to ``path`` atomically and return ``path``.

    ``fsync=False`` skips the two fsyncs: the rename stays atomic against a crash of the
    process, but not against a power loss.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale_temporaries(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(dict(state), f)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:
        tmp.unlink(missing_ok=True)
        raise _write_error(path, e) from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        # the rename itself is durable only once the folder's entry is on disk
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path


def _sweep_stale_temporaries(path: Path) -> None:
    """Remove the temporaries of ``path`` that a killed write left (``.NAME.<pid>.tmp`` of a
    process that no longer runs): a crash mid-write must not leave litter that grows."""
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.(\d+)\.tmp$")
    for candidate in path.parent.glob(f".{path.name}.*.tmp"):
        match = pattern.match(candidate.name)
        if match and int(match.group(1)) != os.getpid() and not _is_alive(int(match.group(1))):
            candidate.unlink(missing_ok=True)


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _write_error(path: Path, error: BaseException) -> CheckpointWriteError:
    """What went wrong writing ``path``, named as such: a full disk (which torch reports as an
    "unexpected pos" in its zip writer) or another OS error, with the path and the fix."""
    no_space = (isinstance(error, OSError) and error.errno == errno.ENOSPC) or \
        "unexpected pos" in str(error)
    if no_space:
        free = shutil.disk_usage(path.parent).free
        return CheckpointWriteError(
            f"{path}: cannot write the checkpoint, no space left on the device "
            f"({free} bytes free in {path.parent}). Free some space or point ckpt.dir at "
            "another disk; the previous checkpoint at this path is intact.")
    return CheckpointWriteError(
        f"{path}: cannot write the checkpoint ({_first_line(error)}). Check that ckpt.dir is "
        "writable; the previous checkpoint at this path is intact.")


def find_checkpoint(load_from: str, ckpt_dir: str) -> Path:
    """Resolve ``load_from`` as given, then relative to ``ckpt_dir``; name both when neither is.

    Raises:
        CheckpointNotFoundError: no file at any candidate location.
    """
    given = Path(load_from).expanduser()
    candidates: Sequence[Path] = [given]
    if not given.is_absolute():
        candidates = [given, Path(ckpt_dir).expanduser() / given]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise CheckpointNotFoundError(
        f"ckpt.load_from: no checkpoint file found; tried {tried}. Point ckpt.load_from at an "
        "existing .pt file, absolute or relative to ckpt.dir, or unset it to start fresh."
    )


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint with a weights-only unpickler, mapped to the CPU.

    Raises:
        CheckpointCorruptError: the file is truncated, not a torch checkpoint, not a dict, or
            holds objects a weights-only load refuses (which could run code if unpickled).
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if not zipfile.is_zipfile(path):  # torch writes zip archives: these are other bytes
            raise CheckpointCorruptError(
                f"{path}: not a torch checkpoint (not the zip archive torch.save writes; "
                f"{_actionable_line(e)}). Resume from an earlier checkpoint (last.pt, "
                "epoch_<e>.pt) or start fresh."
            ) from None
        raise CheckpointCorruptError(
            f"{path}: refused to load, the checkpoint holds objects a weights-only load does not "
            f"allow ({_actionable_line(e)}). Loading it fully could execute code embedded in it; "
            "re-save it with tensors, numbers, strings and plain containers only."
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as e:
        raise CheckpointCorruptError(
            f"{path}: cannot read the checkpoint, it is truncated or corrupt ({_first_line(e)}). "
            "Resume from an earlier checkpoint (last.pt, epoch_<e>.pt) or start fresh."
        ) from None
    if not isinstance(state, dict):
        raise CheckpointCorruptError(
            f"{path}: expected a checkpoint dict, found a {type(state).__name__}. "
            "Load a file written by the trainer's save path."
        )
    return state


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _actionable_line(error: BaseException) -> str:
    """The line of a weights-only refusal that says what was refused ("Unsupported global:
    GLOBAL pkg.Config ..."), not torch's preamble; escape codes removed."""
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", str(error))
    found = re.search(r"Unsupported (?:global|operand)[^\n]*?(?=\. |\.?$)", text, re.MULTILINE)
    return found.group(0).strip() if found else _first_line(error)
