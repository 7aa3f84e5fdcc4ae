"""The skorch adapter runs through ``trainspec check`` and every selected clause gets a verdict.

Whether skorch conforms is what the report says; these tests ask that the adapter works: the run
completes, no clause comes out ``error`` (an error means the adapter is broken), the clauses
that only need skorch wired as its docs say pass, the failures are the ones skorch's own code
explains (each with its framework source), and the files skorch writes are described under the
right roles, epochs and steps.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.adapter_runs import check_clauses
from trainspec.adapters.skorch import REMEDIES, SkorchAdapter
from trainspec.adapters.skorch.files import (
    describe_skorch_files,
    file_role,
    history_steps,
    progress,
)
from trainspec.conformance.checks.chains import with_load
from trainspec.conformance.checks.common import make_scenario
from trainspec.conformance.run.memory import MemoryContext
from trainspec.conformance.run.records import (
    RunEnd,
    Setup,
    TestPass,
    TrainEnd,
    TrainStart,
    Validation,
)
from trainspec.errors import AdapterError

pytest.importorskip("skorch")

TARGET = "trainspec.adapters.skorch:SkorchAdapter"
# the clauses whose verdict the adapter's records decide, without the property-based ones
# (BEST-1, NAN-1, NAN-2, PAT-5: slow, and failing on the same comparison as NAN-3's source)
VERDICTS = {
    # these pass when skorch is wired as its docs say (EpochScoring's score_best, the best
    # Checkpoint, LoadInitState first, load_params then partial_fit); a fail is the adapter's
    "LOOP-1": "pass", "LOOP-4": "pass", "BEST-3": "pass", "BEST-4": "pass",
    "PAT-1": "pass", "PAT-2": "pass", "FT-1": "pass", "FT-2": "pass",
    "FT-3": "pass", "FT-4": "pass", "CKPT-3": "pass",
    # skorch's own behaviour, each named by the adapter's framework source
    # (BEST-2: no best weights with ckpt.enable=false; RES-1: from a periodic checkpoint,
    # which shares the newest history; both shown by generated runs)
    "BEST-2": "fail", "RES-1": "fail", "NAN-3": "fail", "RES-2": "fail", "RES-3": "fail",
    "RES-4": "fail", "RES-5": "fail",
    "CKPT-1": "fail", "CKPT-2": "fail", "CKPT-4": "fail", "CKPT-5": "fail",
    # the cases skorch can express: the default schedule (validate after every epoch) and
    # PAT-4's case without val.first (the others are noted as not run)
    "LOOP-2": "pass", "PAT-4": "pass",
    # keys skorch cannot express
    "LOOP-3": "n/a", "PAT-3": "n/a",
}


def test_skorch_adapter_gets_the_verdicts_its_wiring_decides(tmp_path: Path) -> None:
    chosen = check_clauses(TARGET, tuple(VERDICTS), tmp_path, framework="skorch ")
    got = {cid: c["verdict"] for cid, c in chosen.items()}
    assert got == VERDICTS, {cid: chosen[cid]["evidence"] for cid in got
                             if got[cid] != VERDICTS[cid]}
    sources = SkorchAdapter().framework_sources()
    for cid, c in chosen.items():
        if c["verdict"] == "fail":
            assert c.get("framework_source") == sources[cid], (cid, c)


def test_importing_the_adapter_does_not_import_skorch() -> None:
    code = ("import sys, trainspec.adapters.skorch as m; "
            "assert 'skorch' not in sys.modules, 'skorch imported'; "
            "print(m.SkorchAdapter().name)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "skorch"


def test_unknown_remedies_are_refused() -> None:
    adapter = SkorchAdapter()
    assert adapter.remedies() == REMEDIES == ()  # no documented switch known to fix a fail
    assert adapter.applied == frozenset()
    with pytest.raises(AdapterError, match=r"unknown remedies \['threshold_zero'\]"):
        SkorchAdapter("threshold_zero")


def test_every_failing_clause_with_a_source_has_a_root_cause() -> None:
    adapter = SkorchAdapter()
    caused = {c for cause in adapter.root_causes() for c in cause.clauses}
    assert set(adapter.framework_sources()) == caused
    assert all(cause.source.startswith("skorch/") for cause in adapter.root_causes())


@pytest.mark.parametrize(("name", "role"), [
    ("last", "last"),
    ("best", "best"),
    ("params_3.pt", "epoch"),
    ("params_12.pt", "epoch"),
    ("params.pt", None),
    ("optimizer_3.pt", None),
    ("history.json", None),
    ("epochs", None),
])
def test_checkpoints_map_to_their_roles(name: str, role: str | None) -> None:
    assert file_role(name) == role


def test_progress_reads_zero_based_epochs_and_training_batches() -> None:
    rows: list[object] = [
        {"epoch": 1, "train_batch_count": 6, "batches": [{"train_loss": 1.0}] * 6},
        {"epoch": 2, "train_batch_count": 6, "batches": [{"train_loss": 1.0}] * 6},
        # an epoch whose training is under way: its batches so far, validation ones aside
        {"epoch": 3, "batches": [{"train_loss": 1.0}] * 4 + [{"valid_loss": 1.0}]},
    ]
    assert history_steps(rows) == 16
    assert progress(rows) == (2, 16)
    assert progress(rows, upto=2) == (1, 12)
    assert progress(rows, upto=1) == (0, 6)
    assert progress([]) == (None, 0)


def _records(ctx: MemoryContext, kind: type) -> list[object]:
    return [r for r in ctx.records if isinstance(r, kind)]


def test_files_skorch_writes_are_described_by_role_epoch_and_step(tmp_path: Path) -> None:
    # 4 epochs of 6 batches; best at epoch 1; a periodic checkpoint every 2 epochs (0 and 2)
    s = make_scenario("describe", [0.3, 0.8, 0.5, 0.4], cfg={"ckpt.every_n_epochs": 2})
    ctx = MemoryContext(tmp_path)
    adapter = SkorchAdapter()
    adapter.run(s, ctx)
    described = describe_skorch_files(tmp_path)
    assert adapter.describe_checkpoints(tmp_path) == described
    roles = {e.relpath: e for e in described if e.role is not None}
    assert {k: e.role for k, e in roles.items()} == {
        "last": "last", "best": "best", "epochs/params_1.pt": "epoch",
        "epochs/params_3.pt": "epoch"}
    assert [(e.epoch, e.step, e.error) for e in roles.values()] == [
        (0, 6, None), (2, 18, None), (3, 24, None), (1, 12, None)]
    assert roles["last"].keys == ("criterion.pt", "history.json", "optimizer.pt", "params.pt")
    assert roles["last"].holds == ("epoch", "step", "model", "optimizer")
    # the records agree with the files: epoch 1 improved, and the end reports its weights
    vals = [v for v in _records(ctx, Validation) if isinstance(v, Validation)]
    assert [(v.epoch, v.improved, v.stop) for v in vals] == [
        (0, True, False), (1, True, False), (2, False, False), (3, False, False)]
    ends = [e for e in _records(ctx, TrainEnd) if isinstance(e, TrainEnd)]
    assert [(e.epoch, e.train_step, e.batches, e.optimizer_steps) for e in ends] == [
        (0, 6, 6, 6), (1, 12, 6, 6), (2, 18, 6, 6), (3, 24, 6, 6)]
    end = next(r for r in ctx.records if isinstance(r, RunEnd))
    assert end.best_file is not None
    assert (end.best_file.epoch, end.best_file.step) == (1, 12)
    assert end.best_model is not None
    assert all(torch.equal(end.best_model[k], vals[1].weights[k]) for k in vals[1].weights)
    test = next(r for r in ctx.records if isinstance(r, TestPass))
    assert all(torch.equal(test.weights[k], vals[1].weights[k]) for k in vals[1].weights)


def test_two_runs_of_a_scenario_give_the_same_weights(tmp_path: Path) -> None:
    s = make_scenario("twice", [0.3, 0.8], cfg={"ckpt.enable": False})
    finals = []
    for n in range(2):
        ctx = MemoryContext(tmp_path / str(n))
        SkorchAdapter().run(s, ctx)
        end = next(r for r in ctx.records if isinstance(r, RunEnd))
        finals.append(end.final_weights)
    assert finals[0].keys() == finals[1].keys()
    assert all(torch.equal(finals[0][k], finals[1][k]) for k in finals[0])


def test_a_resume_continues_from_the_last_folder_and_a_finetune_starts_afresh(
        tmp_path: Path) -> None:
    source = make_scenario("source", [0.3, 0.8])
    SkorchAdapter().run(source, MemoryContext(tmp_path))
    s = make_scenario("on", [0.3, 0.8, 0.5])
    resumed = MemoryContext(tmp_path)
    SkorchAdapter().run(with_load(s, str(tmp_path / "last"), resume=True), resumed)
    setup = next(r for r in resumed.records if isinstance(r, Setup))
    assert (setup.epoch, setup.train_step) == (2, 12)
    starts = [r for r in resumed.records if isinstance(r, TrainStart)]
    # skorch's fit runs max_epochs more epochs, numbered on from the loaded history
    assert [(t.epoch, t.train_step) for t in starts] == [(2, 12), (3, 18), (4, 24)]
    finetune = MemoryContext(tmp_path / "ft")
    SkorchAdapter().run(with_load(s, str(tmp_path / "last"), resume=False), finetune)
    first = next(r for r in finetune.records if isinstance(r, TrainStart))
    assert (first.epoch, first.train_step) == (0, 0)
    assert first.state.optimizer is not None
    assert first.state.optimizer["state"] == {}  # type: ignore[index]


def test_a_finetune_from_a_missing_checkpoint_raises_naming_it(tmp_path: Path) -> None:
    s = with_load(make_scenario("missing", [0.3]), str(tmp_path / "nowhere"), resume=False)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        SkorchAdapter().run(s, MemoryContext(tmp_path))
