"""The published matrix's cost: ``trainspec matrix -n 2`` over every installed framework.

One run (it takes minutes), as a user runs it: a new interpreter, wall time from start to exit.
Its ``matrix.json`` gives each target's own duration and verdicts; the rest of the wall time is
start-up, imports and writing the matrix. Opt-in under ``--quick`` (``--with-matrix``); always
in the full run.

    python -m benchmarks.bench_matrix
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ARGS", "TARGET_S", "MatrixCost", "TargetCost", "measure"]

ARGS = ("matrix", "-n", "2")
TARGET_S = 120.0  # the benchmark issue's target for the whole matrix
_TIMEOUT_S = 1800.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetCost:
    name: str
    duration_s: float  # the target's report's own duration
    verdict: str  # conformant or not, and the verdict counts


@dataclass(frozen=True, slots=True, kw_only=True)
class MatrixCost:
    wall_s: float  # one run
    targets: list[TargetCost]
    not_installed: dict[str, str]  # target -> why it was skipped

    @property
    def outside_targets_s(self) -> float:
        return self.wall_s - sum(t.duration_s for t in self.targets)


def measure() -> MatrixCost:
    with tempfile.TemporaryDirectory(prefix="trainspec-bench-matrix-") as tmp:
        out = Path(tmp) / "matrix"
        command = [sys.executable, "-m", "trainspec", *ARGS, "--out", str(out)]
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S,
                              check=False)
        wall = time.perf_counter() - began
        data_file = out / "matrix.json"
        if done.returncode != 0 or not data_file.is_file():
            raise RuntimeError(f"`trainspec {' '.join(ARGS)}` exited {done.returncode}; its "
                               f"output ends:\n{(done.stdout + done.stderr)[-2000:]}")
        data: dict[str, Any] = json.loads(data_file.read_text())
    targets = []
    for name, report in data["targets"].items():
        counts = ", ".join(f"{n} {k}" for k, n in report["summary"].items() if n)
        targets.append(TargetCost(
            name=name, duration_s=float(report["duration_s"]),
            verdict=f"{'conformant' if report['conformant'] else 'not conformant'} "
                    f"({counts})"))
    return MatrixCost(wall_s=wall, targets=targets,
                      not_installed={k: str(v) for k, v in data["not_installed"].items()})


def main() -> None:
    cost = measure()
    print(f"trainspec {' '.join(ARGS)}: {cost.wall_s:.1f} s (target <= {TARGET_S:.0f} s); "
          f"outside the targets' checks {cost.outside_targets_s:.1f} s")
    for t in cost.targets:
        print(f"  {t.name:10s} {t.duration_s:6.1f} s  {t.verdict}")
    for name, why in cost.not_installed.items():
        print(f"  {name:10s} not installed: {why}")


if __name__ == "__main__":
    main()
