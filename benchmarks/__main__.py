"""Run every benchmark and write the results table to docs/benchmarks.md.

    python -m benchmarks            # the full run, a few minutes on 2 cores
    python -m benchmarks --quick    # fewer repeats, for a smoke run
    python -m benchmarks --only checkpoint,trainer --out bench.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks import bench_checkpoint, bench_suite, bench_trainer, bench_world
from benchmarks.machine import describe
from benchmarks.report import Results, render

BENCHMARKS = ("suite", "world", "trainer", "checkpoint")
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="fewer repeats (about half the time; wider spreads)")
    parser.add_argument("--only", default=",".join(BENCHMARKS), metavar="NAMES",
                        help=f"comma-separated subset of {', '.join(BENCHMARKS)} (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="FILE.md",
                        help="where the results go (default: docs/benchmarks.md)")
    args = parser.parse_args(argv)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(args.only) - set(BENCHMARKS))
    if unknown:
        parser.error(f"--only: unknown benchmark {', '.join(unknown)}; "
                     f"choose from {', '.join(BENCHMARKS)}")
    return args


def _say(message: str) -> None:
    print(f"[benchmarks] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    quick: bool = args.quick
    only: list[str] = args.only
    began = time.perf_counter()
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    machine = describe()
    suite = world = trainer = profiles = frameworks = checkpoint = save_profile = None
    if "suite" in only:
        _say("suite wall time: trainspec check, 1 worker and -n 2, alternating")
        suite = bench_suite.measure(repeats=1 if quick else 3)
    if "world" in only:
        _say("multi-rank cost: reused world vs fresh launch")
        world = bench_world.measure(repeats=2 if quick else 5)
    if "trainer" in only:
        _say("trainer overhead: reference vs bare loop")
        trainer, profiles = bench_trainer.run(quick=quick)
        frameworks = bench_trainer.frameworks_installed()
    if "checkpoint" in only:
        _say("checkpoint cost: save_checkpoint/load_checkpoint vs torch.save/torch.load")
        checkpoint, save_profile = bench_checkpoint.run(quick=quick)
    command = " ".join(["python -m benchmarks", *(["--quick"] if quick else []),
                        *([f"--only {','.join(only)}"] if len(only) < len(BENCHMARKS) else [])])
    text = render(Results(
        command=command, is_quick=quick, started=started,
        elapsed_s=time.perf_counter() - began, machine=machine,
        load_after=os.getloadavg()[0], suite=suite, world=world, trainer=trainer,
        trainer_profiles=profiles, frameworks=frameworks, checkpoint=checkpoint,
        save_profile=save_profile))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    _say(f"wrote {args.out} in {(time.perf_counter() - began) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
