"""The trainer's checkpoint files, loaded weights-only in a subprocess (CKPT-1, BEST-3).

The audit's own process never loads a file a trainer wrote: :func:`probe_files` starts
``python -m trainspec.conformance.audit.fileprobe FILE...``, bounded in time, which loads
each with ``torch.load(weights_only=True)`` (nothing in a file can run) and prints one JSON
line per file: whether it loaded (the refusal's first line if not), its top-level keys, the
epoch, step and run id it records, and a digest of the model weights it holds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FileSeen", "main", "probe_files"]

_TIMEOUT_S = 300.0
_MODEL_KEYS = ("model_state_dict", "model", "state_dict")


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSeen:
    path: Path
    error: str | None = None  # why a weights-only load refused it
    keys: tuple[str, ...] = ()
    epoch: int | None = None
    step: int | None = None
    run_id: str | None = None
    weights: str | None = None  # digest of the model weights it holds


def probe_files(paths: Sequence[Path], *, timeout_s: float = _TIMEOUT_S
                ) -> dict[Path, FileSeen]:
    """Each file as a weights-only load in a fresh interpreter sees it."""
    if not paths:
        return {}
    try:
        done = subprocess.run([sys.executable, "-m", __name__, *map(str, paths)],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {p: FileSeen(path=p, error=f"loading timed out after {timeout_s:g} s")
                for p in paths}
    seen: dict[Path, FileSeen] = {}
    for line in done.stdout.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict) or "path" not in data:
            continue
        path = Path(str(data["path"]))
        seen[path] = FileSeen(
            path=path, error=_opt_str(data.get("error")),
            keys=tuple(str(k) for k in data.get("keys", []) if isinstance(k, str)),
            epoch=_opt_int(data.get("epoch")), step=_opt_int(data.get("step")),
            run_id=_opt_str(data.get("run_id")), weights=_opt_str(data.get("weights")))
    failed = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {p: seen.get(p, FileSeen(path=p, error=f"the loader died: {failed}")) for p in paths}


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _describe(path: str) -> dict[str, object]:
    import torch

    from trainspec.conformance.run.auditlog import weights_digest

    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # any refusal: the file is judged, the probe goes on
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return {"path": path, "error": f"{type(e).__name__}: {first}"[:300]}
    if not isinstance(content, Mapping):
        return {"path": path, "keys": [], "weights": None}
    model = next((content[k] for k in _MODEL_KEYS if isinstance(content.get(k), Mapping)),
                 None)
    return {"path": path, "keys": sorted(str(k) for k in content),
            "epoch": content.get("epoch") if isinstance(content.get("epoch"), int) else None,
            "step": content.get("train_step") if isinstance(content.get("train_step"), int)
            else None,
            "run_id": content.get("run_id") if isinstance(content.get("run_id"), str) else None,
            "weights": None if model is None else weights_digest(model)}


def main(argv: Sequence[str]) -> int:
    for path in argv:
        print(json.dumps(_describe(path)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
