"""What every framework adapter does alike: copy a module's weights, read a checkpoint file
weights-only, and describe a file for the checkpoint clauses.

A checkpoint file is what the suite judges, so reading one never raises: the reason it does not
load becomes the entry's ``error``. Nothing here imports a framework.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

__all__ = ["as_int", "error_line", "file_entry", "load_dict", "state_copy"]


def state_copy(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The module's state_dict, each tensor detached and copied to the CPU."""
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


def as_int(value: object) -> int | None:
    """``value`` when it is an int (a bool is not), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def error_line(e: BaseException) -> str:
    """The exception's type and the first line of its message."""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def load_dict(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A checkpoint file loaded with ``weights_only=True`` as a dict, or why it does not load
    so (never unpickled any other way)."""
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # the file is what is being judged: record, do not raise
        return None, error_line(e)
    if not isinstance(content, dict):
        return None, f"not a dict but a {type(content).__name__}"
    return content, None


def file_entry(path: Path, root: Path, role: str | None) -> dict[str, Any]:
    """The entry ``describe_checkpoints`` gives for a file under ``root`` before its content is
    read (see ``trainspec.conformance.trace.FileRecord``)."""
    stat = path.stat()
    return {"relpath": str(path.relative_to(root)), "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns, "role": role, "epoch": None, "step": None,
            "keys": [], "types": {}, "error": None}
