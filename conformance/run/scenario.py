"""Scenarios: what one trainer run is asked to do.

A scenario fixes the config keys, the task (a tiny deterministic model and synthetic data), the
score each validation reports on each rank, where the run is interrupted, which checkpoint it
starts from, and the world size. Scores are scripted, not measured, so NaN, ties and rank
disagreement are chosen by the check, never left to chance. Scenarios are frozen and
JSON-serializable: they travel to worker processes as JSON, never as pickles.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CrashPoint",
    "RankScores",
    "Scenario",
    "ScoreScript",
    "Task",
    "default_config",
]

# (total, count) per rank; the pooled score is sum(total) / sum(count)
RankScores = tuple[tuple[float, float], ...]

#: Where a crash point interrupts a run (each value's comment says when).
CrashWhere = Literal[
    "train_start",  # entering train_epoch(epoch): the previous epoch's files are written
    "train_end",  # leaving train_epoch(epoch): nothing of this epoch saved yet
    "val_start",  # entering the validation after epoch (seed order: after its last.pt write)
    "val_after_save",  # after save_if_best, before step_patience
    "write",  # inside the epoch's first checkpoint write (of ``file``), part-way through
]
# An adapter calls ctx.crash_point(where, epoch) at the points its trainer has. The suite also
# interrupts at what it sees itself: train_start before an epoch's TrainStart record, train_end
# after its TrainEnd record, and "write" at any write into the checkpoint folder, whatever
# library makes it (run/writewatch.py). A point a run never reaches is not judged (n/a).
CrashHow = Literal["sigkill", "sigterm", "raise", "stall"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashPoint:
    """Interrupt the run at ``where`` of ``epoch``: killed, terminated, or an exception."""

    where: CrashWhere
    epoch: int
    how: CrashHow = "sigkill"
    rank: int = 0  # which rank is interrupted (under several ranks)
    fraction: float = 0.5  # "write": the share of the file's bytes written before the kill
    file: str = ""  # "write": only a file (or folder) of this name; "" the first write
    stall_s: float = 0.0  # "stall": how long the rank stops answering, then raises


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """The suite's own task: a tiny model on synthetic data, deterministic from ``seed``."""

    n_train: int = 24
    n_val: int = 8
    n_test: int = 8
    batch_size: int = 4
    features: int = 4
    classes: int = 2
    hidden: int = 0  # 0: a single Linear layer
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = 0.05
    scheduler: bool = True  # a LinearLR sized from len(train_loader) * num_epochs
    extra_param_group: bool = False  # the model's bias in a second optimizer group
    extra_scheduler: bool = False  # a second registered scheduler
    # the schedulers registered before the optimizer: a resume whose optimizer does not fit
    # then fails after they were restored (RES-5: a failure raised part-way through restoring)
    schedulers_first: bool = False
    # how the probe turns (total, count) into a score: pooled by the base's reduce_mean, by
    # torchmetrics, or left rank-local (total / count of this rank alone, unpooled)
    metric: Literal["reduce_mean", "torchmetrics", "local"] = "reduce_mean"
    empty_eval_split: bool = True  # an eval_loader over an empty dataset (DBG-1)
    slow_writes_s: float = 0.0  # rank 0's torch.save pauses this long first (DIST-4)
    # who makes a multi-rank run's default process group: the trainer (from the launcher's
    # MASTER_ADDR and MASTER_PORT), or the launch, before the trainer is built (a launch
    # script that calls init_process_group first, as many do)
    group: Literal["trainer", "launch"] = "trainer"
    shuffle: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreScript:
    """The score of every validation: per epoch, and for the ``val.first`` validation.

    ``epochs[e]`` holds one ``(total, count)`` per rank (or one pair used on every rank).
    """

    epochs: tuple[RankScores, ...] = ()
    first: RankScores | None = None

    @classmethod
    def of(cls, scores: Sequence[float], first: float | None = None) -> ScoreScript:
        """Every rank reports ``(score, 1)``, so the pooled score is ``score`` itself."""
        return cls(epochs=tuple(((float(s), 1.0),) for s in scores),
                   first=None if first is None else ((float(first), 1.0),))

    def pairs(self, epoch: int | None, rank: int) -> tuple[float, float]:
        """This rank's ``(total, count)`` for the validation after ``epoch`` (None: val.first).

        A validation the script does not foresee (a trainer validating when it should not)
        scores NaN, with a count of 1 so that pooling still runs.
        """
        row = self.first if epoch is None else (
            self.epochs[epoch] if 0 <= epoch < len(self.epochs) else None)
        if row is None:
            return (math.nan, 1.0)
        return row[rank] if rank < len(row) else row[0]

    def pooled(self, epoch: int | None, world_size: int) -> float:
        """The spec's pooled score of that validation: sum of totals over sum of counts."""
        pairs = [self.pairs(epoch, r) for r in range(world_size)]
        count = sum(c for _, c in pairs)
        return math.nan if count == 0 else sum(t for t, _ in pairs) / count


def default_config() -> dict[str, Any]:
    """The outline's config keys at their defaults, as a nested dict."""
    return {
        "seed": 0,
        "num_epochs": 3,
        "debug": False,
        "val": {"first": False, "every_n_epochs": 1, "minimize": False, "patience": None,
                "start_patience": 0},
        "test": {"enable": True},
        "ckpt": {"enable": True, "dir": "", "load_from": None, "resume": False,
                 "model_only": False, "every_n_epochs": None, "save_last": True},
        "grad_accum_steps": 1,
        "grad_clip": None,
        "weight_decay": 0.0,
        "ddp": {"backend": None, "timeout_s": 30.0},
        "save_preds": {"enable": False},
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """One run of a trainer: config, task, scores, interruption, start checkpoint, ranks."""

    name: str
    config: Mapping[str, Any] = field(default_factory=default_config)
    task: Task = field(default_factory=Task)
    scores: ScoreScript = field(default_factory=ScoreScript)
    crash: CrashPoint | None = None
    world_size: int = 1

    def with_config(self, **changes: Any) -> Scenario:
        """A copy with dotted config keys changed: ``with_config(**{"val.patience": 2})``."""
        config = _deep_copy(self.config)
        for dotted, value in changes.items():
            node = config
            *parents, leaf = dotted.split(".")
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = value
        return dataclasses.replace(self, config=config)

    def get(self, dotted: str) -> Any:
        node: Any = self.config
        for key in dotted.split("."):
            node = node[key]
        return node

    def replace(self, **changes: Any) -> Scenario:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": _deep_copy(self.config),
            "task": dataclasses.asdict(self.task),
            "scores": {"epochs": [list(map(list, row)) for row in self.scores.epochs],
                       "first": None if self.scores.first is None
                       else list(map(list, self.scores.first))},
            "crash": None if self.crash is None else dataclasses.asdict(self.crash),
            "world_size": self.world_size,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Scenario:
        scores = data["scores"]

        def rows(row: Sequence[Sequence[float]]) -> RankScores:
            return tuple((float(t), float(c)) for t, c in row)

        return cls(
            name=str(data["name"]),
            config=_deep_copy(data["config"]),
            task=Task(**data["task"]),
            scores=ScoreScript(epochs=tuple(rows(r) for r in scores["epochs"]),
                               first=None if scores["first"] is None else rows(scores["first"])),
            crash=None if data["crash"] is None else CrashPoint(**data["crash"]),
            world_size=int(data["world_size"]),
        )


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_deep_copy(v) for v in value]
    return value
