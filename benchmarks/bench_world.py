"""Multi-rank cost: one DIST scenario on the reused world versus a fresh launch of the same job.

Both arms run the same scenario (2 ranks, gloo, the reference through the probe) in the same
process, interleaved; the fresh arm starts new worker processes for it (``--fresh-processes``:
forked from the warm template, run/template.py) and the reused arm pays only the fork of each
run from its warm workers plus the process group. A launcher per scenario would also pay new
interpreters, imports and warm-up: the world's start-up, measured once.

    python -m benchmarks.bench_world [--repeats N] [--world-size N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

from trainspec.conformance.checks.dist import dist_scenario
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.runner import resolve_target

__all__ = ["REUSED_TARGET_S", "WorldCost", "measure"]

REUSED_TARGET_S = 0.050  # the benchmark issue's target for one DIST scenario on the reused world


@dataclass(frozen=True, slots=True, kw_only=True)
class WorldCost:
    world_size: int
    startup_s: float  # starting the world's workers until the first run can begin
    reused_s: list[float]  # one scenario on the warm, reused world
    fresh_s: list[float]  # the same scenario on a world started for it

    @property
    def ratio(self) -> float:
        return statistics.median(self.fresh_s) / statistics.median(self.reused_s)


def measure(*, repeats: int = 5, world_size: int = 2) -> WorldCost:
    adapter = resolve_target("reference").adapter
    scenario = dist_scenario("bench-world", world_size)
    reused: list[float] = []
    fresh: list[float] = []
    # the fresh arm starts new workers inside every run: their start-up is in its times
    with Harness(adapter) as warm, Harness(adapter, fresh=True) as cold:
        started = time.perf_counter()
        for worker in warm.world(world_size).workers:
            worker.wait_ready()
        startup = time.perf_counter() - started
        warm.run(scenario)  # the first run pays the process group's first connection
        for _ in range(repeats):
            for harness, times in ((warm, reused), (cold, fresh)):
                began = time.perf_counter()
                trace = harness.run(scenario)
                times.append(time.perf_counter() - began)
                if not trace.completed:
                    raise RuntimeError(f"benchmark run did not complete: {trace.ranks}")
    return WorldCost(world_size=world_size, startup_s=startup, reused_s=reused, fresh_s=fresh)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    cost = measure(repeats=args.repeats, world_size=args.world_size)
    print(f"world of {cost.world_size}: startup {cost.startup_s:.2f} s; one DIST scenario: "
          f"reused {statistics.median(cost.reused_s) * 1000:.0f} ms (median of "
          f"{len(cost.reused_s)}), fresh {statistics.median(cost.fresh_s) * 1000:.0f} ms; "
          f"reused is {cost.ratio:.1f}x cheaper")


if __name__ == "__main__":
    main()
