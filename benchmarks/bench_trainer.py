"""Trainer overhead: the reference BaseTrainer against a hand-written loop doing the same work.

Both arms build the same MLP from the same seed, train it with AdamW on the same in-memory data
through the same DataLoader, validate once per epoch, and (checkpointing on) write a checkpoint
once per epoch: the bare loop with ``torch.save`` of model and optimizer, the reference as its
config says (``last.pt`` every epoch, ``best.pt`` on every improvement, both atomic and fsynced).
The subclass adds nothing the bare loop lacks, so the difference is the base class. Only the
loop is timed (``train()`` against the bare epochs), not model construction in either arm.

    python -m benchmarks.bench_trainer [--quick]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import pstats
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (the conventional alias)
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.stats import Spread, interleaved, paired_ratios
from trainspec.reference.checkpoint import save_checkpoint
from trainspec.reference.config import CkptConfig, TestConfig, TrainConfig, ValConfig
from trainspec.reference.trainer import BaseTrainer

__all__ = ["FRAMEWORKS", "SIZES", "ModelSize", "Overhead", "frameworks_installed", "measure"]

SEED = 0


@dataclass(frozen=True, slots=True)
class Timing:
    """One arm's loop: wall-clock seconds, and this process's CPU seconds (not waits)."""

    wall_s: float
    cpu_s: float


class _Clock:
    def __enter__(self) -> _Clock:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timing = Timing(time.perf_counter() - self._wall, time.process_time() - self._cpu)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSize:
    name: str
    features: int
    hidden: int
    hidden_layers: int
    classes: int
    batch_size: int
    train_samples: int
    val_samples: int
    epochs: int

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.train_samples // self.batch_size)

    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.epochs


SIZES = (
    # the reference example's classifier: 16 -> 32 -> 4
    ModelSize(name="tiny MLP", features=16, hidden=32, hidden_layers=1, classes=4,
              batch_size=32, train_samples=4096, val_samples=1024, epochs=4),
    # sized so that one step (DataLoader batch, forward, backward, AdamW) takes about 1 ms on
    # one thread of this machine's CPU (AMD EPYC, 2 cores)
    ModelSize(name="~1 ms/step MLP", features=128, hidden=288, hidden_layers=2, classes=10,
              batch_size=64, train_samples=8192, val_samples=2048, epochs=3),
)

# frameworks whose trainers this benchmark would compare, by import name
FRAMEWORKS = {"Lightning": "lightning", "HF Trainer": "transformers"}


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

    @property
    def break_even_steps_per_epoch(self) -> float:
        """Steps per epoch from which the per-epoch extra stays within 3% of the bare loop."""
        return max(0.0, self.extra_per_epoch_s.median) / (0.03 * self.bare_step_s.median)


def _splits(size: ModelSize) -> tuple[TensorDataset, TensorDataset]:
    gen = torch.Generator().manual_seed(1234)
    centers = torch.randn(size.classes, size.features, generator=gen)
    out = []
    for n in (size.train_samples, size.val_samples):
        labels = torch.randint(0, size.classes, (n,), generator=gen)
        out.append(TensorDataset(centers[labels] + torch.randn(n, size.features, generator=gen),
                                 labels))
    return out[0], out[1]


def _model(size: ModelSize) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(size.features, size.hidden), nn.ReLU()]
    for _ in range(size.hidden_layers - 1):
        layers += [nn.Linear(size.hidden, size.hidden), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(size.hidden, size.classes))


def _train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer,
                 loader: DataLoader[Any]) -> int:
    """One epoch; both arms run exactly this. Returns the optimizer steps taken."""
    model.train()
    steps = 0
    for features, labels in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(features), labels)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        steps += 1
    return steps


def _val_loss(model: nn.Module, loader: DataLoader[Any]) -> float:
    model.eval()
    total, seen = 0.0, 0
    with torch.no_grad():
        for features, labels in loader:
            total += float(F.cross_entropy(model(features), labels, reduction="sum"))
            seen += len(labels)
    return total / seen


def bare_loop(size: ModelSize, ckpt_dir: Path | None) -> Timing:
    """The hand-written loop; returns the time its epochs took."""
    train, val = _splits(size)
    torch.manual_seed(SEED)
    model = _model(size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train_loader = DataLoader(train, batch_size=size.batch_size, shuffle=True)
    val_loader = DataLoader(val, batch_size=size.batch_size)
    with _Clock() as clock:
        for epoch in range(size.epochs):
            _train_epoch(model, optimizer, train_loader)
            _val_loss(model, val_loader)
            if ckpt_dir is not None:
                torch.save({"epoch": epoch, "model": model.state_dict(),
                            "optimizer": optimizer.state_dict()}, ckpt_dir / "last.pt")
    return clock.timing


class BenchTrainer(BaseTrainer):
    """The bare loop's model, data and epoch, on the reference base."""

    def __init__(self, cfg: TrainConfig, size: ModelSize) -> None:
        self.size = size  # before the base's __init__, which calls setup()
        super().__init__(cfg)

    def setup(self, ckpt: dict[str, Any] | None) -> None:
        train, val = _splits(self.size)
        torch.manual_seed(SEED)
        self.model = _model(self.size)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.train_loader = DataLoader(train, batch_size=self.size.batch_size, shuffle=True)
        self.val_loader = DataLoader(val, batch_size=self.size.batch_size)
        self.add_checkpoint_items(model=self.model, optimizer=self.optimizer)

    def train_epoch(self) -> None:
        self.train_step += _train_epoch(self.model, self.optimizer, self.train_loader)

    def val_epoch(self) -> bool:
        return self.step_patience(self.save_if_best(_val_loss(self.model, self.val_loader)))


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
    with _Clock() as clock:
        trainer.train()
    return clock.timing


