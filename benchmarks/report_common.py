"""Markdown helpers shared by the report's sections."""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.stats import Spread

__all__ = ["SECTIONS", "met", "ms", "seconds", "table", "x"]

# section numbers, fixed whichever benchmarks ran, so sections can point at each other
SECTIONS = {"suite": 1, "profile": 2, "world": 3, "matrix": 4, "trainer": 5, "checkpoint": 6,
            "team": 7, "audit": 8}


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows), ""]


def met(is_met: bool) -> str:
    return "**yes**" if is_met else "**no**"


def ms(spread: Spread, digits: int = 2) -> str:
    return spread.scaled(1000).fmt(digits, " ms")


def x(spread: Spread, digits: int = 2) -> str:
    """``1.23 [1.10, 1.40]x``, or ``1.23x (1 run)``."""
    if spread.count == 1:
        return f"{spread.median:.{digits}f}x (1 run)"
    return f"{spread.fmt(digits)}x"


def seconds(value: float) -> str:
    """``12.34 s``, or ``1.23 ms`` below a tenth of a second."""
    return f"{value * 1e3:.2f} ms" if abs(value) < 0.1 else f"{value:.2f} s"
