"""How many lanes ``-n auto`` runs on this machine: its cores, bounded by its memory."""

from __future__ import annotations

import os

# what one lane holds at its peak: its rank-0 worker (torch imported, warm), the other ranks of
# a multi-rank world and the runs forked from them; measured on the reference at world size 2
LANE_MEMORY_BYTES = 1_500_000_000


def auto_workers() -> int:
    """The lanes ``-n auto`` runs: one per core this process may use, bounded by memory.

    The memory bound is the memory available now (``MemAvailable``; none where it cannot be
    read) over :data:`LANE_MEMORY_BYTES`, so a machine that is short of memory runs fewer
    lanes instead of swapping; never fewer than one.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lanes = max(1, cores or 1)
    available = _available_memory_bytes()
    if available is not None:
        lanes = min(lanes, max(1, available // LANE_MEMORY_BYTES))
    return lanes


def _available_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
