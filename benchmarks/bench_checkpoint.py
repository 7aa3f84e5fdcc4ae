"""Checkpoint cost: the reference's atomic save and weights-only load against raw torch calls.

The reference's ``save_checkpoint`` writes a temporary file, fsyncs it, renames it over the
destination and fsyncs the folder (CKPT-2); the baseline is ``torch.save`` straight onto the
path. Two more save arms split the difference: raw ``torch.save`` plus an fsync of the file,
and the reference with ``fsync=False``. Every arm writes into one temporary folder (same disk),
overwriting its own file each repeat as a trainer overwrites ``last.pt``. A cProfile pass over
the reference's save says where its time goes.

    python -m benchmarks.bench_checkpoint [--quick]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.stats import Spread, interleaved, paired_ratios, time_call
from trainspec.reference.checkpoint import load_checkpoint, save_checkpoint

__all__ = ["CheckpointCost", "SaveProfile", "measure", "profile_save"]

SAVE_ARMS = ("torch.save", "torch.save + fsync", "reference, fsync=False", "reference")
LOAD_ARMS = ("torch.load", "reference")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointCost:
    size_mib: int
    file_bytes: int
    save_s: dict[str, Spread]  # per arm of SAVE_ARMS
    save_ratio: dict[str, Spread]  # per arm, paired against torch.save
    load_s: dict[str, Spread]
    load_ratio: Spread  # load_checkpoint against torch.load(weights_only=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class SaveProfile:
    """Shares of ``save_checkpoint``'s time under cProfile, per call in milliseconds."""

    size_mib: int
    calls: int
    total_ms: float
    parts_ms: dict[str, float]


def make_state(size_mib: int) -> dict[str, object]:
    """A checkpoint-shaped dict whose tensors hold ``size_mib`` MiB of random float32."""
    gen = torch.Generator().manual_seed(0)
    per_tensor = max(1, size_mib // 10) * 2**20 // 4
    total = size_mib * 2**20 // 4
    weights: dict[str, torch.Tensor] = {}
    i = 0
    while total > 0:
        n = min(per_tensor, total)
        weights[f"layer{i}.weight"] = torch.randn(n, generator=gen)
        total -= n
        i += 1
    return {"format": "bench/1", "epoch": 3, "train_step": 120, "model_state_dict": weights}


def _raw_fsync_save(state: dict[str, object], path: Path) -> None:
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


def measure(size_mib: int, *, repeats: int, folder: Path) -> CheckpointCost:
    state = make_state(size_mib)
    paths = {arm: folder / f"save-{i}.pt" for i, arm in enumerate(SAVE_ARMS)}
    saves: dict[str, Callable[[], object]] = {
        "torch.save": lambda: torch.save(state, paths["torch.save"]),
        "torch.save + fsync": lambda: _raw_fsync_save(state, paths["torch.save + fsync"]),
        "reference, fsync=False": lambda: save_checkpoint(
            paths["reference, fsync=False"], state, fsync=False),
        "reference": lambda: save_checkpoint(paths["reference"], state),
    }
    for fn in saves.values():  # warm-up: first-call imports, file creation
        fn()
    save = interleaved({arm: _timed(fn) for arm, fn in saves.items()}, repeats)
    # both loads read one file, already in the page cache: only the code path differs
    source = paths["reference"]
    loads: dict[str, Callable[[], object]] = {
        "torch.load": lambda: torch.load(source, weights_only=True),
        "reference": lambda: load_checkpoint(source),
    }
    for fn in loads.values():
        fn()
    load = interleaved({arm: _timed(fn) for arm, fn in loads.items()}, repeats)
    return CheckpointCost(
        size_mib=size_mib,
        file_bytes=source.stat().st_size,
        save_s={arm: Spread.of(v) for arm, v in save.items()},
        save_ratio={arm: paired_ratios(v, save["torch.save"]) for arm, v in save.items()},
        load_s={arm: Spread.of(v) for arm, v in load.items()},
        load_ratio=paired_ratios(load["reference"], load["torch.load"]),
    )


def _timed(fn: Callable[[], object]) -> Callable[[], float]:
    """Time ``fn``, then flush dirty pages untimed.

    A raw ``torch.save`` returns with its data still in the page cache; without the flush the
    kernel writes it back during the next arm's timing and bills that arm for it.
    """

    def timed() -> float:
        seconds = time_call(fn)
        os.sync()
        return seconds

    return timed


# where save_checkpoint's time goes: cProfile entries (by function name) grouped into parts
_PARTS = {
    "fsync (file + folder)": ("<built-in method posix.fsync>",),
    "os.replace (rename over the old file)": ("<built-in method posix.replace>",),
    "open the temporary file": ("<built-in method io.open>",),
}


def profile_save(size_mib: int, *, calls: int, folder: Path) -> SaveProfile:
    state = make_state(size_mib)
    path = folder / "profiled.pt"
    save_checkpoint(path, state)
    os.sync()  # start with no writeback pending from earlier benchmarks
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        save_checkpoint(path, state)
    profiler.disable()
    stats = pstats.Stats(profiler)
    by_name: dict[str, float] = {}
    total = 0.0
    # pstats' per-function table: (file, line, name) -> (calls, prims, tottime, cumtime, ...)
    table: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    table = stats.stats  # type: ignore[attr-defined]
    for (file, _line, name), (_cc, _nc, tottime, cumtime, _callers) in table.items():
        by_name[name] = by_name.get(name, 0.0) + tottime
        if name == "save_checkpoint" and file.endswith("checkpoint.py"):
            total = cumtime
    parts = {part: sum(by_name.get(n, 0.0) for n in names) for part, names in _PARTS.items()}
    parts["torch.save (serialize + write)"] = sum(
        cumtime for (file, _l, name), (_c, _n, _t, cumtime, _x) in table.items()
        if name == "save" and file.endswith("serialization.py"))
    parts["everything else"] = max(0.0, total - sum(parts.values()))
    return SaveProfile(size_mib=size_mib, calls=calls, total_ms=total / calls * 1000,
                       parts_ms={k: v / calls * 1000 for k, v in parts.items()})


def run(*, quick: bool) -> tuple[list[CheckpointCost], SaveProfile]:
    folder = Path(tempfile.mkdtemp(prefix="trainspec-bench-ckpt-"))
    try:
        profile = profile_save(1, calls=50 if quick else 200, folder=folder)
        costs = [measure(1, repeats=10 if quick else 40, folder=folder),
                 measure(100, repeats=3 if quick else 15, folder=folder)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return costs, profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    costs, profile = run(quick=args.quick)
    for cost in costs:
        print(f"{cost.size_mib} MiB ({cost.file_bytes} bytes on disk)")
        for arm in SAVE_ARMS:
            print(f"  save {arm:24s} {cost.save_s[arm].scaled(1000).fmt(2, ' ms')}  "
                  f"x{cost.save_ratio[arm].fmt(2)}")
        for arm in LOAD_ARMS:
            print(f"  load {arm:24s} {cost.load_s[arm].scaled(1000).fmt(2, ' ms')}")
        print(f"  load ratio x{cost.load_ratio.fmt(2)}")
    print(f"profile of save_checkpoint at {profile.size_mib} MiB: {profile.total_ms:.2f} ms/call")
    for part, ms in profile.parts_ms.items():
        print(f"  {part:40s} {ms:.3f} ms")


if __name__ == "__main__":
    main()
