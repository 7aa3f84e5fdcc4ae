"""The Keras adapter runs through ``trainspec check`` and every selected clause gets a verdict.

Whether Keras conforms is what the report says; these tests ask that the adapter works (the run
completes, no clause comes out ``error``), that it reads Keras's own files right (roles, epoch
from BackupAndRestore's metadata, step from the stored optimizer, nothing unpickled), and that
its events carry what Keras decided.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TypeVar

import pytest
import torch

from tests.adapter_runs import check_clauses
from trainspec.conformance.checks.common import make_scenario
from trainspec.conformance.run.memory import MemoryContext
from trainspec.conformance.run.records import Record, RunEnd, TestPass, Validation
from trainspec.errors import AdapterError

# the adapter runs Keras on its torch backend (Keras's own default, tensorflow, is not installed)
os.environ.setdefault("KERAS_BACKEND", "torch")
pytest.importorskip("keras")

TARGET = "trainspec.adapters.keras:KerasAdapter"
R = TypeVar("R", bound=Record)
# keras 3.15 turns its torch tensors and variables into numpy arrays with np.array(x), and
# numpy 2 warns that their __array__ lacks a `copy` keyword (keras/src/backend/torch/core.py,
# keras/src/backend/common/variables.py)
NUMPY_COPY = ("ignore:__array__ implementation doesn't accept a copy keyword"
              r":DeprecationWarning:keras\.src\.backend\.")


@pytest.mark.parametrize("selected", [
    ("LOOP", "BEST-3", "BEST-4", "RES", "FT", "CKPT", "DBG"),  # files, resume, finetune, debug
])
def test_keras_adapter_gets_a_verdict_for_every_clause(tmp_path: Path,
                                                       selected: tuple[str, ...]) -> None:
    chosen = check_clauses(TARGET, selected, tmp_path, framework="keras ")
    # BackupAndRestore keeps no RNG state and fit handles no SIGTERM: judged, and failed
    for cid in ("RES-4", "CKPT-5"):
        assert chosen[cid]["verdict"] == "fail", (cid, chosen[cid]["evidence"])
        assert chosen[cid]["framework_source"].startswith("keras/"), cid


def test_importing_the_adapter_does_not_import_keras() -> None:
    code = ("import sys, trainspec.adapters.keras as m; "
            "assert 'keras' not in sys.modules and 'h5py' not in sys.modules; "
            "print(m.KerasAdapter().name)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "keras"


def test_keras_declares_no_remedy_and_refuses_any_name() -> None:
    # Keras has no documented switch, off by default, that should fix a failing clause (the
    # candidates and why each was left out: docs/frameworks/keras.md)
    from trainspec.adapters.keras import KerasAdapter

    adapter = KerasAdapter()
    assert adapter.remedies() == ()
    assert adapter.applied == frozenset()
    with pytest.raises(AdapterError, match=r"unknown remedies \['initial_value_threshold'\]"):
        KerasAdapter("initial_value_threshold")


def _records(ctx: MemoryContext, kind: type[R]) -> list[R]:
    return [r for r in ctx.records if isinstance(r, kind)]


@pytest.mark.filterwarnings(NUMPY_COPY)
def test_a_run_reports_keras_decisions_and_describes_its_files(tmp_path: Path) -> None:
    from trainspec.adapters.keras import KerasAdapter

    adapter = KerasAdapter()
    # 0.5, a tie, better: ModelCheckpoint saves best.keras at epochs 0 and 2 only
    s = make_scenario("unit", [0.5, 0.5, 0.75], cfg={"ckpt.every_n_epochs": 1})
    ctx = MemoryContext(tmp_path)
    adapter.run(s, ctx)

    vals = _records(ctx, Validation)
    assert [(v.epoch, v.improved, v.stop) for v in vals] == [
        (0, True, False), (1, False, False), (2, True, False)]
    end = _records(ctx, RunEnd)[0]
    assert end.train_step == 18  # 24 samples in batches of 4, 3 epochs
    best_model, validated = end.best_model, vals[2].weights
    assert best_model is not None
    assert best_model.keys() == validated.keys() == {"linear/kernel", "linear/bias"}
    assert all(torch.equal(best_model[k], validated[k]) for k in best_model)
    # the test pass ran on the best model ModelCheckpoint saved
    test = _records(ctx, TestPass)[0]
    assert all(torch.equal(test.weights[k], validated[k]) for k in validated)

    from trainspec.adapters.keras.files import describe_keras_files

    described = describe_keras_files(tmp_path)
    assert adapter.describe_checkpoints(tmp_path) == described
    files = {f.relpath: f for f in described}
    assert {k: f.role for k, f in files.items()} == {
        "backup/latest.weights.h5": "last", "backup/training_metadata.json": None,
        "best.keras": "best", "epoch01.keras": "epoch", "epoch02.keras": "epoch",
        "epoch03.keras": "epoch"}
    last = files["backup/latest.weights.h5"]
    assert (last.epoch, last.step, last.error) == (2, 18, None)
    assert last.keys == ("layers", "optimizer", "vars")
    # in the spec's terms: no run id, no run config (CKPT-1 judges these names)
    assert last.holds == ("epoch", "step", "model", "optimizer")
    best = files["best.keras"]
    # a .keras archive stores no epoch; the optimizer's iteration counter is the step
    assert (best.epoch, best.step, best.error) == (None, 18, None)
    assert best.keys == ("config.json", "metadata.json", "model.weights.h5")
    assert best.holds == ("step", "model", "optimizer")
    assert files["epoch01.keras"].step == 6


class _RunsCode:
    """Unpickling this object calls os.mkdir: a stand-in for any code a pickle can run."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (self.marker,))


def test_describe_reads_damaged_and_foreign_files_without_running_them(tmp_path: Path) -> None:
    from trainspec.adapters.keras.files import describe_keras_files

    marker = tmp_path / "code-ran"
    (tmp_path / "backup").mkdir()
    # a torch pickle is a zip archive too: under Keras's names it must be refused, not loaded
    torch.save({"payload": _RunsCode(str(marker))}, tmp_path / "best.keras")
    torch.save({"payload": _RunsCode(str(marker))}, tmp_path / "backup" / "latest.weights.h5")
    (tmp_path / "epoch01.keras").write_bytes(b"PK\x03\x04 truncated")
    files = {f.relpath: f for f in describe_keras_files(tmp_path)}
    assert not marker.exists()
    assert files["best.keras"].role == "best"
    assert "model.weights.h5" in (files["best.keras"].error or "")
    assert files["backup/latest.weights.h5"].role == "last"
    assert files["backup/latest.weights.h5"].error
    assert (files["epoch01.keras"].error or "").startswith("BadZipFile")
