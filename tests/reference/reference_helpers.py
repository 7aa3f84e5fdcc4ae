"""A scripted trainer for the reference's tests, and the small tools around it.

:class:`ScriptedTrainer` is a real :class:`~trainspec.reference.BaseTrainer` subclass (a tiny
model trained with AdamW, a scheduler, shuffling, dropout and python/numpy noise, so that every
RNG and every stateful item matters to an exact resume) whose validation scores are set by the
test. It records what the loop made it do: the order of train/val/test calls, each validation's
improvement and stop flags, the step counter and the weights after every epoch, and the weights
the test pass evaluated.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from trainspec.reference import BaseTrainer, Stateful, TrainConfig, load_checkpoint

__all__ = [
    "BestFile",
    "Counter",
    "Crash",
    "PooledTrainer",
    "ScriptedTrainer",
    "Validation",
    "assert_same_state",
    "assert_same_weights",
    "files_under",
    "make_config",
    "snapshot",
]

Weights = dict[str, torch.Tensor]
NUM_TRAIN = 24  # 6 batches of 4
BATCH_SIZE = 4


class Crash(RuntimeError):
    """The simulated crash of an interrupted run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Validation:
    """One validation as the trainer saw it: the epoch it followed (-1 for ``val.first``)."""

    epoch: int
    score: float
    improved: bool
    stop: bool
    patience_left: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class BestFile:
    """``best.pt`` as found after a validation: its file identity and its content."""

    stamp: tuple[int, int]  # (inode, mtime): an atomic rewrite changes both
    ckpt: dict[str, Any]

    @property
    def epoch(self) -> int:
        return int(self.ckpt["epoch"])


class Counter:
    """A registered stateful item that is neither model, optimizer nor scheduler."""

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state_dict: Mapping[str, Any], /) -> None:
        self.value = int(state_dict["value"])


def make_config(ckpt_dir: Path | None = None, **overrides: Any) -> TrainConfig:
    """A config for tests: 3 epochs, checkpoints into ``ckpt_dir`` (off when it is None).

    ``overrides`` are config keys; sections are merged key by key: ``val={"patience": 2}``.
    """
    base: dict[str, Any] = {
        "seed": 0,
        "num_epochs": 3,
        "ddp": {"backend": "gloo", "timeout_s": 20.0},
        "ckpt": {"enable": ckpt_dir is not None, "dir": str(ckpt_dir or "checkpoints")},
    }
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return TrainConfig.from_mapping(base)


def snapshot(model: nn.Module) -> Weights:
    """A detached CPU copy of a module's weights, keys without DDP's ``module.`` prefix."""
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    return {k: v.detach().to("cpu", copy=True) for k, v in inner.state_dict().items()}


def assert_same_weights(actual: Mapping[str, torch.Tensor],
                        expected: Mapping[str, torch.Tensor]) -> None:
    """Bitwise equality of two state dicts (``module.`` prefixes ignored)."""
    strip = {k.removeprefix("module."): v for k, v in actual.items()}
    want = {k.removeprefix("module."): v for k, v in expected.items()}
    assert strip.keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(strip[key], value), f"{key} differs"


