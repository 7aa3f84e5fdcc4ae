"""Read ``python -X importtime`` output: what a process imported and what each import cost.

Each line is ``import time: SELF | CUMULATIVE | NAME``, in microseconds, NAME indented two
spaces per level of nesting; an entry comes after the imports it triggered. A root entry
(level 0) is an import the process itself made, its cumulative time everything it pulled in.
Other lines (a program's own output on the same stream) are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ImportEntry", "ImportProfile", "parse", "profile"]

_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|( +)(\S+)\s*$")


@dataclass(frozen=True, slots=True)
class ImportEntry:
    module: str
    self_s: float
    cumulative_s: float
    level: int  # 0: imported by the process itself; n: nested n imports deep


def parse(lines: Iterable[str]) -> list[ImportEntry]:
    """Every import entry of the output, in its order; the header and other lines skipped."""
    entries = []
    for line in lines:
        match = _LINE.match(line.rstrip("\n"))
        if match is None:
            continue
        self_us, cumulative_us, indent, module = match.groups()
        entries.append(ImportEntry(module=module, self_s=int(self_us) / 1e6,
                                   cumulative_s=int(cumulative_us) / 1e6,
                                   level=(len(indent) - 1) // 2))
    return entries


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportProfile:
    """One process's imports, summed."""

    total_s: float  # every import's own time (the sum of the roots' cumulative times)
    modules: int  # modules imported
    roots: list[tuple[str, float]]  # the process's own imports by cumulative time, largest first
    packages: list[tuple[str, float]]  # top-level package -> its modules' own time, largest first
    imported: frozenset[str]  # every module name

    def has(self, package: str) -> bool:
        """Whether ``package`` (or any module under it) was imported."""
        return any(m == package or m.startswith(package + ".") for m in self.imported)


def profile(entries: Iterable[ImportEntry], *, top: int = 8) -> ImportProfile:
    listed = list(entries)
    packages: dict[str, float] = {}
    for e in listed:
        head = e.module.split(".")[0]
        packages[head] = packages.get(head, 0.0) + e.self_s
    roots = sorted(((e.module, e.cumulative_s) for e in listed if e.level == 0),
                   key=lambda pair: pair[1], reverse=True)
    return ImportProfile(
        total_s=sum(e.self_s for e in listed), modules=len(listed), roots=roots[:top],
        packages=sorted(packages.items(), key=lambda pair: pair[1], reverse=True)[:top],
        imported=frozenset(e.module for e in listed))
