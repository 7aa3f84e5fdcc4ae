"""A training loop as many teams write one: one function, no framework, no base class.

It is the trainer that the guide "Check your trainer in five minutes" checks. It has early
stopping and best-model selection, and nothing else: no checkpoint files, no resume, one process.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional

Weights = dict[str, torch.Tensor]
Log = Callable[..., None]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopConfig:
    num_epochs: int
    val_every_n_epochs: int = 1
    val_first: bool = False  # validate once before training (the baseline to beat)
    minimize: bool = False
    patience: int | None = None  # None: never stop early
    start_patience: int = 0  # non-improvements before this epoch are not counted
    test: bool = True


def _silent(event: str, **info: Any) -> None:
    return None


def fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
        train_batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
        evaluate: Callable[[torch.nn.Module], float], cfg: LoopConfig, *,
        test: Callable[[torch.nn.Module], None] | None = None, log: Log = _silent
        ) -> Weights | None:
    """Train, validate, stop early; test on the best weights. Returns the best weights."""
    best_score = math.inf if cfg.minimize else -math.inf
    best: Weights | None = None
    patience_left = cfg.patience
    step = 0

    def validate(epoch: int, phase: str) -> bool:
        nonlocal best_score, best, patience_left
        score = evaluate(model)
        # NaN compares False with everything and -inf beats every score when minimizing:
        # only a finite, strictly better score is an improvement
        better = score < best_score if cfg.minimize else score > best_score
        improved = math.isfinite(score) and better
        if improved:
            best_score = score
            best = copy.deepcopy(model.state_dict())  # a copy: training goes on in place
        if patience_left is not None:
            if improved:
                patience_left = cfg.patience
            elif epoch >= cfg.start_patience:
                patience_left -= 1
        should_stop = patience_left is not None and patience_left <= 0
        log("val", epoch=epoch, phase=phase, score=score, improved=improved, stop=should_stop)
        return should_stop

    should_stop = cfg.val_first and validate(0, "first")
    epoch = 0
    while not should_stop and epoch < cfg.num_epochs:
        log("train_start", epoch=epoch, step=step)
        model.train()
        batches = 0
        for x, y in train_batches:
            optimizer.zero_grad()
            functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            step += 1
            batches += 1
        log("train_end", epoch=epoch, step=step, batches=batches)
        # the final epoch is always validated: it may hold the best model
        if epoch % cfg.val_every_n_epochs == 0 or epoch == cfg.num_epochs - 1:
            should_stop = validate(epoch, "epoch")
        epoch += 1
    log("end", epoch=epoch, step=step)
    if best is not None:  # test what best-model selection kept, not the last epoch
        model.load_state_dict(best)
    if cfg.test and test is not None:
        test(model)
    return best
