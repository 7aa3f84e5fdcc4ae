"""The oracle: the spec's decisions as pure functions of a score sequence and the config.

Given the validations a run makes (their epochs and scores), it says which improve, where the
patience counter stands after each, when the run stops, and which validation holds the best
weights. Checks compare what a trainer did against it; the property checks (PAT-5) do so for
generated sequences of finite, tied, NaN and infinite scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Decision", "Outcome", "decide", "expected_validations", "is_improvement"]


def is_improvement(score: float, best: float, *, minimize: bool) -> bool:
    """Finite and strictly better than the incumbent (BEST-1, NAN-1)."""
    if not math.isfinite(score):
        return False
    return score < best if minimize else score > best


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """The spec's verdict on one validation."""

    epoch: int | None  # None: the val.first validation
    score: float
    improved: bool
    patience_left: int | None  # after this validation; None when patience is unset
    stop: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    decisions: tuple[Decision, ...]
    stop_epoch: int | None  # the epoch after whose validation the run stops; -1: at val.first
    best_index: int | None  # index into decisions of the validation holding the best weights
    epochs_trained: tuple[int, ...]

    @property
    def best_epoch(self) -> int | None:
        """The epoch whose weights are best; -1 for the val.first weights; None if none."""
        if self.best_index is None:
            return None
        epoch = self.decisions[self.best_index].epoch
        return -1 if epoch is None else epoch


def expected_validations(*, num_epochs: int, every_n_epochs: int, first: bool,
                         start: int = 0) -> list[int | None]:
    """The validations of an uninterrupted run, in order (LOOP-2): None stands for val.first."""
    due: list[int | None] = [None] if first and start == 0 else []
    due += [e for e in range(start, num_epochs)
            if e % every_n_epochs == 0 or e == num_epochs - 1]
    return due


def decide(scores: Sequence[tuple[int | None, float]], *, minimize: bool,
           patience: int | None, start_patience: int, num_epochs: int) -> Outcome:
    """The decisions for validations ``(epoch, score)`` in the order they would run.

    Validation stops the run at the first decision with ``stop``; later entries are dropped.
    The val.first validation (epoch None) counts at epoch 0 for ``start_patience``.
    """
    best = math.inf if minimize else -math.inf
    left = patience
    decisions: list[Decision] = []
    best_index: int | None = None
    stop_epoch: int | None = None
    for epoch, score in scores:
        improved = is_improvement(score, best, minimize=minimize)
        if improved:
            best, best_index = score, len(decisions)
        if left is not None and patience is not None:
            if improved:
                left = patience
            elif (0 if epoch is None else epoch) >= start_patience:
                left -= 1
        stop = left is not None and left <= 0
        decisions.append(Decision(epoch=epoch, score=score, improved=improved,
                                  patience_left=left, stop=stop))
        if stop:
            stop_epoch = -1 if epoch is None else epoch
            break
    last = num_epochs - 1 if stop_epoch is None else stop_epoch
    return Outcome(decisions=tuple(decisions), stop_epoch=stop_epoch, best_index=best_index,
                   epochs_trained=tuple(range(0, last + 1)))
