"""The ready audit callback for skorch: real tiny fits configured as skorch's docs show
(``EpochScoring``, ``Checkpoint(monitor="<name>_best")``, ``EarlyStopping``, ``LoadInitState``
for a resume), their logs, and the audit's verdicts held to ``trainspec check``'s matrix."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from trainspec.conformance.audit import audit
from trainspec.conformance.spec.results import Report

skorch = pytest.importorskip("skorch")

ROOT = Path(__file__).resolve().parents[1]

# scores of the validations after epochs 0, 1, ...; maximized, EarlyStopping(patience=2):
# an improvement, a tie, an improvement after a counted miss, a NaN, a worse value (the
# second miss: the stop), and what the stop never reaches
SCRIPTED = [0.5, 0.5, 0.7, math.nan, 0.6, 0.9, 0.9, 0.9]
INFINITE = [math.inf, 0.5]  # +inf first, maximized: EpochScoring takes it as the best

# what the audit says of each run, clause -> (verdict, why); every clause not listed is n/a
EXPECTED: dict[str, dict[str, tuple[str, str]]] = {
    "scripted": {
        "LOOP-1": ("pass", "epochs 0 to 4 trained once each, in order; the early stop ended it"),
        "LOOP-2": ("pass", "fit validates after every epoch and never before training"),
        "LOOP-4": ("pass", "test_pass=True: one log_test_pass after fit"),
        "BEST-1": ("pass", "score_best (event_cp) for 0.5 and 0.7, not the tie, not the NaN"),
        "BEST-2": ("pass", "best/params.pt holds the weights validated after epoch 2"),
        "BEST-4": ("pass", "the test pass scored best/params.pt, loaded as skorch's docs do"),
        "NAN-1": ("pass", "the NaN after epoch 3 was not a new best"),
        "NAN-3": ("pass", "the NaN counted as a miss: the stop came after epoch 4"),
        "PAT-1": ("pass", "stopped after the second miss in a row (tie refilled by 0.7)"),
        "PAT-2": ("pass", "0.7 after the tie refilled patience"),
        "PAT-5": ("pass", "every improvement and stop verdict is the oracle's"),
    },
    "infinite": {
        "LOOP-1": ("pass", "both epochs trained, in order"),
        "LOOP-2": ("pass", "a validation after each epoch"),
        "BEST-1": ("pass", "no finite score was misjudged: the misjudged ones are NAN-1/2's"),
        "BEST-2": ("fail", "best/params.pt holds +inf's weights, not 0.5's"),
        "NAN-1": ("fail", "+inf was taken as a new best"),
        "NAN-2": ("fail", "0.5, the first finite score, was not a new best after +inf"),
        "PAT-4": ("pass", "no EarlyStopping: the run trained every epoch"),
        "PAT-5": ("pass", "the verdicts differ from +inf's on: NAN-1/NAN-2's fault, charged "
                          "there"),
    },
}

# where the audit of a run disagrees with the matrix, explained against skorch's source
# (adapters/skorch/causes.py): the run did not meet the situation that makes the check fail
_INF = ("the check fails on an infinite score (ScoringBase._is_best_score and "
        "EarlyStopping._is_score_improved compare with no finiteness check); this run has "
        "none: its NaN is never a best (NaN > best is False) and adds a miss")
_NO_BEST = ("the check also fails with ckpt.enable=false, where skorch keeps no best weights "
            "in memory (EpochScoring records only the flag); this run keeps a best Checkpoint")
NOT_MET: dict[str, dict[str, str]] = {
    "scripted": {
        "BEST-1": f"{_INF}; {_NO_BEST}", "BEST-2": _NO_BEST,
        "NAN-1": _INF, "NAN-3": _INF,
    },
    "infinite": {
        "BEST-1": "the check fails on -inf at the first validation, minimizing; the audit "
                  "files a misjudged non-finite score under NAN-1/NAN-2, so BEST-1 fails only "
                  f"on a misjudged finite score, which EpochScoring never makes; {_NO_BEST}",
    },
}
# the resumed run: RES-3 fails as in the matrix (EarlyStopping.on_train_begin resets misses_
# and dynamic_threshold_); RES-1 passes where the matrix fails, since the check's fail needs a
# resume from an older periodic checkpoint, whose history.json (never formatted with the
# epoch) is the newest one's; this resume loads the last Checkpoint, its own history
RESUMED = {"RES-1": ("pass", "fail"), "RES-3": ("fail", "fail")}  # (audit, matrix)


def _matrix() -> dict[str, str]:
    data = json.loads((ROOT / "docs" / "matrix.json").read_text())
    return {c["id"]: c["verdict"] for c in data["targets"]["skorch"]["clauses"]}


def _data(seed: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    gen = np.random.default_rng(seed)
    return gen.standard_normal((16, 4)).astype(np.float32), gen.integers(0, 2, 16)


def _net(run: Path, scores: Sequence[float], *, max_epochs: int, patience: int | None,
         audited: bool = True, resume: bool = False, run_id: str = "fresh",
         test_pass: bool | None = None) -> Any:
    """A skorch net as its docs show one: the scripted EpochScoring, the best Checkpoint on
    its ``score_best``, a last Checkpoint, EarlyStopping; the audit callback first."""
    from skorch.callbacks import (  # type: ignore[import-untyped]
        Checkpoint,
        EarlyStopping,
        EpochScoring,
        LoadInitState,
    )
    from skorch.dataset import Dataset  # type: ignore[import-untyped]
    from skorch.helper import predefined_split  # type: ignore[import-untyped]

    from trainspec.adapters.skorch.audit import audit_callback

    def scripted(net: Any, x: object = None, y: object = None) -> float:
        return scores[len(net.history) - 1]

    last = Checkpoint(monitor=None, dirname=str(run / "last"), event_name="event_last")
    callbacks: list[Any] = [
        ("score", EpochScoring(scripted, lower_is_better=False, name="score")),
        ("best", Checkpoint(monitor="score_best", dirname=str(run / "best"))),
        ("last", last)]
    if resume:  # first: EpochScoring reads its best score from the loaded history
        callbacks.insert(0, ("load", LoadInitState(last)))
    if patience is not None:
        callbacks.append(("stop", EarlyStopping(monitor="score", patience=patience,
                                                lower_is_better=False)))
    if audited:
        callbacks.insert(0, ("audit", audit_callback(run, run_id=run_id, test_pass=test_pass)))
    torch.manual_seed(0)
    return skorch.NeuralNetClassifier(
        torch.nn.Linear(4, 2), criterion=torch.nn.CrossEntropyLoss, optimizer=torch.optim.SGD,
        lr=0.1, max_epochs=max_epochs, batch_size=4,
        train_split=predefined_split(Dataset(*_data(1))), callbacks=callbacks, verbose=0)


def _fit(run: Path, scores: Sequence[float], **options: Any) -> Any:
    """Fit the net; with ``test_pass``, then test as skorch's docs do: the best Checkpoint
    loaded (``load_params(checkpoint=...)``), then ``predict``."""
    net = _net(run, scores, **options)
    net.fit(*_data(0))
    if options.get("test_pass"):
        net.load_params(checkpoint=dict(net.callbacks_)["best"])
        if options.get("audited", True):
            dict(net.callbacks_)["audit"].log_test_pass(net)
        net.predict(_data(2)[0])
    return net


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("scripted")
    _fit(run, SCRIPTED, max_epochs=len(SCRIPTED), patience=2, test_pass=True)
    return run


def _assert_verdicts(report: Report, expected: dict[str, tuple[str, str]]) -> None:
    for clause in report.clauses:
        want = expected.get(clause.id, ("n/a", "not shown by this run"))[0]
        assert clause.verdict == want, (clause.id, clause.verdict, clause.evidence)


def test_a_scripted_run_is_judged_clause_by_clause(scripted_run: Path) -> None:
    report = audit([scripted_run])
    _assert_verdicts(report, EXPECTED["scripted"])
    assert "0.5, 0.5, 0.7, nan, 0.6" in report.clause("PAT-5").evidence
    assert report.conformant


def test_the_audit_agrees_with_trainspec_check() -> None:
    matrix = _matrix()
    for run, expected in EXPECTED.items():
        for clause, (verdict, why) in expected.items():
            if clause in NOT_MET[run]:  # explained above against skorch's source
                assert matrix[clause] != verdict, (clause, "agrees now: drop it from NOT_MET")
            else:
                assert matrix[clause] == verdict, (run, clause, verdict, why)
    for clause, (verdict, published) in RESUMED.items():
        assert matrix[clause] == published, clause
        assert verdict == published or clause == "RES-1"


def test_an_infinite_score_shows_the_fails_check_reports(tmp_path: Path) -> None:
    _fit(tmp_path, INFINITE, max_epochs=len(INFINITE), patience=None)
    report = audit([tmp_path])
    _assert_verdicts(report, EXPECTED["infinite"])
    assert "scored inf and was taken as an improvement" in report.clause("NAN-1").evidence
    assert not report.conformant


def test_the_log_holds_the_nets_configuration(scripted_run: Path) -> None:
    logs = sorted((scripted_run / "trainspec-audit").glob("*.rank0.jsonl"))
    assert [p.name for p in logs] == ["fresh.rank0.jsonl"]
    lines = [json.loads(line) for line in logs[0].read_text().splitlines()]
    header = lines[0]
    assert header["trainer"] == "skorch.classifier.NeuralNetClassifier"
    assert header["resumed_from"] is None
    assert header["config"] == {
        "num_epochs": 8, "val_first": False, "val_every_n_epochs": 1, "minimize": False,
        "patience": 2, "has_patience": True, "start_patience": None, "test_enable": True,
        "ckpt_enable": None, "save_last": None, "ckpt_every_n_epochs": None, "debug": None}
    vals = [e for e in lines if e.get("ev") == "val"]
    # the stop is read where EarlyStopping raised: the epoch's callbacks after it never ran
    assert [(v["epoch"], v["score"], v["improved"], v["stop"]) for v in vals] == [
        (0, 0.5, True, False), (1, 0.5, False, False), (2, 0.7, True, False),
        (3, "NaN", False, False), (4, 0.6, False, True)]
    # four batches of four, one optimizer step each: the batches skorch's history records
    ends = [(e["train_step"], e["optimizer_steps"]) for e in lines if e.get("ev") == "train_end"]
    assert ends == [(4, 4), (8, 4), (12, 4), (16, 4), (20, 4)]
    # the end of training, then the test pass on the best weights, then the close
    assert [e["ev"] for e in lines[-4:]] == ["final", "end", "test", "close"]
    assert lines[-2]["weights"] == vals[2]["weights"] != lines[-4]["weights"]


def test_the_callback_changes_nothing_the_run_does(tmp_path: Path) -> None:
    runs = {}
    for audited in (False, True):
        folder = tmp_path / str(audited)
        net = _fit(folder, SCRIPTED, max_epochs=len(SCRIPTED), patience=2, audited=audited)
        runs[audited] = ([(row["epoch"], row["score"], row["score_best"])
                          for row in net.history],
                         sorted(p.name for p in folder.iterdir()),
                         {k: v.clone() for k, v in net.module_.state_dict().items()})
    (plain_rows, plain_files, plain_weights), (rows, files, weights) = runs[False], runs[True]
    assert len(rows) == 5  # the same early stop, the same scores (NaN as text)
    assert str(rows) == str(plain_rows)
    assert files == [*plain_files, "trainspec-audit"] == ["best", "last", "trainspec-audit"]
    assert all(torch.equal(weights[k], plain_weights[k]) for k in plain_weights)


def test_a_resumed_fit_is_judged_across_its_launches(tmp_path: Path) -> None:
    """LoadInitState resumes from the last Checkpoint: launch 1 trains epochs 0 and 1 (0.5,
    then a miss), launch 2 epochs 2 and 3, where the first is a second miss: the oracle's
    stop, which EarlyStopping, starting afresh on every fit, does not make (RES-3)."""
    scores = [0.5, 0.4, 0.3, 0.2]
    _fit(tmp_path, scores, max_epochs=2, patience=2, run_id="first")
    _fit(tmp_path, scores, max_epochs=2, patience=2, run_id="second", resume=True)
    second = json.loads((tmp_path / "trainspec-audit" / "second.rank0.jsonl").read_text()
                        .splitlines()[0])
    assert second["resumed_from"] == {"epoch": 1, "train_step": 8, "run_id": None,
                                      "path": str(tmp_path / "last")}
    assert second["config"]["num_epochs"] == 4  # max_epochs more after the loaded history
    report = audit([tmp_path])
    verdicts = {c.id: c.verdict for c in report.clauses}
    assert {c: verdicts[c] for c in RESUMED} == {c: v[0] for c, v in RESUMED.items()}, \
        report.clause("RES-3").evidence
    assert "the validation after epoch 2 scored 0.3: improved=False, stop=False" in \
        report.clause("RES-3").evidence
    assert report.clause("LOOP-1").evidence.startswith("4 epoch(s) trained in order, each "
                                                       "once, over 2 launch(es)")


def test_the_callback_clones_as_a_skorch_callback(tmp_path: Path) -> None:
    """Its arguments are its parameters and its state ends in ``_``: a fitted net clones
    (sklearn.clone, as a grid search does) with the callback as it was given."""
    from sklearn.base import clone  # type: ignore[import-untyped]

    net = _fit(tmp_path, INFINITE, max_epochs=1, patience=None)
    cb = dict(net.callbacks)["audit"]
    assert cb.get_params() == {"run_dir": tmp_path, "run_id": "fresh", "monitor": None,
                               "checkpoint": None, "early_stopping": None,
                               "test_pass": None, "resumed_from": None}
    copy = dict(clone(net).callbacks)["audit"]
    assert copy is not cb
    assert copy.get_params() == cb.get_params()


def test_importing_the_audit_callback_does_not_import_skorch() -> None:
    code = ("import sys, trainspec.adapters.skorch.audit as m; "
            "assert 'skorch' not in sys.modules; print(m.audit_callback.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "audit_callback"
