"""The Ignite adapter runs through ``trainspec check`` and every selected clause gets a verdict.

Whether Ignite conforms is what the report says; these tests ask that the adapter works: the run
completes, no clause comes out ``error`` (an error means the adapter is broken), the clauses
that only need Ignite wired as its docs say pass, and the files Ignite writes are described
under the right roles, epochs and steps.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.adapter_runs import check_clauses
from trainspec.adapters.ignite import IgniteAdapter
from trainspec.adapters.ignite.files import describe_ignite_files, file_role, progress
from trainspec.conformance.checks.common import make_scenario
from trainspec.conformance.run.memory import MemoryContext
from trainspec.conformance.run.records import RunEnd, Validation
from trainspec.errors import AdapterError

pytest.importorskip("ignite")

TARGET = "trainspec.adapters.ignite:IgniteAdapter"
SELECTED = ("LOOP", "BEST", "RES", "FT", "CKPT")
# these pass when Ignite is wired as its docs say (trainer state, handlers and the best
# Checkpoint in to_save, load_objects before run; on two ranks, the score pooled by Ignite's
# sync_all_reduce); a fail here is the adapter's
WIRING = ("LOOP-1", "LOOP-3", "LOOP-4", "RES-1", "RES-2", "RES-3", "FT-1", "FT-2", "FT-3",
          "DIST-1")
# ...except Ignite's own failure on a resume after an improving epoch's best save: the restored
# best Checkpoint removes a file the interrupted run already replaced (DiskSaver.remove raises)
STALE_REMOVE = ("RES-1", "RES-2", "RES-3")
# importing ignite warns from torch.jit internals on torch 2.13; nothing else is excused
TORCH_JIT_DEPRECATED = r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning"


@pytest.mark.parametrize(("selected", "world_size"), [
    (SELECTED, 1),
    (("DIST-1", "DIST-3"), 2),  # ignite.distributed joining the suite's 2-rank world
])
def test_ignite_adapter_gets_a_verdict_for_every_clause(
        tmp_path: Path, selected: tuple[str, ...], world_size: int) -> None:
    chosen = check_clauses(TARGET, selected, tmp_path, world_size=world_size,
                           framework="pytorch-ignite ")
    wired = {cid: c["evidence"] for cid, c in chosen.items()
             if cid in WIRING and c["verdict"] != "pass"
             and not (cid in STALE_REMOVE
                      and "DiskSaver.remove" in (c.get("framework_source") or ""))}
    assert not wired, f"the adapter's wiring of Ignite is broken: {wired}"
    if world_size == 1:
        # at its defaults Ignite saves no RNG state and handles no SIGTERM (the deterministic
        # remedy is verified by the matrix)
        for cid in ("RES-4", "CKPT-5"):
            assert chosen[cid]["verdict"] == "fail", (cid, chosen[cid]["evidence"])
            assert chosen[cid]["framework_source"].startswith("ignite/"), cid


def test_importing_the_adapter_does_not_import_ignite() -> None:
    code = ("import sys, trainspec.adapters.ignite as m; "
            "assert 'ignite' not in sys.modules, 'ignite imported'; "
            "print(m.IgniteAdapter().name)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ignite"


@pytest.mark.parametrize(("name", "role"), [
    ("best_model_3_score=0.5000.pt", "best"),
    ("best_model_0_score=-0.4000.pt", "best"),
    ("best_model_2_score=nan.pt", "best"),
    ("checkpoint_12.pt", "last"),
    ("epoch_checkpoint_12.pt", "epoch"),
    ("tmpa1b2c3d4", None),
    ("checkpoint_12.pt.tmp", None),
    ("best.pt", None),
])
def test_checkpoint_files_map_to_their_roles(name: str, role: str | None) -> None:
    assert file_role(name) == role


def test_progress_reads_zero_based_epochs_and_ignite_iterations() -> None:
    trainer_state = {"trainer": {"epoch_length": 6, "iteration": 18, "max_epochs": 5}}
    assert progress("checkpoint_18.pt", trainer_state) == (2, 18)
    assert progress("epoch_checkpoint_18.pt", trainer_state) == (2, 18)
    # the best file holds bare weights: the epoch comes from its name, no step exists
    weights = {"weight": torch.zeros(2, 2)}
    assert progress("best_model_3_score=0.5000.pt", weights) == (2, None)
    assert progress("best_model_0_score=0.1000.pt", weights) == (-1, None)
    assert progress("checkpoint_18.pt", {"model": weights}) == (None, None)


@pytest.mark.filterwarnings(TORCH_JIT_DEPRECATED)
def test_files_ignite_writes_are_described_by_role_epoch_and_step(tmp_path: Path) -> None:
    # 3 epochs of 6 batches; best at epoch 1; a periodic file every 2 (1-based) epochs
    s = make_scenario("describe", [0.3, 0.8, 0.5], cfg={"ckpt.every_n_epochs": 2})
    ctx = MemoryContext(tmp_path)
    adapter = IgniteAdapter()
    adapter.run(s, ctx)
    described = describe_ignite_files(tmp_path)
    assert adapter.describe_checkpoints(tmp_path) == described
    entries = {e.relpath: e for e in described}
    roles = {name: e.role for name, e in entries.items()}
    assert roles == {"best_model_2_score=0.8000.pt": "best", "checkpoint_18.pt": "last",
                     "epoch_checkpoint_12.pt": "epoch"}, roles
    last = entries["checkpoint_18.pt"]
    assert (last.epoch, last.step, last.error) == (2, 18, None)
    assert {"model", "optimizer", "lr_scheduler", "trainer", "best_checkpoint",
            "checkpointer"} <= set(last.keys)
    assert (entries["epoch_checkpoint_12.pt"].epoch, entries["epoch_checkpoint_12.pt"]
            .step) == (1, 12)
    best = entries["best_model_2_score=0.8000.pt"]
    assert (best.epoch, best.step, best.keys) == (1, None, ("bias", "weight"))
    # the records agree with the files: epoch 1 improved, and the end reports its weights
    vals = [r for r in ctx.records if isinstance(r, Validation)]
    assert [(v.epoch, v.improved) for v in vals] == [(0, True), (1, True), (2, False)]
    end = next(r for r in ctx.records if isinstance(r, RunEnd))
    assert end.best_file is not None
    assert end.best_file.epoch == 1
    assert end.best_model is not None
    assert end.best_model.keys() == vals[1].weights.keys()
    assert all(torch.equal(end.best_model[k], vals[1].weights[k]) for k in end.best_model)


@pytest.mark.filterwarnings(TORCH_JIT_DEPRECATED)
def test_ignite_runs_at_its_defaults_unless_a_remedy_is_named(tmp_path: Path) -> None:
    # create_supervised_trainer(deterministic=...) stays at Ignite's default unless the
    # deterministic remedy is named; then the trainer is Ignite's DeterministicEngine
    from ignite.engine import DeterministicEngine, create_supervised_trainer

    from trainspec.adapters.ignite.run import IgniteRun

    assert {r.name for r in IgniteAdapter().remedies()} == {"deterministic"}
    s = make_scenario("defaults", [0.1, 0.2])
    default = inspect.signature(create_supervised_trainer).parameters["deterministic"].default
    run = IgniteRun(s, MemoryContext(tmp_path))
    assert run.trainer_arguments().get("deterministic", default) is default is False
    run.build_loaders()
    run.build_trainer(total_steps=12)
    assert not isinstance(run.trainer, DeterministicEngine)
    on = IgniteRun(s, MemoryContext(tmp_path), frozenset({"deterministic"}))
    assert on.trainer_arguments()["deterministic"] is True
    on.build_loaders()
    on.build_trainer(total_steps=12)
    assert isinstance(on.trainer, DeterministicEngine)
    with pytest.raises(AdapterError, match=r"unknown remedies.*deterministic"):
        IgniteAdapter("determinism")
