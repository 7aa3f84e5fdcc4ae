"""The Lightning adapter runs through ``trainspec check`` and every selected clause gets a verdict.

Whether Lightning conforms is what the report says; this test only asks that the adapter works:
the run completes, and no clause comes out ``error`` (an error means the adapter is broken).
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.adapter_runs import check_clauses
from trainspec.conformance.checks.common import make_scenario
from trainspec.conformance.run.memory import MemoryContext
from trainspec.errors import AdapterError

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
                              ("epoch=0-step=6.ckpt", 0, 6), ("on_exception.ckpt", 1, 9)):
        torch.save({"epoch": epoch, "global_step": step, "state_dict": weights,
                    "optimizer_states": [{"state": {}}], "lr_schedulers": []}, tmp_path / name)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    (tmp_path / "torn.ckpt").write_bytes(b"torn")
    described = LightningAdapter().describe_checkpoints(tmp_path)
    records = {r.relpath: r for r in described}
    assert {name: r.role for name, r in records.items()} == {
        "last.ckpt": "last", "best-v1.ckpt": "best", "epoch=0-step=6.ckpt": "epoch",
        # OnExceptionCheckpoint's file (the on_exception_checkpoint remedy): the state to
        # resume from after an exception, SIGTERM's included
        "on_exception.ckpt": "last", "notes.txt": None, "torn.ckpt": None}
    last = records["last.ckpt"]
    assert (last.epoch, last.step, last.error) == (1, 12, None)
    # in the spec's terms: no scheduler state (an empty list), no config, no run id
    assert last.holds == ("epoch", "step", "model", "optimizer")
    assert "state_dict" in last.keys


def test_lightning_runs_at_its_defaults_unless_a_remedy_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # each remedy's switch is at Lightning's own default unless the remedy is named
    import lightning
    from lightning.pytorch.callbacks import EarlyStopping, OnExceptionCheckpoint

    from trainspec.adapters.lightning import LightningAdapter, _Run

    monkeypatch.setenv("PL_SEED_WORKERS", "unset")  # seed_everything writes it; restored after
    monkeypatch.setenv("PL_GLOBAL_SEED", "0")
    s = make_scenario("defaults", [0.1, 0.2], cfg={"val.patience": 2})
    names = {r.name for r in LightningAdapter().remedies()}
    assert names == {"check_finite", "on_exception_checkpoint", "deterministic"}

    def built(*remedies: str) -> tuple[list[object], dict[str, object]]:
        run = _Run(s, MemoryContext(tmp_path), frozenset(remedies))
        run.seed()
        callbacks = run.build_callbacks()
        return callbacks, run.trainer_arguments(callbacks)

    def stopper(callbacks: list[object]) -> EarlyStopping:
        return next(c for c in callbacks if isinstance(c, EarlyStopping))

    default_finite = inspect.signature(EarlyStopping).parameters["check_finite"].default
    default_deterministic = inspect.signature(lightning.Trainer).parameters[
        "deterministic"].default
    default_workers = inspect.signature(lightning.seed_everything).parameters["workers"].default
    callbacks, args = built()
    assert stopper(callbacks).check_finite is default_finite is True
    assert not any(isinstance(c, OnExceptionCheckpoint) for c in callbacks)
    assert args.get("deterministic", default_deterministic) is default_deterministic
    assert os.environ["PL_SEED_WORKERS"] == str(int(default_workers)) == "0"
    callbacks, args = built(*names)
    assert stopper(callbacks).check_finite is False
    exception_ckpt = [c for c in callbacks if isinstance(c, OnExceptionCheckpoint)]
    assert [c.ckpt_path for c in exception_ckpt] == [str(tmp_path / "on_exception.ckpt")]
    assert args["deterministic"] is True
    assert os.environ["PL_SEED_WORKERS"] == "1"
    with pytest.raises(AdapterError, match=r"unknown remedies.*check_finite"):
        LightningAdapter("check_finit")
