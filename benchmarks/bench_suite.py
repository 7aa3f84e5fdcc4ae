"""Suite wall time: ``trainspec check`` on the reference, as a user runs it.

Four arms, interleaved: every clause on 1 worker and with ``-n 2``, one clause
(``--clauses LOOP-1 --world-size 1``), and ``python -c "import torch"``, the floor any
torch-based tool pays, against which the others are also given as ratios. Each is a new
interpreter; its wall time includes start-up and imports. The JSON report of a whole check
gives each check's duration, summed per clause family (a check listed under several clauses
counts once) and ranked for the slowest.

    python -m benchmarks.bench_suite [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.stats import Spread, interleaved, paired_ratios
from trainspec.conformance.spec import clauses as registry

__all__ = ["ARMS", "BASELINE", "ONE_CLAUSE", "ONE_CLAUSE_ARGS", "RATIO_AIMS", "TARGETS_S",
           "SuiteCost", "SuiteRun", "measure"]

# the whole check's arms: extra arguments of `trainspec check --report FILE`
ARMS: dict[str, tuple[str, ...]] = {"1 worker": ("-n", "1"), "-n 2": ("-n", "2")}
ONE_CLAUSE = "one clause"
ONE_CLAUSE_ARGS = ("--clauses", "LOOP-1", "--world-size", "1")
BASELINE = "import torch"
# the benchmark issue's targets, seconds of wall time (median)
TARGETS_S = {"1 worker": 12.0, "-n 2": 9.0, ONE_CLAUSE: 2.5}
# and its aims as ratios to `python -c "import torch"` in the same run
RATIO_AIMS = {"1 worker": 8.0, ONE_CLAUSE: 1.7}
_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SuiteRun:
    wall_s: float  # the subprocess, start to exit
    report_s: float  # the report's own duration_s
    checks: dict[str, tuple[str, float]]  # check name -> (family, duration_s)
    verdict: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SuiteCost:
    wall_s: dict[str, Spread]  # every arm: ARMS, ONE_CLAUSE and BASELINE
    report_s: dict[str, Spread]  # the whole check's arms
    ratio: Spread  # -n 2 against 1 worker, paired per repeat
    to_baseline: dict[str, Spread]  # an arm against `import torch`, paired per repeat
    family_s: dict[str, dict[str, Spread]]  # family -> arm -> summed check durations
    slowest: list[tuple[str, str, Spread]]  # (check, family, durations) on 1 worker
    checks_total_s: dict[str, Spread]  # sum of every check's duration, per arm
    # wall time outside the runner, run by run (wall - the report's duration_s): interpreter,
    # imports, the plan, printing and writing the reports, the interpreter's exit
    outside_runner_s: dict[str, Spread]
    verdicts: set[str]


def run_once(extra: tuple[str, ...], folder: Path) -> SuiteRun:
    report = folder / f"report{'-'.join(extra)}.json"
    report.unlink(missing_ok=True)
    command = [sys.executable, "-m", "trainspec", "check", "--report", str(report), *extra]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S,
                          check=False)
    wall = time.perf_counter() - began
    if done.returncode not in (0, 1) or not report.is_file():
        raise RuntimeError(f"`{' '.join(command)}` exited {done.returncode} without a report; "
                           f"its output ends:\n{(done.stdout + done.stderr)[-2000:]}")
    data: dict[str, Any] = json.loads(report.read_text())
    checks: dict[str, tuple[str, float]] = {}
    for clause in data["clauses"]:
        family = registry.family_of(clause["id"])
        for check in clause["checks"]:
            checks.setdefault(check["name"], (family, float(check["duration_s"])))
    summary = ", ".join(f"{n} {k}" for k, n in data["summary"].items() if n)
    verdict = f"{'conformant' if data['conformant'] else 'NOT conformant'} ({summary})"
    return SuiteRun(wall_s=wall, report_s=float(data["duration_s"]), checks=checks,
                    verdict=verdict)


def wall_of(command: list[str]) -> float:
    """Seconds ``command`` took as a subprocess; it must exit 0."""
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S,
                          check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` exited {done.returncode}; its output "
                           f"ends:\n{(done.stdout + done.stderr)[-2000:]}")
    return wall


ONE_CLAUSE_COMMAND = [sys.executable, "-m", "trainspec", "check", *ONE_CLAUSE_ARGS]
BASELINE_COMMAND = [sys.executable, "-c", "import torch"]


def measure(*, repeats: int) -> SuiteCost:
    arms: dict[str, Callable[[], SuiteRun | float]]
    with tempfile.TemporaryDirectory(prefix="trainspec-bench-suite-") as tmp:
        folder = Path(tmp)
        arms = {arm: functools.partial(run_once, extra, folder) for arm, extra in ARMS.items()}
        arms[ONE_CLAUSE] = functools.partial(wall_of, ONE_CLAUSE_COMMAND)
        arms[BASELINE] = functools.partial(wall_of, BASELINE_COMMAND)
        measured = interleaved(arms, repeats)
    runs = {arm: [r for r in measured[arm] if isinstance(r, SuiteRun)] for arm in ARMS}
    wall = {arm: [r if isinstance(r, float) else r.wall_s for r in rs]
            for arm, rs in measured.items()}
    family_s: dict[str, dict[str, Spread]] = {}
    for family in registry.FAMILIES:
        family_s[family] = {
            arm: Spread.of([sum(d for f, d in r.checks.values() if f == family) for r in rs])
            for arm, rs in runs.items()}
    serial = runs["1 worker"]
    names = serial[0].checks
    per_check = {name: Spread.of([r.checks[name][1] for r in serial if name in r.checks])
                 for name in names}
    slowest = sorted(per_check, key=lambda n: per_check[n].median, reverse=True)[:5]
    return SuiteCost(
        wall_s={arm: Spread.of(v) for arm, v in wall.items()},
        report_s={arm: Spread.of([r.report_s for r in rs]) for arm, rs in runs.items()},
        outside_runner_s={arm: Spread.of([r.wall_s - r.report_s for r in rs])
                          for arm, rs in runs.items()},
        ratio=paired_ratios(wall["-n 2"], wall["1 worker"]),
        to_baseline={arm: paired_ratios(wall[arm], wall[BASELINE]) for arm in RATIO_AIMS},
        family_s=family_s,
        slowest=[(n, names[n][0], per_check[n]) for n in slowest],
        checks_total_s={arm: Spread.of([sum(d for _f, d in r.checks.values()) for r in rs])
                        for arm, rs in runs.items()},
        verdicts={r.verdict for rs in runs.values() for r in rs},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cost = measure(repeats=args.repeats)
    for arm in ARMS:
        print(f"{arm:8s}: wall {cost.wall_s[arm].fmt(1, ' s')}, "
              f"report {cost.report_s[arm].fmt(1, ' s')}")
    for arm in (ONE_CLAUSE, BASELINE):
        print(f"{arm}: wall {cost.wall_s[arm].fmt(2, ' s')}")
    for arm, ratio in cost.to_baseline.items():
        print(f"{arm} / {BASELINE}: x{ratio.fmt(2)} (aim {RATIO_AIMS[arm]}x)")
    print(f"-n 2 / 1 worker: x{cost.ratio.fmt(2)}; verdicts: {sorted(cost.verdicts)}")
    for family, arms in cost.family_s.items():
        print(f"  {family:5s} " + "  ".join(f"{a} {s.fmt(2, ' s')}" for a, s in arms.items()))
    for name, family, spread in cost.slowest:
        print(f"  {spread.fmt(2, ' s'):22s} {family:5s} {name}")


if __name__ == "__main__":
    main()
