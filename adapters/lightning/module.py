"""The suite's task as a LightningModule: the task's model, optimizer and schedules, and the
scripted score logged as the monitored metric (``score``) the way Lightning's docs say for the
task's kind of metric. Lightning is imported inside :func:`module_class` only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional

from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.task import (
    pool_with_torchmetrics,
    task_model,
    task_optimizer,
    task_schedulers,
)

__all__ = ["MONITOR", "TaskModule", "module_class"]

MONITOR = "score"


class TaskModule(torch.nn.Module):
    """The LightningModule training the suite's task (the body :func:`module_class` mixes
    into ``lightning.LightningModule``): it logs the scripted score as the monitored metric."""

    trainer: Any  # LightningModule's
    log: Callable[..., None]  # LightningModule.log

    def __init__(self, scenario: Scenario, rank: int, total_steps: int) -> None:
        super().__init__()
        self.scenario, self.score_rank, self.total_steps = scenario, rank, total_steps
        self.net = task_model(scenario.task)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self(batch[0])  # the score is scripted, not measured

    def on_validation_epoch_end(self) -> None:
        # this rank's (total, count), logged the way Lightning's docs say for the task's kind
        # of metric: pooled by torchmetrics; a mean over `count` samples with sync_dist=True,
        # as a validation_step logging its batch's mean does (Lightning weights each rank by
        # its batch sizes); or a rank-local value
        metric = self.scenario.task.metric
        total, count = self.scenario.scores.pairs(self.trainer.current_epoch, self.score_rank)
        local = math.nan if count == 0 else total / count
        if metric == "torchmetrics":  # pooled as for every adapter
            self.log(MONITOR, pool_with_torchmetrics(total, count))
        elif metric == "reduce_mean":
            # a rank without samples adds nothing (0 * 0); all without: 0/0 = NaN
            self.log(MONITOR, local if count else 0.0, sync_dist=True, batch_size=int(count))
        else:
            self.log(MONITOR, local)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self(batch[0])

    def configure_optimizers(self) -> Any:
        optimizer = task_optimizer(self.scenario.task, self.net.parameters())
        schedulers = task_schedulers(self.scenario.task, optimizer, self.total_steps)
        if not schedulers:
            return optimizer
        # stepped after every optimizer step, as the task's recipe says
        return [optimizer], [{"scheduler": s, "interval": "step"} for s in schedulers]


@functools.cache
def module_class() -> type[TaskModule]:
    import lightning

    class LightningTaskModule(TaskModule, lightning.LightningModule):
        """The task's module as a LightningModule."""

    return LightningTaskModule
