"""Run every benchmark and write the results to docs/benchmarks.md.

    python -m benchmarks                  # the full run (the matrix included, measured once)
    python -m benchmarks --quick          # fewer repeats, no matrix: a few minutes
    python -m benchmarks --quick --with-matrix
    python -m benchmarks --only checkpoint,trainer --out bench.md
    python -m benchmarks --keep-results run.pickle   # then, after changing only the text:
    python -m benchmarks --from-results run.pickle   # the doc again, nothing measured
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from benchmarks import (
    bench_audit,
    bench_breakdown,
    bench_checkpoint,
    bench_matrix,
    bench_startup,
    bench_suite,
    bench_team,
    bench_trainer,
    bench_world,
)
from benchmarks.machine import describe
from benchmarks.report import Results, earlier_run_lengths, render
from benchmarks.workload import SIZES

BENCHMARKS = ("suite", "profile", "world", "matrix", "trainer", "checkpoint", "team", "audit")
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
T = TypeVar("T")


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="fewer repeats and no matrix: a few minutes (wider spreads)")
    parser.add_argument("--with-matrix", action="store_true",
                        help="with --quick: measure `trainspec matrix -n 2` too (minutes; the "
                             "full run always does)")
    parser.add_argument("--only", default=None, metavar="NAMES",
                        help=f"comma-separated subset of {', '.join(BENCHMARKS)} (default: all; "
                             "with --quick all but matrix)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="FILE.md",
                        help="where the results go (default: docs/benchmarks.md)")
    parser.add_argument("--keep-results", type=Path, metavar="FILE.pickle",
                        help="also keep the measurements in this file (for --from-results)")
    parser.add_argument("--from-results", type=Path, metavar="FILE.pickle",
                        help="measure nothing: write the doc from measurements a run kept "
                             "with --keep-results (after a change to the report's text)")
    args = parser.parse_args(argv)
    if args.only is None:
        skip = {"matrix"} if args.quick and not args.with_matrix else set()
        args.only = [name for name in BENCHMARKS if name not in skip]
        args.is_subset = False
    else:
        args.only = [name.strip() for name in args.only.split(",") if name.strip()]
        args.is_subset = True
    unknown = sorted(set(args.only) - set(BENCHMARKS))
    if unknown:
        parser.error(f"--only: unknown benchmark {', '.join(unknown)}; "
                     f"choose from {', '.join(BENCHMARKS)}")
    return args


def _say(message: str) -> None:
    print(f"[benchmarks] {message}", file=sys.stderr, flush=True)


class _Runner:
    """Runs the selected benchmarks, timing each."""

    def __init__(self, only: Sequence[str]) -> None:
        self.only = only
        self.timings_s: dict[str, float] = {}

    def __call__(self, name: str, what: str, fn: Callable[[], T]) -> T | None:
        if name not in self.only:
            return None
        _say(what)
        began = time.perf_counter()
        result = fn()
        self.timings_s[name] = self.timings_s.get(name, 0.0) + time.perf_counter() - began
        return result


def _command(args: argparse.Namespace) -> str:
    parts = ["python -m benchmarks"]
    if args.quick:
        parts.append("--quick")
    if args.with_matrix:
        parts.append("--with-matrix")
    if args.is_subset:
        parts.append(f"--only {','.join(args.only)}")
    return " ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.from_results is not None:
        with args.from_results.open("rb") as f:
            kept = pickle.load(f)  # a file this program wrote
        if not isinstance(kept, Results):
            raise SystemExit(f"{args.from_results}: not the measurements of a benchmark run")
        return _write(args.out, kept)
    results = measure(args)
    if args.keep_results is not None:
        with args.keep_results.open("wb") as f:
            pickle.dump(results, f)
    return _write(args.out, results)


def _write(out: Path, results: Results) -> int:
    text = render(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    _say(f"wrote {out} ({results.elapsed_s / 60:.1f} min of measuring)")
    return 0


def measure(args: argparse.Namespace) -> Results:
    """Every benchmark ``args`` selects, timed; the doc's data."""
    quick: bool = args.quick
    began = time.perf_counter()
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    machine = describe()
    run = _Runner(args.only)
    suite = run("suite", "suite wall time: whole check (1 worker, -n 2), one clause, "
                "import torch, interleaved", lambda: bench_suite.measure(repeats=1 if quick else 3))
    startup = run("profile", "profile: interpreter, imports, worker and world start-up",
                  lambda: bench_startup.measure(repeats=2 if quick else 5,
                                                whole_check_imports=not quick))
    breakdown = run("profile", "profile: the whole check in this process, per scenario",
                    bench_breakdown.measure)
    world = run("world", "multi-rank cost: reused world vs fresh launch",
                lambda: bench_world.measure(repeats=2 if quick else 5))
    matrix = run("matrix", "the matrix: trainspec matrix -n 2 (minutes)", bench_matrix.measure)
    trainer = run("trainer", "trainer overhead: the reference and the anchors vs the bare loop",
                  lambda: bench_trainer.run(quick=quick))
    checkpoint = run("checkpoint", "checkpoint cost: save_checkpoint/load_checkpoint vs "
                     "torch.save/torch.load", lambda: bench_checkpoint.run(quick=quick))
    team = run("team", "a team's trainer: the worked adapters' checks, the trainer's time and "
               "the suite's", lambda: bench_team.measure(repeats=1 if quick else 3))
    audit = run("audit", "audit mode's overhead: the reference audited vs plain, per step",
                lambda: bench_audit.measure(SIZES[0], repeats=5 if quick else 15))
    earlier = earlier_run_lengths(args.out.read_text()) if args.out.is_file() else {}
    return Results(
        command=_command(args), is_quick=quick, started=started, is_subset=args.is_subset,
        elapsed_s=time.perf_counter() - began, machine=machine,
        load_after=os.getloadavg()[0], suite=suite, startup=startup, breakdown=breakdown,
        world=world, matrix=matrix, trainer=trainer, team=team, audit=audit,
        checkpoint=None if checkpoint is None else checkpoint[0],
        save_profile=None if checkpoint is None else checkpoint[1],
        timings_s=run.timings_s, earlier=earlier)


if __name__ == "__main__":
    raise SystemExit(main())
