"""Trainer overhead: the reference BaseTrainer against a hand-written loop doing the same work.

Both arms build the same MLP from the same seed, train it with AdamW on the same in-memory data
through the same DataLoader, validate once per epoch, and (checkpointing on) write a checkpoint
once per epoch: the bare loop with ``torch.save`` of model and optimizer, the reference as its
config says (``last.pt`` every epoch, ``best.pt`` on every improvement, both atomic and fsynced).
The subclass adds nothing the bare loop lacks, so the difference is the base class. Only the
loop is timed (``train()`` against the bare epochs), not model construction in either arm.

Anchors (:mod:`benchmarks.anchors`): the same workload through Lightning's and HF's Trainer,
where installed, interleaved with the two arms above, so that "the reference adds little" is
measured against what a user would pick instead.

    python -m benchmarks.bench_trainer [--quick]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from benchmarks import anchors
from benchmarks.stats import Spread, interleaved, paired_ratios
from benchmarks.workload import (
    SEED,
    SIZES,
    Clock,
    ModelSize,
    Timing,
    make_model,
    make_optimizer,
    splits,
    train_epoch,
    val_loss,
)
from trainspec.reference.checkpoint import save_checkpoint
from trainspec.reference.config import CkptConfig, TestConfig, TrainConfig, ValConfig
from trainspec.reference.trainer import BaseTrainer

__all__ = ["SIZES", "THREADS", "AnchorCost", "ModelSize", "Overhead", "TrainerCost", "measure",
           "run"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AnchorCost:
    """One arm (the reference, or a framework's Trainer) against the bare loop."""

    step_s: Spread  # the arm's loop time per optimizer step, its start-up included
    ratio: Spread  # the arm / the bare loop, wall clock, paired per repeat
    startup_s: Spread  # from the clock's start to the first optimizer step
    steady_ratio: Spread  # the same ratio with the arm's start-up left out


@dataclass(frozen=True, slots=True, kw_only=True)
class Overhead:
    size: ModelSize
    is_ckpt_on: bool
    bare_step_s: Spread  # the bare loop's time per optimizer step
    reference_step_s: Spread
    ratio: Spread  # reference / bare, wall clock, paired per repeat
    cpu_ratio: Spread  # the same in process CPU time: blind to waits and to other processes
    extra_per_epoch_s: Spread  # (reference - bare) / epochs, wall clock, paired per repeat
    # checkpointing on: the reference writing without fsync (the durability trade-off)
    no_fsync_ratio: Spread | None
    no_fsync_extra_per_epoch_s: Spread | None
    # the reference and each framework anchor that ran, side by side (name -> cost)
    arms: dict[str, AnchorCost]

    @property
    def break_even_steps_per_epoch(self) -> float:
        """Steps per epoch from which the per-epoch extra stays within 3% of the bare loop."""
        return max(0.0, self.extra_per_epoch_s.median) / (0.03 * self.bare_step_s.median)


def bare_loop(size: ModelSize, ckpt_dir: Path | None) -> Timing:
    """The hand-written loop; returns the time its epochs took."""
    train, val = splits(size)
    torch.manual_seed(SEED)
    model = make_model(size)
    optimizer = make_optimizer(model)
    train_loader = DataLoader(train, batch_size=size.batch_size, shuffle=True)
    val_loader = DataLoader(val, batch_size=size.batch_size)
    with Clock() as clock:
        for epoch in range(size.epochs):
            train_epoch(model, optimizer, train_loader)
            val_loss(model, val_loader)
            if ckpt_dir is not None:
                torch.save({"epoch": epoch, "model": model.state_dict(),
                            "optimizer": optimizer.state_dict()}, ckpt_dir / "last.pt")
    return clock.timing


class BenchTrainer(BaseTrainer):
    """The bare loop's model, data and epoch, on the reference base."""

    def __init__(self, cfg: TrainConfig, size: ModelSize) -> None:
        self.size = size  # before the base's __init__, which calls setup()
        self.clock: Clock | None = None  # told when the first epoch starts
        super().__init__(cfg)

    def setup(self, ckpt: dict[str, Any] | None) -> None:
        train, val = splits(self.size)
        torch.manual_seed(SEED)
        self.model = make_model(self.size)
        self.optimizer = make_optimizer(self.model)
        self.train_loader = DataLoader(train, batch_size=self.size.batch_size, shuffle=True)
        self.val_loader = DataLoader(val, batch_size=self.size.batch_size)
        self.add_checkpoint_items(model=self.model, optimizer=self.optimizer)

    def train_epoch(self) -> None:
        if self.clock is not None:
            self.clock.first_step()
        self.train_step += train_epoch(self.model, self.optimizer, self.train_loader)

    def val_epoch(self) -> bool:
        return self.step_patience(self.save_if_best(val_loss(self.model, self.val_loader)))


class NoFsyncBenchTrainer(BenchTrainer):
    """The trade-off arm: atomic against a crash of the process, not of the machine."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        save_checkpoint(path, state, fsync=False)


def make_reference(size: ModelSize, ckpt_dir: Path | None, *,
                   is_fsync: bool = True) -> BenchTrainer:
    cfg = TrainConfig(
        seed=SEED, num_epochs=size.epochs,
        val=ValConfig(minimize=True), test=TestConfig(enable=False),
        ckpt=CkptConfig(enable=ckpt_dir is not None, dir=str(ckpt_dir or "unused")),
    )
    return (BenchTrainer if is_fsync else NoFsyncBenchTrainer)(cfg, size)


def reference_loop(size: ModelSize, ckpt_dir: Path | None, *,
                   is_fsync: bool = True) -> Timing:
    """The reference trainer; returns the time ``train()`` took."""
    trainer = make_reference(size, ckpt_dir, is_fsync=is_fsync)
    trainer.clock = Clock()
    with trainer.clock:
        trainer.train()
    return trainer.clock.timing


def measure(size: ModelSize, *, is_ckpt_on: bool, repeats: int, folder: Path,
            anchor_names: tuple[str, ...] = ()) -> Overhead:
    """The bare loop, the reference (and without fsync, checkpoints on) and each anchor,
    interleaved after one warm-up run each."""

    def ckpt(arm: str) -> Path | None:
        if not is_ckpt_on:
            return None
        path = folder / arm.replace(" ", "-")
        path.mkdir(parents=True, exist_ok=True)
        return path

    scratch = folder / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    arms: dict[str, Callable[[], Timing]] = {
        "bare": functools.partial(bare_loop, size, ckpt("bare")),
        "reference": functools.partial(reference_loop, size, ckpt("reference"))}
    if is_ckpt_on:
        arms["no-fsync"] = functools.partial(reference_loop, size, ckpt("no-fsync"),
                                             is_fsync=False)
    for name in anchor_names:
        arms[name] = functools.partial(anchors.ANCHORS[name][1], size, ckpt(name), scratch)
    for arm in arms.values():  # warm-up: first-optimizer imports, allocator, page cache
        arm()
    timings = interleaved(arms, repeats)
    samples = {arm: [t.wall_s for t in ts] for arm, ts in timings.items()}
    bare, ref = samples["bare"], samples["reference"]
    no_fsync = samples.get("no-fsync")
    return Overhead(
        size=size, is_ckpt_on=is_ckpt_on,
        bare_step_s=Spread.of(bare).scaled(1 / size.steps),
        reference_step_s=Spread.of(ref).scaled(1 / size.steps),
        ratio=paired_ratios(ref, bare),
        cpu_ratio=paired_ratios([t.cpu_s for t in timings["reference"]],
                                [t.cpu_s for t in timings["bare"]]),
        extra_per_epoch_s=_extra_per_epoch(ref, bare, size.epochs),
        no_fsync_ratio=None if no_fsync is None else paired_ratios(no_fsync, bare),
        no_fsync_extra_per_epoch_s=(None if no_fsync is None
                                    else _extra_per_epoch(no_fsync, bare, size.epochs)),
        arms={name: _arm_cost(timings[name], bare, size)
              for name in ("reference", *anchor_names)},
    )


def _arm_cost(timings: list[Timing], bare: list[float], size: ModelSize) -> AnchorCost:
    wall = [t.wall_s for t in timings]
    return AnchorCost(step_s=Spread.of(wall).scaled(1 / size.steps),
                      ratio=paired_ratios(wall, bare),
                      startup_s=Spread.of([t.startup_s for t in timings]),
                      steady_ratio=paired_ratios([t.wall_s - t.startup_s for t in timings],
                                                 bare))


def _extra_per_epoch(arm: list[float], bare: list[float], epochs: int) -> Spread:
    return Spread.of([(a - b) / epochs for a, b in zip(arm, bare, strict=True)])


def profile_reference(size: ModelSize, folder: Path,
                      names: tuple[str, ...]) -> dict[str, float]:
    """Seconds per epoch inside each named function during one profiled reference run."""
    ckpt_dir = folder / "profiled"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    trainer = make_reference(size, ckpt_dir)
    profiler = cProfile.Profile()
    profiler.enable()
    trainer.train()
    profiler.disable()
    table: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    table = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    found = dict.fromkeys(names, 0.0)
    for (_file, _line, name), (_cc, _nc, _tottime, cumtime, _callers) in table.items():
        if name in found:
            found[name] = max(found[name], cumtime)  # one entry per function, not summed
    return {name: seconds / size.epochs for name, seconds in found.items()}


PROFILED = ("_write_epoch_checkpoints", "save_if_best", "_snapshot_weights", "_save",
            "save_checkpoint", "capture_rng", "train_epoch", "val_epoch")


THREADS = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainerCost:
    results: list[Overhead]
    profiles: dict[str, dict[str, float]]  # size -> function -> seconds per epoch
    anchors_left_out: dict[str, str]  # framework -> why it has no arm here


def run(*, quick: bool) -> TrainerCost:
    """Every size, checkpointing off and on; then one profiled reference run per size.

    Every arm runs on one intra-op thread: on 2 cores shared with other processes, a second
    OpenMP thread makes every op wait on a descheduled peer and the noise swamps a few percent.
    """
    left_out = {name: why for name in anchors.ANCHORS
                if (why := anchors.unavailable(name)) is not None}
    names = tuple(name for name in anchors.ANCHORS if name not in left_out)
    folder = Path(tempfile.mkdtemp(prefix="trainspec-bench-trainer-"))
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        results = [measure(size, is_ckpt_on=is_on, repeats=3 if quick else 15, folder=folder,
                           anchor_names=names)
                   for size in SIZES for is_on in (False, True)]
        profiles = {size.name: profile_reference(size, folder, PROFILED) for size in SIZES}
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(folder, ignore_errors=True)
    return TrainerCost(results=results, profiles=profiles, anchors_left_out=left_out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    cost = run(quick=args.quick)
    for r in cost.results:
        print(f"{r.size.name:16s} ckpt {'on ' if r.is_ckpt_on else 'off'}: "
              f"bare {r.bare_step_s.scaled(1e3).fmt(3, ' ms')}/step, "
              f"reference {r.reference_step_s.scaled(1e3).fmt(3, ' ms')}/step, "
              f"x{r.ratio.fmt(3)} (cpu x{r.cpu_ratio.fmt(3)}), "
              f"+{r.extra_per_epoch_s.scaled(1e3).fmt(2, ' ms')}/epoch, "
              f"break-even {r.break_even_steps_per_epoch:.0f} steps/epoch")
        if r.no_fsync_ratio is not None:
            print(f"{'':16s} reference without fsync: x{r.no_fsync_ratio.fmt(3)}")
        for name, arm in r.arms.items():
            print(f"{'':16s} {name}: {arm.step_s.scaled(1e3).fmt(3, ' ms')}/step, "
                  f"x{arm.ratio.fmt(3)}, start-up {arm.startup_s.scaled(1e3).fmt(1, ' ms')}, "
                  f"x{arm.steady_ratio.fmt(3)} without it")
    for name, parts in cost.profiles.items():
        print(name, {k: f"{v * 1e3:.2f} ms/epoch" for k, v in parts.items()})
    for name, why in cost.anchors_left_out.items():
        print(f"{name}: no arm ({why})")


if __name__ == "__main__":
    main()
