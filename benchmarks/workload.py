"""The trainer benchmark's workload: model sizes, data, and the epoch every arm runs.

Shared by the reference's arms (:mod:`benchmarks.bench_trainer`) and the framework anchors
(:mod:`benchmarks.anchors`), so that every arm trains the same model on the same data.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (the conventional alias)
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

__all__ = ["LR", "SEED", "SIZES", "WEIGHT_DECAY", "Clock", "ModelSize", "Timing", "make_model",
           "make_optimizer", "splits", "train_epoch", "val_loss"]

SEED = 0
LR = 1e-3
WEIGHT_DECAY = 0.01  # torch.optim.AdamW's default, set explicitly where a framework differs


@dataclass(frozen=True, slots=True)
class Timing:
    """One arm's loop: wall-clock seconds, this process's CPU seconds (not waits), and the
    seconds from the clock's start to the first optimizer step (the arm's start-up)."""

    wall_s: float
    cpu_s: float
    startup_s: float = 0.0


class Clock:
    """``with Clock() as clock: ...`` then ``clock.timing``; the timed code calls
    :meth:`first_step` as its first optimizer step begins (the start-up ends there)."""

    def __enter__(self) -> Clock:
        self.began, self._cpu = time.perf_counter(), time.process_time()
        self._first: float | None = None
        return self

    def first_step(self) -> None:
        if self._first is None:
            self._first = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        now = time.perf_counter()
        self.timing = Timing(now - self.began, time.process_time() - self._cpu,
                             (self._first or self.began) - self.began)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSize:
    name: str
    features: int
    hidden: int
    hidden_layers: int
    classes: int
    batch_size: int
    train_samples: int
    val_samples: int
    epochs: int

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.train_samples // self.batch_size)

    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.epochs


SIZES = (
    # the reference example's classifier: 16 -> 32 -> 4
    ModelSize(name="tiny MLP", features=16, hidden=32, hidden_layers=1, classes=4,
              batch_size=32, train_samples=4096, val_samples=1024, epochs=4),
    # sized so that one step (DataLoader batch, forward, backward, AdamW) takes about 1 ms on
    # one thread of this machine's CPU (AMD EPYC, 2 cores)
    ModelSize(name="~1 ms/step MLP", features=128, hidden=288, hidden_layers=2, classes=10,
              batch_size=64, train_samples=8192, val_samples=2048, epochs=3),
)


def splits(size: ModelSize) -> tuple[TensorDataset, TensorDataset]:
    """The train and validation sets: Gaussian blobs around one center per class."""
    gen = torch.Generator().manual_seed(1234)
    centers = torch.randn(size.classes, size.features, generator=gen)
    out = []
    for n in (size.train_samples, size.val_samples):
        labels = torch.randint(0, size.classes, (n,), generator=gen)
        out.append(TensorDataset(centers[labels] + torch.randn(n, size.features, generator=gen),
                                 labels))
    return out[0], out[1]


def make_model(size: ModelSize) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(size.features, size.hidden), nn.ReLU()]
    for _ in range(size.hidden_layers - 1):
        layers += [nn.Linear(size.hidden, size.hidden), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(size.hidden, size.classes))


def make_optimizer(model: nn.Module) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)


def train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer,
                loader: DataLoader[Any]) -> int:
    """One epoch; the bare loop and the reference run exactly this. The optimizer steps."""
    model.train()
    steps = 0
    for features, labels in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(features), labels)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        steps += 1
    return steps


def val_loss(model: nn.Module, loader: DataLoader[Any]) -> float:
    model.eval()
    total, seen = 0.0, 0
    with torch.no_grad():
        for features, labels in loader:
            total += float(F.cross_entropy(model(features), labels, reduction="sum"))
            seen += len(labels)
    return total / seen
