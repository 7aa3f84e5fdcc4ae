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
from benchmarks.report_common import SECTIONS, ms, table, x
from benchmarks.stats import Spread, interleaved, paired_ratios
from benchmarks.workload import SEED, SIZES, Clock, ModelSize
from trainspec.kit import audited
from trainspec.reference.config import CkptConfig, TestConfig, TrainConfig, ValConfig

__all__ = ["AuditOverhead", "audit_rows", "audit_section", "measure"]

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


def audit_rows(cost: AuditOverhead) -> list[list[str]]:
    """The summary's row: audit mode's cost per step."""
    return [[f"audit mode per step, audited / plain reference, {cost.size.name}, checkpoints on",
             x(cost.ratio, 3), f"≤ {BOUND}x",
             "**yes**" if cost.ratio.median <= BOUND else "**no**"]]


def audit_section(cost: AuditOverhead) -> list[str]:
    return [f"## {SECTIONS['audit']}. Audit mode's overhead", "",
            "`benchmarks/bench_audit.py`: the trainer benchmark's reference trainer "
            "(section 5's model, data and epoch, checkpoints on, one thread) with and without "
            "`trainspec.kit.audited`, which also writes the run's audit log (an event per epoch "
            "and validation, each with a digest of the weights and a listing of the run "
            "folder). The two arms run interleaved in one process; the ratio is paired per "
            "repeat, time per optimizer step.", "",
            *table(["model", "plain, per step", "audited, per step", "audited / plain"],
                   [[cost.size.name, ms(cost.plain_step_s, 3), ms(cost.audited_step_s, 3),
                     f"**{x(cost.ratio, 3)}**"]])]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_audit")
    parser.add_argument("--quick", action="store_true", help="5 repeats instead of 15")
    args = parser.parse_args()
    cost = measure(SIZES[0], repeats=5 if args.quick else 15)
    print("\n".join([*audit_section(cost), "",
                     *table(["what", "measured", "target", "met"], audit_rows(cost))]))


if __name__ == "__main__":
    main()
