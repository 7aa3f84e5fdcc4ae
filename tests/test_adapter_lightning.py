"""The Lightning adapter runs through ``trainspec check`` and every selected clause gets a verdict.

Whether Lightning conforms is what the report says; this test only asks that the adapter works:
the run completes, and no clause comes out ``error`` (an error means the adapter is broken).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")

TARGET = "trainspec.adapters.lightning:LightningAdapter"


@pytest.mark.parametrize(("selected", "world_size"), [
    (("LOOP", "BEST", "NAN", "PAT"), 1),
    (("DIST-1", "DIST-3"), 2),  # Lightning's DDP strategy joining the suite's 2-rank world
])
def test_lightning_adapter_gets_a_verdict_for_every_clause(
        tmp_path: Path, selected: tuple[str, ...], world_size: int) -> None:
    report_path = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "trainspec", "check", TARGET, "--clauses", ",".join(selected),
         "--world-size", str(world_size), "--report", str(report_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    assert proc.returncode in (0, 1), f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    report = json.loads(report_path.read_text())
    assert report["environment"].get("framework", "").startswith("lightning ")
    chosen = [c for c in report["clauses"]
              if c["id"] in selected or c["id"].split("-")[0] in selected]
    assert chosen, "no clause of the selected families in the report"
    print()
    for c in chosen:
        print(f"{c['id']:<7} {c['verdict']:<10} {c['evidence']}")
    missing = [c["id"] for c in chosen if not c.get("verdict")]
    assert not missing, f"clauses without a verdict: {missing}"
    errors = {c["id"]: c["evidence"] for c in chosen if c["verdict"] in ("error", "timeout")}
    assert not errors, f"the adapter is broken: {errors}"


def test_importing_the_adapter_does_not_import_lightning() -> None:
    code = ("import sys, trainspec.adapters.lightning as m; "
            "assert 'lightning' not in sys.modules and 'pytorch_lightning' not in sys.modules; "
            "print(m.LightningAdapter().name)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
