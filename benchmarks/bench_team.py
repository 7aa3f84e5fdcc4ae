"""A team's trainer: how much of its check is the trainer's own work, how much the suite's.

Each worked adapter of the guides (the trainers in ``tests/worked/``, each in the shape of a
real kind of trainer) and the reference are checked as a user checks them, ``trainspec check
TARGET`` at the default worker count, in a new interpreter. Every run's child notes the time
from the start of the adapter's ``run`` to its end or its crash point
(``TRAINSPEC_RUN_TIMES``, ``conformance/run/profiling.py``); property children note the time of
their examples. The trainer's time is the sum over rank 0's runs (the other ranks of a run run
at the same time as rank 0, on the other lanes). The suite's share is what is left of the
capacity the check held, ``wall x lanes``: ``1 - trainer / (wall x lanes)``: start-up, the
plan, forks, the crash points' waits, reading files, judging and writing the report.

    python -m benchmarks.bench_team [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.report_common import SECTIONS, table
from benchmarks.stats import Spread, interleaved

__all__ = ["SHARE_AIM", "TARGETS", "TeamCost", "TeamRun", "measure", "team_rows",
           "team_section"]

# label -> the target `trainspec check` is given
TARGETS = {
    "reference": "reference",
    "class-based template": "tests.worked.template_adapter:TemplateAdapter",
    "loop function": "tests.worked.imagenet_adapter:ImagenetAdapter",
    "callback library, bundle checkpoints": "tests.worked.bundle_adapter:BundleAdapter",
    "training engine's runner": "tests.worked.engine_adapter:EngineAdapter",
}
SHARE_AIM = 1 / 3  # the suite's share of a team trainer's check, at the default
_ROOT = Path(__file__).resolve().parent.parent
_TIMEOUT_S = 900.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TeamRun:
    wall_s: float
    lanes: int  # the workers the check ran on (the report's own count)
    trainer_s: float  # rank 0's runs and property children, summed
    runs: int  # rank 0's runs
    verdict: str

    @property
    def suite_share(self) -> float:
        return max(0.0, 1.0 - self.trainer_s / (self.wall_s * self.lanes))


@dataclass(frozen=True, slots=True, kw_only=True)
class TeamCost:
    wall_s: dict[str, Spread]
    trainer_s: dict[str, Spread]
    share: dict[str, Spread]
    lanes: dict[str, int]
    runs: dict[str, int]
    verdicts: dict[str, str]


def run_once(target: str, folder: Path) -> TeamRun:
    times = folder / f"{target}.times"
    report = folder / f"{target}.json"
    times.unlink(missing_ok=True)
    report.unlink(missing_ok=True)
    env = {**os.environ, "TRAINSPEC_RUN_TIMES": str(times)}
    command = [sys.executable, "-m", "trainspec", "check", target, "--report", str(report)]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S,
                          check=False, cwd=_ROOT, env=env)
    wall = time.perf_counter() - began
    if done.returncode not in (0, 1) or not report.is_file():
        raise RuntimeError(f"`{' '.join(command)}` exited {done.returncode} without a report; "
                           f"its output ends:\n{(done.stdout + done.stderr)[-2000:]}")
    data = json.loads(report.read_text())
    lanes = int(data.get("environment", {}).get("workers") or 1)
    trainer, runs = 0.0, 0
    for line in times.read_text().splitlines() if times.is_file() else []:
        kind, rank, seconds = line.split()
        if rank == "0":
            trainer += float(seconds)
            runs += kind == "run"
    summary = ", ".join(f"{n} {k}" for k, n in data["summary"].items() if n)
    return TeamRun(wall_s=wall, lanes=lanes, trainer_s=trainer, runs=runs, verdict=summary)


def measure(*, repeats: int) -> TeamCost:
    with tempfile.TemporaryDirectory(prefix="trainspec-bench-team-") as tmp:
        folder = Path(tmp)
        arms = {label: (lambda t=target: run_once(t, folder)) for label, target in TARGETS.items()}
        measured = interleaved(arms, repeats)
    return TeamCost(
        wall_s={k: Spread.of([r.wall_s for r in rs]) for k, rs in measured.items()},
        trainer_s={k: Spread.of([r.trainer_s for r in rs]) for k, rs in measured.items()},
        share={k: Spread.of([r.suite_share for r in rs]) for k, rs in measured.items()},
        lanes={k: rs[-1].lanes for k, rs in measured.items()},
        runs={k: rs[-1].runs for k, rs in measured.items()},
        verdicts={k: rs[-1].verdict for k, rs in measured.items()})


def team_rows(cost: TeamCost) -> list[list[str]]:
    """The summary's rows: the suite's share of each worked trainer's check."""
    return [[f"suite's share of a team trainer's check ({label}), default workers",
             f"{cost.share[label].median:.0%} [{cost.share[label].low:.0%}, "
             f"{cost.share[label].high:.0%}]", f"≤ {SHARE_AIM:.0%}",
             "**yes**" if cost.share[label].median <= SHARE_AIM else "**no**"]
            for label in cost.share if label != "reference"]


def team_section(cost: TeamCost) -> list[str]:
    rows = [[label, f"`{TARGETS[label]}`", cost.wall_s[label].fmt(1, " s"), str(cost.lanes[label]),
             str(cost.runs[label]), cost.trainer_s[label].fmt(1, " s"),
             f"{cost.share[label].median:.0%}", cost.verdicts[label]] for label in cost.wall_s]
    return [f"## {SECTIONS['team']}. A team's trainer: the trainer's time and the suite's", "",
            "`trainspec check TARGET` at the default worker count on each worked adapter of the "
            "guides and on the reference. The trainer's time is the sum, over rank 0's runs, of "
            "the time from the start of the adapter's `run` to its end or its crash point "
            "(`TRAINSPEC_RUN_TIMES`); the suite's share is `1 - trainer / (wall x workers)`: "
            "start-up, forks, crash points' waits, reading files, judging, the report.", "",
            *table(["trainer", "target", "wall", "workers", "runs", "trainer's time",
                    "suite's share", "verdicts"], rows)]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_team")
    parser.add_argument("--quick", action="store_true", help="one repeat")
    args = parser.parse_args()
    cost = measure(repeats=1 if args.quick else 3)
    summary = table(["what", "measured", "target", "met"], team_rows(cost))
    print("\n".join([*team_section(cost), "", *summary]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
