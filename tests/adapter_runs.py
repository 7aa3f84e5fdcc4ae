"""What the framework adapters' tests share: ``trainspec check`` run as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def check_clauses(target: str, selected: Sequence[str], tmp_path: Path, *, world_size: int = 1,
                  framework: str | None = None, timeout_s: float = 300
                  ) -> dict[str, dict[str, Any]]:
    """``trainspec check TARGET --clauses SELECTED`` in a new interpreter; the selected clauses
    (IDs or families) of its JSON report, by ID.

    Whether the framework conforms is what the verdicts say; this asserts only that the adapter
    works: the command ran (exit 0 or 1), the report names the framework (``framework``, a
    prefix of its version string), every selected clause has a verdict, and none is ``error``
    or ``timeout``, which would mean the adapter is broken.
    """
    report_path = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "trainspec", "check", target, "--clauses", ",".join(selected),
         "--world-size", str(world_size), "--report", str(report_path)],
        capture_output=True, text=True, timeout=timeout_s, cwd=tmp_path, check=False)
    assert proc.returncode in (0, 1), f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    report = json.loads(report_path.read_text())
    if framework is not None:
        assert report["environment"].get("framework", "").startswith(framework)
    chosen = {c["id"]: c for c in report["clauses"]
              if c["id"] in selected or c["id"].split("-")[0] in selected}
    assert chosen, "no clause of the selected families in the report"
    print()
    for c in chosen.values():
        print(f"{c['id']:<7} {c['verdict']:<10} {c['evidence']}")
    missing = [cid for cid, c in chosen.items() if not c.get("verdict")]
    assert not missing, f"clauses without a verdict: {missing}"
    broken = {cid: c["evidence"] for cid, c in chosen.items()
              if c["verdict"] in ("error", "timeout")}
    assert not broken, f"the adapter is broken: {broken}"
    return chosen
