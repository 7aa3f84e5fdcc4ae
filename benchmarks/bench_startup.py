"""Start-up costs of a check, each measured on its own: the interpreter, the imports of the
main process and of a worker (``python -X importtime``), a worker's start, and a 2-rank
world's start-up (gloo).

The main process is the CLI as a user runs it, under ``-X importtime``. A worker's imports and
start are timed through the suite's own :class:`WorkerProcess` (its stderr is a log this
benchmark keeps), the world's through a :class:`Harness`, in this process.

    python -m benchmarks.bench_startup [--quick]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks import importtime
from benchmarks.stats import Spread, interleaved
from trainspec.conformance.checks.dist import dist_scenario
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.run.protocol import Describe
from trainspec.conformance.run.session import WorkerProcess
from trainspec.conformance.targets import resolve_target

__all__ = ["IMPORT_COMMANDS", "WATCHED", "StartupCost", "measure"]

# the main process's imports, for these commands (each the CLI as a user runs it)
IMPORT_COMMANDS: dict[str, tuple[str, ...]] = {
    "one clause": ("check", "--clauses", "LOOP-1", "--world-size", "1"),
    "whole check": ("check",),
}
# packages whose import in the main process the benchmark issue asks about
WATCHED = ("torch", "torchmetrics", "hypothesis")
_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StartupCost:
    interpreter_s: Spread  # python -c pass
    imports: dict[str, importtime.ImportProfile]  # process -> its imports
    import_walls_s: dict[str, float]  # process -> its wall time under -X importtime
    worker_start_s: Spread  # a worker process until ready (torch imported, warm-up done)
    worker_bind_s: Spread  # then bound to the reference's adapter and described
    world_ready_s: Spread  # a 2-rank world's workers started, until both are ready
    world_first_run_s: Spread  # its first DIST scenario (the process group's first connection)
    world_next_run_s: Spread  # the same scenario again on the same world


def _python(*args: str) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True,
                   timeout=_TIMEOUT_S)
    return time.perf_counter() - began


def main_imports(args: tuple[str, ...]) -> tuple[importtime.ImportProfile, float]:
    """The imports of ``python -X importtime -m trainspec ARGS``, and its wall time."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "trainspec", *args],
                          capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    wall = time.perf_counter() - began
    if done.returncode not in (0, 1):
        raise RuntimeError(f"trainspec {' '.join(args)} exited {done.returncode}: "
                           f"{done.stderr[-2000:]}")
    return importtime.profile(importtime.parse(done.stderr.splitlines())), wall


def _worker(log: Path, *, profile_imports: bool = False) -> tuple[WorkerProcess, float]:
    """A worker started and ready, and the seconds that took."""
    saved = os.environ.get("PYTHONPROFILEIMPORTTIME")
    if profile_imports:  # the worker inherits this process's environment
        os.environ["PYTHONPROFILEIMPORTTIME"] = "1"
    began = time.perf_counter()
    try:
        worker = WorkerProcess(log)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPROFILEIMPORTTIME", None)
        else:
            os.environ["PYTHONPROFILEIMPORTTIME"] = saved
    worker.wait_ready()
    return worker, time.perf_counter() - began


def worker_start(folder: Path, *, profile_imports: bool = False) -> tuple[float, float, Path]:
    """One worker of the reference: seconds until ready, then until bound and described;
    and its log (its stderr: with ``profile_imports``, the import times)."""
    log = folder / f"worker-{time.monotonic_ns()}.log"
    worker, ready_s = _worker(log, profile_imports=profile_imports)
    try:
        began = time.perf_counter()
        worker.bind(resolve_target("reference").adapter)
        worker.send(Describe())
        worker.receive(60.0)
        bound_s = time.perf_counter() - began
    finally:
        worker.close()
    return ready_s, bound_s, log


def world_start(size: int = 2) -> tuple[float, float, float]:
    """A new harness's world of ``size`` ranks: seconds until its workers are ready, its
    first DIST scenario, and the same scenario again."""
    scenario = dist_scenario("bench-startup", size)
    with Harness(resolve_target("reference").adapter) as harness:
        began = time.perf_counter()
        for worker in harness.world(size).workers:
            worker.wait_ready()
        ready = time.perf_counter() - began
        runs = []
        for _ in range(2):
            began = time.perf_counter()
            trace = harness.run(scenario)
            runs.append(time.perf_counter() - began)
            if not trace.completed:
                raise RuntimeError(f"the world's scenario did not complete: {trace.ranks}")
    return ready, runs[0], runs[1]


def measure(*, repeats: int, whole_check_imports: bool = True) -> StartupCost:
    with tempfile.TemporaryDirectory(prefix="trainspec-bench-startup-") as tmp:
        folder = Path(tmp)
        arms: dict[str, Callable[[], object]] = {
            "interpreter": lambda: _python("-c", "pass"),
            "worker": lambda: worker_start(folder),
            "world": world_start,
        }
        samples = interleaved(arms, repeats)
        _ready, _bound, log = worker_start(folder, profile_imports=True)
        worker_imports = importtime.profile(importtime.parse(log.read_text().splitlines()))
    imports, walls = {}, {}
    for label, args in IMPORT_COMMANDS.items():
        if label == "whole check" and not whole_check_imports:
            continue
        imports[f"main process, {label}"], walls[f"main process, {label}"] = main_imports(args)
    imports["worker"] = worker_imports
    workers = [w for w in samples["worker"] if isinstance(w, tuple)]
    worlds = [w for w in samples["world"] if isinstance(w, tuple)]
    return StartupCost(
        interpreter_s=Spread.of([s for s in samples["interpreter"] if isinstance(s, float)]),
        imports=imports, import_walls_s=walls,
        worker_start_s=Spread.of([w[0] for w in workers]),
        worker_bind_s=Spread.of([w[1] for w in workers]),
        world_ready_s=Spread.of([w[0] for w in worlds]),
        world_first_run_s=Spread.of([w[1] for w in worlds]),
        world_next_run_s=Spread.of([w[2] for w in worlds]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    cost = measure(repeats=2 if args.quick else 5, whole_check_imports=not args.quick)
    print(f"interpreter {cost.interpreter_s.scaled(1e3).fmt(0, ' ms')}; worker ready "
          f"{cost.worker_start_s.fmt(2, ' s')}, bound {cost.worker_bind_s.fmt(2, ' s')}; "
          f"2-rank world ready {cost.world_ready_s.fmt(2, ' s')}, first run "
          f"{cost.world_first_run_s.fmt(2, ' s')}, next {cost.world_next_run_s.fmt(2, ' s')}")
    for process, prof in cost.imports.items():
        print(f"{process}: {prof.modules} modules, {prof.total_s:.2f} s; "
              + ", ".join(f"{w} {'yes' if prof.has(w) else 'no'}" for w in WATCHED))
        for name, seconds in prof.roots:
            print(f"  {seconds * 1e3:8.1f} ms  {name}")


if __name__ == "__main__":
    main()
