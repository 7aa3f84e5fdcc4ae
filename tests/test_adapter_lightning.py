"""The Lightning adapter runs through ``trainspec check`` and every selected clause gets a verdict.

Whether Lightning conforms is what the report says; this test only asks that the adapter works:
the run completes, and no clause comes out ``error`` (an error means the adapter is broken).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.adapter_runs import check_clauses

pytest.importorskip("lightning")

TARGET = "trainspec.adapters.lightning:LightningAdapter"


@pytest.mark.parametrize(("selected", "world_size"), [
    (("LOOP", "BEST", "NAN", "PAT"), 1),
    (("DIST-1", "DIST-3"), 2),  # Lightning's DDP strategy joining the suite's 2-rank world
])
def test_lightning_adapter_gets_a_verdict_for_every_clause(
        tmp_path: Path, selected: tuple[str, ...], world_size: int) -> None:
    check_clauses(TARGET, selected, tmp_path, world_size=world_size, framework="lightning ")


def test_importing_the_adapter_does_not_import_lightning() -> None:
    code = ("import sys, trainspec.adapters.lightning as m; "
            "assert 'lightning' not in sys.modules and 'pytorch_lightning' not in sys.modules; "
            "print(m.LightningAdapter().name)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


def test_lightning_checkpoint_files_map_onto_roles(tmp_path: Path) -> None:
    import torch

    from trainspec.adapters.lightning import LightningAdapter

    weights = {"net.weight": torch.zeros(2, 4), "net.bias": torch.zeros(2)}
    for name, epoch, step in (("last.ckpt", 1, 12), ("best-v1.ckpt", 0, 6),
                              ("epoch=0-step=6.ckpt", 0, 6)):
        torch.save({"epoch": epoch, "global_step": step, "state_dict": weights,
                    "optimizer_states": [{"state": {}}], "lr_schedulers": []}, tmp_path / name)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    (tmp_path / "torn.ckpt").write_bytes(b"torn")
    described = LightningAdapter().describe_checkpoints(tmp_path)
    records = {r.relpath: r for r in described}
    assert {name: r.role for name, r in records.items()} == {
        "last.ckpt": "last", "best-v1.ckpt": "best", "epoch=0-step=6.ckpt": "epoch",
        "notes.txt": None, "torn.ckpt": None}
    last = records["last.ckpt"]
    assert (last.epoch, last.step, last.error) == (1, 12, None)
    # in the spec's terms: no scheduler state (an empty list), no config, no run id
    assert last.holds == ("epoch", "step", "model", "optimizer")
    assert "state_dict" in last.keys
