"""Medians with their spread, paired ratios, and the interleaving every benchmark uses."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Spread", "interleaved", "paired_ratios", "time_call"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Spread:
    """The median of some samples with their min and max (and the sample count)."""

    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        if not samples:
            raise ValueError("Spread.of: no samples; run at least one repeat")
        return cls(median=statistics.median(samples), low=min(samples), high=max(samples),
                   count=len(samples))

    def scaled(self, factor: float) -> Spread:
        return Spread(median=self.median * factor, low=self.low * factor,
                      high=self.high * factor, count=self.count)

    def fmt(self, digits: int = 2, unit: str = "") -> str:
        """``1.23 [1.10, 1.40]``: the median, then [min, max]."""
        if self.count == 1:
            return f"{self.median:.{digits}f}{unit} (1 run)"
        return (f"{self.median:.{digits}f}{unit} "
                f"[{self.low:.{digits}f}, {self.high:.{digits}f}]")


def paired_ratios(arm: Sequence[float], baseline: Sequence[float]) -> Spread:
    """Ratio of each arm sample to the baseline sample taken next to it in time.

    Pairing cancels slow drift in machine load that a ratio of two medians would keep.
    """
    if len(arm) != len(baseline):
        raise ValueError(f"paired_ratios: {len(arm)} arm samples vs {len(baseline)} baseline")
    return Spread.of([a / b for a, b in zip(arm, baseline, strict=True)])


def time_call(fn: Callable[[], object]) -> float:
    """Seconds ``fn()`` took; what it returns is freed after the clock stops, not on it."""
    began = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - began
    del result
    return elapsed


def interleaved(arms: Mapping[str, Callable[[], T]], repeats: int) -> dict[str, list[T]]:
    """Run each arm once per repeat, rotating the order (A B C, B C A, ...).

    Each arm returns what it measured itself (seconds), so set-up kept out of the timing stays
    out. Rotating means no arm always runs right after the same neighbour (warm caches, dirty
    pages left by a write).
    """
    names = list(arms)
    samples: dict[str, list[T]] = {name: [] for name in names}
    for i in range(repeats):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(arms[name]())
    return samples
