"""The suite's task in the Trainer's terms, and how the scripted score reaches the Trainer.

The model's forward returns ``{"loss", "logits"}``; a collator turns the task's pairs into its
keyword arguments. Each validation sample carries a second label, ``tally``: rank r's scripted
(total, count) sits on the first sample r evaluates, as accelerate deals the eval loader's
batches, and ``compute_metrics`` pools the tallies the Trainer gathered (see
``docs/frameworks/hf.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch.nn import functional

from trainspec.conformance.run.records import Weights
from trainspec.conformance.run.scenario import Scenario, Task
from trainspec.conformance.run.task import draw_host_rngs, plain_weights

__all__ = ["TALLY", "Scored", "TaskModel", "collate", "eval_batch_size", "eval_holders",
           "model_weights", "pooled_tally", "rank_batches", "sample_tallies", "unheld_rank"]

TALLY = "tally"  # the validation samples' second label: their (total, count)


class TaskModel(torch.nn.Module):
    """The task's model, with a forward the Trainer understands: ``{"loss", "logits"}``."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None,
                tally: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        # ``tally`` is a label the metric reads and the loss does not: the Trainer passes every
        # label to forward, and keeps only the inputs forward names
        logits: torch.Tensor = self.net(x)
        if labels is None:
            return {"logits": logits}
        return {"loss": functional.cross_entropy(logits, labels), "logits": logits}


def collate(batch: Sequence[tuple[torch.Tensor, ...]]) -> dict[str, torch.Tensor]:
    """The task's (x, y) pairs, or (x, y, tally) triples of a scored split, as the model's
    keyword arguments; one draw from python's and numpy's generators per batch, as a
    pipeline's augmentations would (RES-4)."""
    draw_host_rngs()
    columns = list(zip(*batch, strict=True))
    out = {"x": torch.stack(columns[0]), "labels": torch.stack(columns[1])}
    if len(columns) > 2:
        out[TALLY] = torch.stack(columns[2])
    return out


def rank_batches(n_samples: int, batch_size: int, world_size: int) -> int:
    """How many batches one rank draws from a split: accelerate deals whole batches in turn
    and evens them out across ranks (``BatchSamplerShard``, ``even_batches=True``)."""
    batches = -(-n_samples // batch_size)
    return -(-batches // world_size)


def eval_batch_size(task: Task, world_size: int) -> int:
    """``per_device_eval_batch_size``: the task's batch size, cut when the ranks outnumber the
    validation batches so that every rank evaluates validation samples of its own."""
    return max(1, min(task.batch_size, -(-task.n_val // world_size)))


def eval_holders(n_samples: int, batch_size: int, world_size: int) -> list[int]:
    """The rank that evaluates each sample of an evaluation split, as accelerate shards the
    Trainer's eval loader (``BatchSamplerShard``, ``split_batches=False``): whole batches dealt
    in turn, batch ``b`` to rank ``b % world_size``. What a rank is dealt beyond these, to even
    the batches out, repeats the split's first samples: padding, which ``gather_for_metrics``
    drops."""
    return [(i // batch_size) % world_size for i in range(n_samples)]


def sample_tallies(pairs: Sequence[tuple[float, float]], holders: Sequence[int]
                   ) -> list[tuple[float, float]]:
    """Each sample's (total, count) in one validation: rank r's scripted pair on the first
    sample rank r evaluates, (0, 0) on every other sample. Summed over the samples, each once,
    they give sum(totals) and sum(counts) exactly (a sum with zeros rounds nothing)."""
    out = [(0.0, 0.0)] * len(holders)
    for rank, pair in enumerate(pairs):
        first = next((i for i, holder in enumerate(holders) if holder == rank), None)
        if first is not None:
            out[first] = (float(pair[0]), float(pair[1]))
    return out


def pooled_tally(tally: object, metric: str) -> float:
    """``compute_metrics``' score: sum of totals over sum of counts of the gathered tallies
    (NaN when nothing was counted); summed as they are, or by two torchmetrics ``SumMetric``s."""
    rows = torch.as_tensor(tally, dtype=torch.float64).reshape(-1, 2)
    if metric == "torchmetrics":
        from torchmetrics.aggregation import SumMetric

        # NaN kept, as pool_with_torchmetrics keeps it; no sync: the Trainer has gathered
        # every rank's rows
        sums = [SumMetric(nan_strategy="disable", sync_on_compute=False) for _ in range(2)]
        for metric_sum, column in zip(sums, rows.unbind(dim=1), strict=True):
            metric_sum.update(column)
        total, count = (float(m.compute()) for m in sums)
    else:
        total, count = (float(column.sum()) for column in rows.unbind(dim=1))
    return math.nan if count == 0 else total / count


class Scored(torch.utils.data.Dataset[tuple[torch.Tensor, ...]]):
    """An evaluation split whose samples carry, after (x, y), their tally in the evaluation in
    progress (read when the sample is loaded)."""

    def __init__(self, split: torch.utils.data.Dataset[tuple[torch.Tensor, ...]], size: int,
                 tally: Callable[[int], tuple[float, float]]) -> None:
        self.split, self.size, self.tally = split, size, tally

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        x, y = self.split[index]
        return x, y, torch.tensor(self.tally(index), dtype=torch.float64)


def model_weights(model: torch.nn.Module) -> Weights:
    """The task model's weights, under the task model's own names."""
    return plain_weights((model.net if isinstance(model, TaskModel) else model).state_dict())


def unheld_rank(scenario: Scenario) -> str | None:
    """Why the scenario's scores cannot be staged, if a rank with a scripted count evaluates
    no validation sample (every sample it is dealt is padding, dropped by the Trainer)."""
    task, n = scenario.task, scenario.world_size
    held = set(eval_holders(task.n_val, eval_batch_size(task, n), n))
    script = scenario.scores
    validations = range(len(script.epochs))
    for epoch in validations if script.first is None else (None, *validations):
        for rank in sorted(set(range(n)) - held):
            if script.pairs(epoch, rank) != (0.0, 0.0):
                return (f"the hf adapter cannot stage rank {rank}'s scripted (total, count) "
                        f"{script.pairs(epoch, rank)}: the Trainer's eval loader deals the "
                        f"{task.n_val} validation samples in batches over {n} ranks, and rank "
                        f"{rank} evaluates none of them (only padding, which "
                        "gather_for_metrics drops); run on fewer ranks")
    return None
