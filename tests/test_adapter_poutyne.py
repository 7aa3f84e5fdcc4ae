"""The Poutyne adapter runs through ``trainspec check`` and every selected clause gets a verdict.

Whether Poutyne conforms is what the report says; these tests ask that the adapter works: the
run completes, no clause comes out ``error`` (an error means the adapter is broken), the clauses
that only need Poutyne wired as its docs say pass, the verdicts the adapter's own reports decide
are the ones Poutyne's code explains, and the files a ModelBundle writes are described under the
right roles and epochs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.adapter_runs import check_clauses
from trainspec.adapters.poutyne import REMEDIES, PoutyneAdapter
from trainspec.adapters.poutyne.files import (
    EPOCH_FILE,
    MODEL_FILE,
    PERIODIC_NAME,
    RESUME_FILES,
    bundle_epoch,
    describe_poutyne_files,
    file_role,
    name_epoch,
)
from trainspec.conformance.checks.common import make_scenario
from trainspec.conformance.run.memory import MemoryContext
from trainspec.conformance.run.records import RunEnd, Setup, TrainStart, Validation
from trainspec.errors import AdapterError

pytest.importorskip("poutyne")
pytest.importorskip("pandas")

TARGET = "trainspec.adapters.poutyne:PoutyneAdapter"
# LOOP-1 and LOOP-4 are wiring (epochs in order, one test pass after the loop); the finetune
# clauses need the weights loaded into a fresh bundle; BEST-3 and RES-1 read the adapter's
# file descriptions (no step in any Poutyne file); RES-2 compares the state the adapter records
# at an epoch's start (the LR one scheduler step behind after a resume); CKPT-2 the torn write
SELECTED = ("LOOP-1", "LOOP-4", "BEST-3", "FT-1", "FT-2", "FT-3", "FT-4", "RES-1", "RES-2",
            "CKPT-2")
WIRING = ("LOOP-1", "LOOP-4", "FT-1", "FT-2", "FT-3", "FT-4", "CKPT-2")
# each with the words of its evidence that only Poutyne's behaviour explains
POUTYNE_FAILS = {
    "BEST-3": "says train_step None",
    "RES-1": "train_step=None",
    "RES-2": "optimizer.param_groups[0].lr",
}
# ModelBundle warns when tensorboard is not installed (it logs there when it is), Poutyne's
# progress output when colorama is not, and pandas 3.1 of ModelBundle.test's
# DataFrame.drop(inplace=True); nothing else is excused
POUTYNE_WARNINGS = pytest.mark.filterwarnings(
    r"ignore:tensorboard does not seem to be installed:UserWarning",
    r"ignore:The colorama package was not imported:ImportWarning",
    r"ignore:The inplace keyword in DataFrame\.drop is deprecated")


def test_poutyne_adapter_gets_a_verdict_for_every_clause(tmp_path: Path) -> None:
    chosen = check_clauses(TARGET, SELECTED, tmp_path, framework="poutyne ")
    # wiring is judged on the hand-written checks: a generated run may reach Poutyne's own
    # crash of a test pass after all-NaN scores (get_best_epoch_stats' idxmax, BEST-4's
    # framework source), a fault of Poutyne, found or not as the draw's budget allows
    wired = {cid: c["evidence"] for cid, c in chosen.items() if cid in WIRING and any(
        ch["outcome"] not in ("passed", "n/a") for ch in c.get("checks", ())
        if not ch["name"].startswith("check_generated_runs_"))}
    assert all(any(not ch["name"].startswith("check_generated_runs_") for ch in
                   chosen[cid].get("checks", ())) for cid in WIRING), "no hand-written check ran"
    assert not wired, f"the adapter's wiring of Poutyne is broken: {wired}"
    for cid, words in POUTYNE_FAILS.items():
        assert chosen[cid]["verdict"] == "fail", (cid, chosen[cid]["evidence"])
        assert words in chosen[cid]["evidence"], (cid, chosen[cid]["evidence"])
        assert chosen[cid].get("framework_source", "").startswith("poutyne/"), cid


def test_importing_the_adapter_does_not_import_poutyne() -> None:
    code = ("import sys, trainspec.adapters.poutyne as m; "
            "assert 'poutyne' not in sys.modules, 'poutyne imported'; "
            "print(m.PoutyneAdapter().name)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "poutyne"


def test_unknown_remedies_are_refused() -> None:
    adapter = PoutyneAdapter()
    assert adapter.remedies() == REMEDIES == ()  # no documented switch known to fix a fail
    assert adapter.applied == frozenset()
    with pytest.raises(AdapterError, match="unknown remedies \\['keep_only_last_best'\\]"):
        PoutyneAdapter("keep_only_last_best")


def test_every_failing_clause_with_a_source_has_a_root_cause() -> None:
    adapter = PoutyneAdapter()
    caused = {c for cause in adapter.root_causes() for c in cause.clauses}
    assert set(adapter.framework_sources()) == caused
    assert all(cause.source.startswith("poutyne/") for cause in adapter.root_causes())


def test_file_names_are_modelbundles_own() -> None:
    from trainspec.adapters.poutyne.run import poutyne_module

    ModelBundle = poutyne_module().ModelBundle  # noqa: N806 (Poutyne's class)
    assert (ModelBundle.MODEL_CHECKPOINT_FILENAME, ModelBundle.OPTIMIZER_CHECKPOINT_FILENAME,
            ModelBundle.RANDOM_STATE_CHECKPOINT_FILENAME,
            ModelBundle.EPOCH_FILENAME) == RESUME_FILES
    assert file_role(ModelBundle.BEST_CHECKPOINT_FILENAME.format(epoch=3)) == "best"
    assert file_role(PERIODIC_NAME.format(epoch=4)) == "epoch"


@pytest.mark.parametrize(("name", "role", "epoch"), [
    ("checkpoint_epoch_1.ckpt", "best", 0),
    ("checkpoint_epoch_12.ckpt", "best", 11),
    ("epoch_2.ckpt", "epoch", 1),
    ("checkpoint_epoch_2.ckpt.tmp", None, None),
    ("epoch_2.ckpt.tmp", None, None),
    ("checkpoint.ckpt", None, None),  # the last checkpoint is the directory's files together
    ("lr_sched_0.lrsched", None, None),
    ("log.tsv", None, None),
])
def test_checkpoint_files_map_to_their_roles(name: str, role: str | None,
                                             epoch: int | None) -> None:
    assert file_role(name) == role
    assert name_epoch(name) == epoch


def test_last_epoch_is_read_zero_based(tmp_path: Path) -> None:
    assert bundle_epoch(tmp_path) is None
    (tmp_path / EPOCH_FILE).write_text("3\n")  # ModelBundle prints the one-based epoch
    assert bundle_epoch(tmp_path) == 2
    (tmp_path / EPOCH_FILE).write_text("")
    assert bundle_epoch(tmp_path) is None


@POUTYNE_WARNINGS
def test_files_a_bundle_writes_are_described_by_role_and_epoch(tmp_path: Path) -> None:
    # 3 epochs; best at epochs 0 and 1; a periodic file after (one-based) epoch 2
    s = make_scenario("describe", [0.3, 0.8, 0.5], cfg={"ckpt.every_n_epochs": 2})
    ctx = MemoryContext(tmp_path)
    adapter = PoutyneAdapter()
    adapter.run(s, ctx)
    described = describe_poutyne_files(tmp_path)
    assert adapter.describe_checkpoints(tmp_path) == described
    roles = {e.relpath: e.role for e in described if e.role is not None}
    assert roles == {"model_bundle": "last", "model_bundle/checkpoint_epoch_1.ckpt": "best",
                     "model_bundle/checkpoint_epoch_2.ckpt": "best",
                     "model_bundle/epoch_2.ckpt": "epoch"}, roles
    entries = {e.relpath: e for e in described}
    last = entries["model_bundle"]
    assert (last.epoch, last.step, last.error) == (2, None, None)
    assert set(last.keys) == {*RESUME_FILES, "lr_sched_0.lrsched"}
    assert last.holds == ("epoch", "model", "optimizer", "scheduler")
    best = entries["model_bundle/checkpoint_epoch_2.ckpt"]
    assert (best.epoch, best.step, best.keys) == (1, None, ("bias", "weight"))
    # the records agree with the files: epochs 0 and 1 improved, the end reports epoch 1's
    vals = [r for r in ctx.records if isinstance(r, Validation)]
    assert [(v.epoch, v.improved, v.stop) for v in vals] == [(0, True, False), (1, True, False),
                                                             (2, False, False)]
    starts = [r for r in ctx.records if isinstance(r, TrainStart)]
    assert [t.last_file_epoch for t in starts] == [None, 0, 1]
    end = next(r for r in ctx.records if isinstance(r, RunEnd))
    assert end.best_file is not None
    assert end.best_file.epoch == 1
    assert end.best_model is not None
    assert all(torch.equal(end.best_model[k], vals[1].weights[k]) for k in end.best_model)


@POUTYNE_WARNINGS
def test_a_resume_continues_the_bundle_a_finetune_loads_its_weights(tmp_path: Path) -> None:
    source = make_scenario("source", [0.3, 0.8, 0.5])
    adapter = PoutyneAdapter()
    adapter.run(source, MemoryContext(tmp_path / "a"))
    bundle = tmp_path / "a" / "model_bundle"
    longer = make_scenario("longer", [0.3, 0.8, 0.5, 0.4])
    resumed = MemoryContext(tmp_path / "a")
    adapter.run(longer.with_config(**{"ckpt.load_from": str(bundle), "ckpt.resume": True}),
                resumed)
    setup = next(r for r in resumed.records if isinstance(r, Setup))
    assert setup.epoch == 3  # ModelBundle's last.epoch said 3 (one-based): epoch 3 is next
    assert [r.epoch for r in resumed.records if isinstance(r, TrainStart)] == [3]
    tuned = MemoryContext(tmp_path / "b")
    adapter.run(longer.with_config(**{"ckpt.load_from": str(bundle), "ckpt.resume": False}),
                tuned)
    first = next(r for r in tuned.records if isinstance(r, TrainStart))
    saved = torch.load(bundle / MODEL_FILE, weights_only=True)
    assert first.epoch == 0
    assert all(torch.equal(first.state.weights[k], saved[k]) for k in saved)


@POUTYNE_WARNINGS
def test_two_runs_of_one_scenario_end_with_the_same_weights(tmp_path: Path) -> None:
    s = make_scenario("twice", [0.3, 0.8], cfg={"ckpt.enable": False, "test.enable": False})
    ends = []
    for run in ("a", "b"):
        ctx = MemoryContext(tmp_path / run)
        PoutyneAdapter().run(s, ctx)
        ends.append(next(r for r in ctx.records if isinstance(r, RunEnd)).final_weights)
    assert ends[0].keys() == ends[1].keys()
    assert all(torch.equal(ends[0][k], ends[1][k]) for k in ends[0])