def assert_same_state(actual: object, expected: object, where: str = "state") -> None:
    """Deep equality of nested state (dicts, lists, tensors bitwise, numbers with NaN == NaN)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), where
        assert torch.equal(actual, expected), f"{where} differs"
    elif isinstance(expected, Mapping):
        assert isinstance(actual, Mapping), where
        assert set(actual) == set(expected), f"{where}: keys {set(actual)} != {set(expected)}"
        for key in expected:
            assert_same_state(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, list | tuple):
        assert isinstance(actual, list | tuple), where
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same_state(a, e, f"{where}[{i}]")
    elif isinstance(expected, float) and math.isnan(expected):
        assert isinstance(actual, float), where
        assert math.isnan(actual), where
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def _make_data(n: int, seed: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    features = torch.randn(n, 4, generator=gen)
    targets = features.sum(dim=1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=gen)
    return TensorDataset(features, targets)


class ScriptedTrainer(BaseTrainer):
    """A trainer whose validation scores come from a script.

    An epoch ends with an optimizer step on its last batch even when the batch count is not a
    multiple of ``grad_accum_steps`` (``steps_on_last_batch = False`` turns that off, as in a
    trainer that steps on accumulation boundaries only).

    Args:
        cfg: the run's config (see :func:`make_config`).
        scores: the score of the validation after epoch ``e`` is ``scores[e]``.
        first_score: the score of ``val.first``.
        crash_at: ``("train", e)`` raises :class:`Crash` as epoch ``e`` starts training,
            ``("val", e)`` as its validation starts, ``("test", _)`` as the test pass starts.
        on_train_epoch: called as each epoch starts training (send a signal, inspect files).
        optimizer: the optimizer class to build (a finetune may change it).
        param_groups: 1, or 2 (weights and biases apart).
        extra_items: more stateful items, registered for checkpointing before the model.
    """

    steps_on_last_batch = True

    def __init__(self, cfg: TrainConfig | Mapping[str, Any], *, scores: Sequence[float] = (),
                 first_score: float = math.nan, rank: int = 0, world_size: int = 1,
                 crash_at: tuple[Literal["train", "val", "test"], int] | None = None,
                 on_train_epoch: Callable[[ScriptedTrainer], None] | None = None,
                 optimizer: Literal["adamw", "sgd"] = "adamw", param_groups: Literal[1, 2] = 1,
                 extra_items: Mapping[str, Stateful] | None = None) -> None:
        self.scores = list(scores)
        self.first_score = first_score
        self.crash_at = crash_at
        self.on_train_epoch = on_train_epoch
        self.optimizer_kind = optimizer
        self.param_groups = param_groups
        self.extra_items = dict(extra_items or {})
        self.events: list[str] = []
        self.validations: list[Validation] = []
        self.weights_after: dict[int, Weights] = {}
        self.steps_after: dict[int, int] = {}
        self.test_weights: Weights | None = None
        self.best_pt_seen: list[BestFile | None] = []  # best.pt after each validation
        super().__init__(cfg, rank, world_size)

    # ------------------------------------------------------------------ BaseTrainer hooks

    def setup(self, ckpt: dict[str, Any] | None) -> None:
        self.setup_ckpt = ckpt
        train = _make_data(NUM_TRAIN, seed=1)
        self.train_sampler: DistributedSampler[Any] | None = None
        if self.is_distributed:
            self.train_sampler = DistributedSampler(train, num_replicas=self.world_size,
                                                    rank=self.rank, shuffle=True, seed=0)
        self.train_loader = DataLoader(train, batch_size=BATCH_SIZE,
                                       shuffle=self.train_sampler is None,
                                       sampler=self.train_sampler)
        self.val_loader = DataLoader(_make_data(8, seed=2), batch_size=BATCH_SIZE)
        self.test_loader = DataLoader(_make_data(8, seed=3), batch_size=BATCH_SIZE)
        self.len_train_loader_in_setup = len(self.train_loader)

        net = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.25), nn.Tanh(), nn.Linear(8, 1))
        if ckpt is not None:
            net.load_state_dict(ckpt["model_state_dict"])
        self.model = self.make_ddp(net)
        params = list(self.model.named_parameters())
        groups: list[dict[str, Any]] = [{"params": [p for _, p in params]}]
        if self.param_groups == 2:
            groups = [{"params": [p for n, p in params if n.endswith("weight")]},
                      {"params": [p for n, p in params if n.endswith("bias")]}]
        self.optimizer: torch.optim.Optimizer
        if self.optimizer_kind == "adamw":
            self.optimizer = torch.optim.AdamW(groups, lr=0.01,
                                               weight_decay=self.cfg.weight_decay)
        else:
            self.optimizer = torch.optim.SGD(groups, lr=0.01, momentum=0.9)
        # sized from the loader's length, as a real trainer's schedule would be (DBG-5)
        total_steps = len(self.train_loader) * max(1, self.cfg.num_epochs)
        self.scheduler = torch.optim.lr_scheduler.LinearLR(
            self.optimizer, start_factor=1.0, end_factor=0.1, total_iters=total_steps)
        self.add_checkpoint_items(**self.extra_items)
        self.add_checkpoint_items(model=self.model, optimizer=self.optimizer,
                                  scheduler=self.scheduler)
        self.initial_weights = snapshot(self.model)

    def train_epoch(self) -> None:
        self.events.append(f"train {self.epoch}")
        if self.on_train_epoch is not None:
            self.on_train_epoch(self)
        if self.crash_at == ("train", self.epoch):
            raise Crash(f"crash as epoch {self.epoch} starts")
        if self.train_sampler is not None:
            self.train_sampler.set_epoch(self.epoch)
        self.model.train()
        accum = self.cfg.grad_accum_steps
        num_batches = len(self.train_loader)
        self.optimizer.zero_grad()
        for i, (features, targets) in enumerate(self.train_loader):
            # every global generator feeds the loss: an exact resume must restore them all
            jitter = 1.0 + 1e-3 * random.random() + 1e-3 * float(np.random.rand())
            noisy = features + 0.01 * torch.randn_like(features)
            loss = nn.functional.mse_loss(self.model(noisy), targets) * jitter
            (loss / accum).backward()  # type: ignore[no-untyped-call]
            is_last = self.steps_on_last_batch and i + 1 == num_batches
            if (i + 1) % accum == 0 or is_last:
                self.clip_and_log_grad_norm()
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad()
                self.train_step += 1
        self.weights_after[self.epoch] = snapshot(self.model)
        self.steps_after[self.epoch] = self.train_step

    def val_epoch(self) -> bool:
        epoch = self.trained_epochs[-1] if self.trained_epochs else -1
        if self.crash_at == ("val", epoch):
            raise Crash(f"crash as the validation of epoch {epoch} starts")
        self.events.append(f"val {epoch}")
        score = self.score(epoch)
        self.log("val/score", score)
        improved = self.save_if_best(score)
        stop = self.step_patience(improved)
        self.validations.append(Validation(epoch=epoch, score=score, improved=improved,
                                           stop=stop, patience_left=self.patience_left))
        self.best_pt_seen.append(self._best_pt())
        return stop

    def test(self) -> None:
        if self.crash_at is not None and self.crash_at[0] == "test":
            raise Crash("crash as the test pass starts")
        self.events.append("test")
        self.log("test/passes", 1.0)
        if self.best_model is not None:
            self.unwrapped(self.model).load_state_dict(self.best_model)
        self.test_weights = snapshot(self.model)

    # ------------------------------------------------------------------ for the tests

    def score(self, epoch: int) -> float:
        """The scripted score of the validation after ``epoch``."""
        if epoch == -1:
            return self.first_score
        if epoch >= len(self.scores):
            raise IndexError(f"no scripted score for the validation after epoch {epoch}")
        return self.scores[epoch]

    @property
    def trained_epochs(self) -> list[int]:
        return [int(e.split()[1]) for e in self.events if e.startswith("train")]

    @property
    def validated_epochs(self) -> list[int]:
        return [v.epoch for v in self.validations]

    @property
    def improved_epochs(self) -> list[int]:
        return [v.epoch for v in self.validations if v.improved]

    def final_weights(self) -> Weights:
        return snapshot(self.model)

    def checkpoint_files(self) -> list[str]:
        if self.ckpt_dir is None or not self.ckpt_dir.exists():
            return []
        return sorted(p.name for p in self.ckpt_dir.iterdir() if p.suffix == ".pt")

    def _best_pt(self) -> BestFile | None:
        path = None if self.ckpt_dir is None else self.ckpt_dir / "best.pt"
        if path is None or not path.exists():
            return None
        stat = path.stat()
        return BestFile(stamp=(stat.st_ino, stat.st_mtime_ns), ckpt=load_checkpoint(path))


class PooledTrainer(ScriptedTrainer):
    """Scores a pooled metric: the mean of per-sample values over the whole validation split.

    ``sample_values[e]`` holds the values of every sample of the split after epoch ``e``; rank
    ``r`` of ``n`` holds the samples ``shards[n][r]`` (unequal shards: pooling matters).
    """

    def __init__(self, cfg: TrainConfig | Mapping[str, Any], *,
                 sample_values: Sequence[Sequence[float]],
                 shards: Mapping[int, Sequence[Sequence[int]]], rank: int = 0,
                 world_size: int = 1, **kwargs: Any) -> None:
        self.sample_values = [list(v) for v in sample_values]
        self.my_samples = list(shards[world_size][rank])
        super().__init__(cfg, rank=rank, world_size=world_size, **kwargs)

    def score(self, epoch: int) -> float:
        values = self.sample_values[epoch]
        mine = [values[i] for i in self.my_samples]
        return self.reduce_mean(sum(mine), len(mine))


def files_under(root: Path) -> Iterator[Path]:
    """Every file below ``root`` (none when it does not exist)."""
    return (p for p in root.rglob("*") if p.is_file())
