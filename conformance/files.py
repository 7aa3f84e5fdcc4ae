"""What a run left in its checkpoint folder, described as data.

The checks never parse checkpoint files themselves: an adapter describes them, in a worker
process, as JSON-able entries (``relpath``, ``role``, ``epoch``, ``step``, the top-level ``keys``
and their ``types``, and a load ``error``). Trainers in the seed's shape write ``last.pt``,
``best.pt`` and ``epoch_<e>.pt`` holding ``epoch`` and ``train_step``: :func:`describe_seed_files`
reads those, with ``weights_only=True``. A framework adapter maps its own files onto the same
roles (its ``describe_checkpoints(root)``), so every checkpoint clause reads one vocabulary.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import torch

__all__ = ["ROLES", "Role", "describe_seed_files", "seed_role"]

Role = Literal["last", "best", "epoch"]
ROLES: tuple[Role, ...] = ("last", "best", "epoch")

_EPOCH_FILE = re.compile(r"^epoch_\d+\.pt$")


def seed_role(name: str) -> Role | None:
    """The role of a file under the seed's names; None for anything else (temporaries...)."""
    if name == "last.pt":
        return "last"
    if name == "best.pt":
        return "best"
    return "epoch" if _EPOCH_FILE.match(name) else None


def describe_seed_files(root: Path) -> list[dict[str, Any]]:
    """Every file under ``root``; checkpoint files loaded weights-only, never trusted."""
    entries: list[dict[str, Any]] = []
    if not root.exists():
        return entries
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        stat = path.stat()
        entry: dict[str, Any] = {"relpath": str(path.relative_to(root)), "size": stat.st_size,
                                 "mtime_ns": stat.st_mtime_ns, "role": seed_role(path.name),
                                 "epoch": None, "step": None, "keys": [], "types": {},
                                 "error": None}
        if path.suffix == ".pt":
            entry.update(_read(path))
        entries.append(entry)
    return entries


def _read(path: Path) -> dict[str, Any]:
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # the file is what is being judged: record, do not raise
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    if not isinstance(content, dict):
        return {"error": f"not a dict but a {type(content).__name__}"}
    epoch, step = content.get("epoch"), content.get("train_step")
    return {"epoch": epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None,
            "step": step if isinstance(step, int) and not isinstance(step, bool) else None,
            "keys": sorted(str(k) for k in content),
            "types": {str(k): type(v).__name__ for k, v in content.items()}}
