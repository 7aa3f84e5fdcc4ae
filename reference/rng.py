"""Seeding, and the random-number state that an exact resume must carry (RES-4).

States are packed into tensors of fixed shape so that a checkpoint stays loadable with
``weights_only=True`` and every rank's state can be gathered with a plain ``all_gather``.
"""

from __future__ import annotations

import math
import random
from types import ModuleType

import torch

__all__ = ["capture_rng", "restore_rng", "seed_everything"]


def _numpy() -> ModuleType | None:
    try:
        import numpy
    except ImportError:  # numpy is optional: torch runs without it
        return None
    return numpy


def seed_everything(seed: int) -> None:
    """Seed python's, numpy's (when installed) and torch's global generators."""
    random.seed(seed)
    np = _numpy()
    if np is not None:
        np.random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device too


def capture_rng(device: torch.device) -> dict[str, torch.Tensor]:
    """The current state of every global generator this process draws from."""
    version, mt, gauss = random.getstate()
    state = {
        "python": torch.tensor([version, *mt], dtype=torch.int64),
        "python_gauss": torch.tensor([float("nan") if gauss is None else gauss],
                                     dtype=torch.float64),
        "torch": torch.get_rng_state(),
    }
    np = _numpy()
    if np is not None:
        _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        state["numpy"] = torch.tensor([*keys.tolist(), pos, has_gauss], dtype=torch.int64)
        state["numpy_gauss"] = torch.tensor([cached], dtype=torch.float64)
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, torch.Tensor], device: torch.device) -> list[str]:
    """Put the generators back as captured; returns the names of the generators restored."""
    restored = []
    if "python" in state:
        values = state["python"].tolist()
        gauss = float(state["python_gauss"].item())
        random.setstate((values[0], tuple(values[1:]), None if math.isnan(gauss) else gauss))
        restored.append("python")
    np = _numpy()
    if np is not None and "numpy" in state:
        values = state["numpy"].tolist()
        keys = np.array(values[:-2], dtype=np.uint32)
        cached = float(state["numpy_gauss"].item())
        np.random.set_state(("MT19937", keys, values[-2], values[-1], cached))
        restored.append("numpy")
    if "torch" in state:
        torch.set_rng_state(state["torch"])
        restored.append("torch")
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)
        restored.append("cuda")
    return restored