def measure(size: ModelSize, *, is_ckpt_on: bool, repeats: int, folder: Path) -> Overhead:
    dirs = {arm: folder / arm if is_ckpt_on else None
            for arm in ("bare", "reference", "no-fsync")}
    for d in dirs.values():
        if d is not None:
            d.mkdir(parents=True, exist_ok=True)
    arms: dict[str, Callable[[], Timing]] = {
        "bare": lambda: bare_loop(size, dirs["bare"]),
        "reference": lambda: reference_loop(size, dirs["reference"])}
    if is_ckpt_on:
        arms["no-fsync"] = lambda: reference_loop(size, dirs["no-fsync"], is_fsync=False)
    for arm in arms.values():  # warm-up: first-optimizer imports, allocator, page cache
        arm()
    timings = interleaved(arms, repeats)
    samples = {arm: [t.wall_s for t in ts] for arm, ts in timings.items()}
    cpu = {arm: [t.cpu_s for t in ts] for arm, ts in timings.items()}
    bare, ref = samples["bare"], samples["reference"]
    no_fsync = samples.get("no-fsync")
    return Overhead(
        size=size, is_ckpt_on=is_ckpt_on,
        bare_step_s=Spread.of(bare).scaled(1 / size.steps),
        reference_step_s=Spread.of(ref).scaled(1 / size.steps),
        ratio=paired_ratios(ref, bare),
        cpu_ratio=paired_ratios(cpu["reference"], cpu["bare"]),
        extra_per_epoch_s=_extra_per_epoch(ref, bare, size.epochs),
        no_fsync_ratio=None if no_fsync is None else paired_ratios(no_fsync, bare),
        no_fsync_extra_per_epoch_s=(None if no_fsync is None
                                    else _extra_per_epoch(no_fsync, bare, size.epochs)),
    )


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


def frameworks_installed() -> dict[str, bool]:
    return {name: importlib.util.find_spec(module) is not None
            for name, module in FRAMEWORKS.items()}


THREADS = 1


def run(*, quick: bool) -> tuple[list[Overhead], dict[str, dict[str, float]]]:
    """Every size, checkpointing off and on; then one profiled reference run per size.

    Both arms run on one intra-op thread: on 2 cores shared with other processes, a second
    OpenMP thread makes every op wait on a descheduled peer and the noise swamps a few percent.
    """
    folder = Path(tempfile.mkdtemp(prefix="trainspec-bench-trainer-"))
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        results = [measure(size, is_ckpt_on=is_on, repeats=3 if quick else 15, folder=folder)
                   for size in SIZES for is_on in (False, True)]
        profiles = {size.name: profile_reference(size, folder, PROFILED) for size in SIZES}
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(folder, ignore_errors=True)
    return results, profiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    results, profiles = run(quick=args.quick)
    for r in results:
        print(f"{r.size.name:16s} ckpt {'on ' if r.is_ckpt_on else 'off'}: "
              f"bare {r.bare_step_s.scaled(1e3).fmt(3, ' ms')}/step, "
              f"reference {r.reference_step_s.scaled(1e3).fmt(3, ' ms')}/step, "
              f"x{r.ratio.fmt(3)} (cpu x{r.cpu_ratio.fmt(3)}), "
              f"+{r.extra_per_epoch_s.scaled(1e3).fmt(2, ' ms')}/epoch, "
              f"break-even {r.break_even_steps_per_epoch:.0f} steps/epoch")
        if r.no_fsync_ratio is not None:
            print(f"{'':16s} reference without fsync: x{r.no_fsync_ratio.fmt(3)}")
    for name, parts in profiles.items():
        print(name, {k: f"{v * 1e3:.2f} ms/epoch" for k, v in parts.items()})
    print(frameworks_installed())


if __name__ == "__main__":
    main()
