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
SELECTED = ("LOOP", "BEST", "NAN", "PAT")


def test_lightning_adapter_gets_a_verdict_for_every_clause(tmp_path: Path) -> None:
    report_path = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "trainspec", "check", TARGET, "--clauses", ",".join(SELECTED),
         "--world-size", "1", "--report", str(report_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    assert proc.returncode in (0, 1), f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    report = json.loads(report_path.read_text())
    assert report["environment"].get("framework", "").startswith("lightning ")
    selected = [c for c in report["clauses"] if c["id"].split("-")[0] in SELECTED]
    assert selected, "no clause of the selected families in the report"
    print()
    for c in selected:
        print(f"{c['id']:<7} {c['verdict']:<10} {c['evidence']}")
    missing = [c["id"] for c in selected if not c.get("verdict")]
    assert not missing, f"clauses without a verdict: {missing}"
    errors = {c["id"]: c["evidence"] for c in selected if c["verdict"] == "error"}
    assert not errors, f"the adapter is broken: {errors}"


def test_importing_the_adapter_does_not_import_lightning() -> None:
    code = ("import sys, trainspec.adapters.lightning as m; "
            "assert 'lightning' not in sys.modules and 'pytorch_lightning' not in sys.modules; "
            "print(m.LightningAdapter().name)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
