"""The suite's task, the same for every target: data, model, optimizer and schedules.

Every adapter trains this task, so every target is judged on the same runs: a tiny
deterministic model on synthetic data (milliseconds a run). :func:`task_optimizer` and
:func:`task_schedulers` are the one recipe for the optimizer and LR schedules a scenario's
:class:`~trainspec.conformance.run.scenario.Task` asks for; an adapter hands them to its
framework the way that framework takes them.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterable, Mapping

import torch
from torch.utils.data import TensorDataset

from trainspec.conformance.run.scenario import Task

__all__ = ["draw_host_rngs", "plain_weights", "pool_with_torchmetrics", "rng_digests",
           "task_data", "task_model", "task_optimizer", "task_param_groups", "task_schedulers"]


def task_data(task: Task, seed: int) -> dict[str, TensorDataset]:
    """The splits ``train``, ``val``, ``test`` and an empty ``eval``, the same for a seed."""
    g = torch.Generator().manual_seed(1234 + seed)
    splits = {}
    for name, n in (("train", task.n_train), ("val", task.n_val), ("test", task.n_test)):
        x = torch.randn(n, task.features, generator=g)
        w = torch.arange(1, task.features + 1, dtype=torch.float32)
        y = ((x @ w) > 0).long() % task.classes
        splits[name] = TensorDataset(x, y)
    splits["eval"] = TensorDataset(torch.empty(0, task.features), torch.empty(0, dtype=torch.long))
    return splits


def task_model(task: Task) -> torch.nn.Module:
    """A fresh model: a linear classifier, or one hidden tanh layer when ``task.hidden``."""
    if task.hidden:
        return torch.nn.Sequential(torch.nn.Linear(task.features, task.hidden), torch.nn.Tanh(),
                                   torch.nn.Linear(task.hidden, task.classes))
    return torch.nn.Linear(task.features, task.classes)


def task_param_groups(task: Task, params: Iterable[torch.nn.Parameter]
                      ) -> list[dict[str, object]]:
    """One parameter group, or two (the last tensor at half the LR) for ``extra_param_group``."""
    plist = list(params)
    if task.extra_param_group:
        return [{"params": plist[:-1]}, {"params": plist[-1:], "lr": task.lr / 2}]
    return [{"params": plist}]


def task_optimizer(task: Task, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """Adam, or SGD with momentum 0.9, at ``task.lr`` over :func:`task_param_groups`."""
    groups = task_param_groups(task, params)
    if task.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=task.lr, momentum=0.9)
    return torch.optim.Adam(groups, lr=task.lr)


def task_schedulers(task: Task, optimizer: torch.optim.Optimizer, total_steps: int
                    ) -> list[torch.optim.lr_scheduler.LRScheduler]:
    """The schedules stepped after every optimizer step: none; a LinearLR from 1 to 0.1 over
    ``total_steps`` (sized from ``len(train_loader)`` as a model trainer sizes it); and, for
    ``extra_scheduler``, a StepLR(3) beside it."""
    out: list[torch.optim.lr_scheduler.LRScheduler] = []
    if task.scheduler:
        out.append(torch.optim.lr_scheduler.LinearLR(
            optimizer, start_factor=1.0, end_factor=0.1, total_iters=max(1, total_steps)))
    if task.extra_scheduler:
        out.append(torch.optim.lr_scheduler.StepLR(optimizer, step_size=3))
    return out


def plain_weights(state: Mapping[str, object]) -> dict[str, torch.Tensor]:
    """A state dict's tensors under DDP-independent names, copied to the CPU."""
    return {k.removeprefix("module."): v.detach().to("cpu", copy=True)
            for k, v in state.items() if isinstance(v, torch.Tensor)}


def _digest(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()[:16]


def rng_digests() -> dict[str, str]:
    """A digest of each global generator's state: torch, python, and numpy when installed."""
    out = {"torch": _digest(torch.get_rng_state().numpy().tobytes()),
           "python": _digest(repr(random.getstate()).encode())}
    try:
        import numpy
    except ImportError:
        return out
    state: tuple[object, ...] = numpy.random.get_state(legacy=True)  # type: ignore[assignment]
    array = state[1]
    raw = array.tobytes() if hasattr(array, "tobytes") else repr(array).encode()
    out["numpy"] = _digest(raw + repr(state[2:]).encode())
    return out


def draw_host_rngs() -> None:
    """One draw from python's and numpy's global generators: their state then matters to a
    resume, as it does for any pipeline that samples augmentations from them (RES-4)."""
    random.random()
    try:
        import numpy
    except ImportError:
        return
    numpy.random.random()


def pool_with_torchmetrics(total: float, count: float,
                           device: torch.device | None = None) -> float:
    """The task's "torchmetrics" score: every rank's total and count summed by two synced
    torchmetrics ``SumMetric``s, NaN kept (``nan_strategy="disable"``), then total / count
    (NaN when no rank counted). Two sums rather than a weighted ``MeanMetric``: torchmetrics
    1.9's MeanMetric drops the weight when nan_strategy="disable". Every adapter scoring a
    "torchmetrics" task pools through this, so the metric library is the same for all."""
    from torchmetrics.aggregation import SumMetric

    sums = [SumMetric(nan_strategy="disable").to(device or "cpu") for _ in range(2)]
    sums[0].update(torch.tensor(total, dtype=torch.float64))
    sums[1].update(torch.tensor(count, dtype=torch.float64))
    pooled_total, pooled_count = (float(m.compute()) for m in sums)
    return math.nan if pooled_count == 0 else pooled_total / pooled_count
