"""Audit mode's overhead: the reference's benchmark trainer with and without ``audited``.

Both arms are :class:`benchmarks.bench_trainer.BenchTrainer` (the bare loop's model, data and
epoch on the reference base, checkpoints on), built from the same seed; the audited arm is
``trainspec.kit.audited(BenchTrainer)``, which also writes the run's audit log. The arms run
interleaved in one process, and the ratio is paired per repeat: time per optimizer step,
audited over plain. The bound (issue 26): at most 1.01x.

    python -m benchmarks.bench_audit [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.bench_trainer import BenchTrainer
from benchmarks.stats import Spread, interleaved, paired_ratios
from benchmarks.workload import SEED, SIZES, Clock, ModelSize
from trainspec.kit import audited
from trainspec.reference.config import CkptConfig, TestConfig, TrainConfig, ValConfig

__all__ = ["AuditOverhead", "measure"]

BOUND = 1.01


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditOverhead:
    size: ModelSize
    plain_step_s: Spread
    audited_step_s: Spread
    ratio: Spread  # audited / plain, per step, paired per repeat


def _loop(size: ModelSize, folder: Path, *, is_audited: bool) -> float:
    cfg = TrainConfig(seed=SEED, num_epochs=size.epochs, val=ValConfig(minimize=True),
                      test=TestConfig(enable=False), ckpt=CkptConfig(dir=str(folder)))
    cls = audited(BenchTrainer) if is_audited else BenchTrainer
    trainer = cls(cfg, size)
    with Clock() as clock:
        trainer.train()
    shutil.rmtree(folder, ignore_errors=True)
    return clock.timing.wall_s / max(1, trainer.train_step)


def measure(size: ModelSize, *, repeats: int) -> AuditOverhead:
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="trainspec-bench-audit-"))
    try:
        samples = interleaved({
            "plain": lambda: _loop(size, root / "plain", is_audited=False),
            "audited": lambda: _loop(size, root / "audited", is_audited=True)}, repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return AuditOverhead(size=size, plain_step_s=Spread.of(samples["plain"]),
                         audited_step_s=Spread.of(samples["audited"]),
                         ratio=paired_ratios(samples["audited"], samples["plain"]))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_audit")
    parser.add_argument("--quick", action="store_true", help="5 repeats instead of 15")
    args = parser.parse_args()
    result = measure(SIZES[0], repeats=5 if args.quick else 15)
    verdict = "yes" if result.ratio.median <= BOUND else "no"
    print(f"| audit mode per step, audited / plain reference, {result.size.name}, checkpoints "
          f"on | {result.ratio.fmt(3, 'x')} | <= {BOUND}x | {verdict} |")


if __name__ == "__main__":
    main()
