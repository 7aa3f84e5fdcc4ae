"""The ready audit callback for Poutyne: real tiny runs configured as Poutyne's docs show
(``ModelCheckpoint(save_best_only=True)``, ``EarlyStopping``, ``ModelBundle`` for a resume),
their logs, and the audit's verdicts held to ``trainspec check``'s published matrix."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainspec.conformance.audit import audit
from trainspec.conformance.spec.results import Report

pt = pytest.importorskip("poutyne")
Metric: Any = pt.Metric
Callback: Any = pt.Callback

ROOT = Path(__file__).resolve().parents[1]
MONITOR = "val_score"  # the scripted epoch metric "score", as Poutyne logs it for validation

# scores of the validations after epochs 0, 1, ...; maximized, EarlyStopping(patience=2):
# an improvement, a tie, an improvement after a counted miss, a NaN, a worse value (the
# second miss: the stop), and what the stop never reaches
SCRIPTED = [0.5, 0.5, 0.7, math.nan, 0.6, 0.9, 0.9, 0.9]
INFINITE = [math.inf, 0.5]  # +inf first, maximized: Poutyne takes it as its best

# what the audit says of each run, clause -> (verdict, why); every clause not listed is n/a
EXPECTED: dict[str, dict[str, tuple[str, str]]] = {
    "scripted": {
        "LOOP-1": ("pass", "epochs 0 to 4 trained once each, in order; the early stop ended it"),
        "LOOP-2": ("pass", "fit validates after every epoch and never before training"),
        "LOOP-4": ("pass", "test_pass=True: one evaluate_generator after fit"),
        "BEST-1": ("pass", "ModelCheckpoint took 0.5 and 0.7, not the tie, not the NaN"),
        "BEST-2": ("pass", "the best file holds the weights validated after epoch 2"),
        "BEST-4": ("pass", "restore_best put epoch 2's weights back before the test pass"),
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
        "BEST-2": ("fail", "the best file holds +inf's weights, not 0.5's"),
        "NAN-1": ("fail", "+inf was taken as a new best"),
        "NAN-2": ("fail", "0.5, the first finite score, was not a new best after +inf"),
        "PAT-4": ("pass", "no EarlyStopping: the run trained every epoch"),
        "PAT-5": ("pass", "the verdicts differ from +inf's on: NAN-1/NAN-2's fault, charged there"),
    },
}

# where the audit of a run disagrees with the matrix, explained against Poutyne's source
# (adapters/poutyne/causes.py): the run did not meet the situation that makes the check fail
_INF = ("the check fails on an infinite score (PeriodicSaveCallback.on_epoch_end and "
        "EarlyStopping.on_epoch_end compare with no finiteness check); this run has none: its "
        "NaN is never a best (NaN > best is False) and adds a miss")
NOT_MET: dict[str, dict[str, str]] = {
    "scripted": {
        "BEST-4": "the check fails where every score is NaN: ModelBundle.test's lookup of the "
                  "best epoch in log.tsv raises (pandas idxmax), so no test runs; this run "
                  "has a finite best and tests with evaluate_generator",
        "NAN-1": _INF, "NAN-3": _INF,
    },
    "infinite": {
        "BEST-2": "the check's run has no infinite score; here +inf, Poutyne's best (NAN-1's "
                  "cause), holds the best weights where the oracle's best is 0.5",
    },
}


def _matrix() -> dict[str, str]:
    data = json.loads((ROOT / "docs" / "matrix.json").read_text())
    return {c["id"]: c["verdict"] for c in data["targets"]["poutyne"]["clauses"]}


class _Scripted(Metric):  # type: ignore[misc]
    """The epoch metric ``score``: the script's value for the epoch under way."""

    def __init__(self, scores: Sequence[float]) -> None:
        super().__init__()
        self.scores, self.epoch = list(scores), 0

    def update(self, y_pred: object, y_true: object) -> None:
        return None

    def compute(self) -> float:
        return self.scores[self.epoch]

    def reset(self) -> None:
        return None


class _Follow(Callback):  # type: ignore[misc]
    """Tells the scripted metric which epoch is under way (Poutyne counts from 1)."""

    def __init__(self, metric: _Scripted) -> None:
        super().__init__()
        self.metric = metric

    def on_epoch_begin(self, epoch_number: int, logs: object) -> None:
        self.metric.epoch = epoch_number - 1


def _loaders() -> tuple[DataLoader[Any], DataLoader[Any]]:
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 4, generator=gen), torch.randint(0, 2, (16,), generator=gen)
    data = TensorDataset(x, y)
    return DataLoader(data, batch_size=4), DataLoader(data, batch_size=8)


def _fit(run: Path, scores: Sequence[float], *, epochs: int, patience: int | None,
         audited: bool = True, test_pass: bool | None = None
         ) -> tuple[Any, list[dict[str, Any]]]:
    """A Poutyne fit as its docs show one, with the audit callback first among the job's,
    and a test pass after it with ``test_pass``: the model and Poutyne's epoch logs."""
    from trainspec.adapters.poutyne.audit import audit_callback

    torch.manual_seed(0)
    metric = _Scripted(scores)
    model = pt.Model(torch.nn.Linear(4, 2), "sgd", "cross_entropy",
                     epoch_metrics=[("score", metric)])
    checkpoint = pt.ModelCheckpoint(str(run / "best_{epoch}.ckpt"), monitor=MONITOR,
                                    mode="max", save_best_only=True, restore_best=True,
                                    keep_only_last_best=True)
    callbacks = [_Follow(metric), checkpoint]
    if patience is not None:
        callbacks.append(pt.EarlyStopping(monitor=MONITOR, mode="max", patience=patience))
    audit = audit_callback(run, run_id="fresh", test_pass=test_pass)
    if audited:
        callbacks.insert(0, audit)
    train, valid = _loaders()
    history = model.fit_generator(train, valid, epochs=epochs, callbacks=callbacks,
                                  verbose=False)
    if test_pass:  # restore_best put the best weights back: the test pass scores them
        model.evaluate_generator(valid, callbacks=[audit] if audited else [], verbose=False)
    return model, history


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("scripted")
    _fit(run, SCRIPTED, epochs=len(SCRIPTED), patience=2, test_pass=True)
    return run


def _assert_verdicts(report: Report, expected: dict[str, tuple[str, str]]) -> None:
    for clause in report.clauses:
        want = expected.get(clause.id, ("n/a", "not shown by this run"))[0]
        assert clause.verdict == want, (clause.id, clause.verdict, clause.evidence)


def _assert_agrees_with_check(run: str) -> None:
    matrix = _matrix()
    for clause, (verdict, why) in EXPECTED[run].items():
        if clause in NOT_MET[run]:  # explained above against Poutyne's source
            assert matrix[clause] != verdict, (clause, "agrees now: drop it from NOT_MET")
        else:
            assert matrix[clause] == verdict, (clause, verdict, why)


def test_a_scripted_run_is_judged_clause_by_clause(scripted_run: Path) -> None:
    report = audit([scripted_run])
    _assert_verdicts(report, EXPECTED["scripted"])
    assert "0.5, 0.5, 0.7, nan, 0.6" in report.clause("PAT-5").evidence
    assert report.conformant


def test_the_audit_agrees_with_trainspec_check() -> None:
    for run in EXPECTED:
        _assert_agrees_with_check(run)


def test_an_infinite_score_shows_the_fails_check_reports(tmp_path: Path) -> None:
    _fit(tmp_path, INFINITE, epochs=len(INFINITE), patience=None)
    report = audit([tmp_path])
    _assert_verdicts(report, EXPECTED["infinite"])
    assert "scored inf and was taken as an improvement" in report.clause("NAN-1").evidence
    assert not report.conformant


def test_the_log_holds_the_jobs_configuration(scripted_run: Path) -> None:
    logs = sorted((scripted_run / "trainspec-audit").glob("*.rank0.jsonl"))
    assert [p.name for p in logs] == ["fresh.rank0.jsonl"]
    lines = [json.loads(line) for line in logs[0].read_text().splitlines()]
    header = lines[0]
    assert header["trainer"] == "poutyne.framework.model.Model"
    assert header["resumed_from"] is None
    assert header["config"] == {
        "num_epochs": 8, "val_first": False, "val_every_n_epochs": 1, "minimize": False,
        "patience": 2, "has_patience": True, "start_patience": None, "test_enable": True,
        "ckpt_enable": None, "save_last": None, "ckpt_every_n_epochs": None, "debug": None}
    vals = [e for e in lines if e.get("ev") == "val"]
    assert [(v["epoch"], v["score"], v["improved"], v["stop"]) for v in vals] == [
        (0, 0.5, True, False), (1, 0.5, False, False), (2, 0.7, True, False),
        (3, "NaN", False, False), (4, 0.6, False, True)]
    # four batches of four, one optimizer step each: the steps Poutyne took
    assert [e["train_step"] for e in lines if e.get("ev") == "train_end"] == [4, 8, 12, 16, 20]
    # the end of training, then the test pass on the best weights, then the close
    assert [e["ev"] for e in lines[-4:]] == ["final", "end", "test", "close"]
    assert lines[-2]["weights"] == vals[2]["weights"] != lines[-4]["weights"]


def test_the_callback_changes_nothing_the_run_does(tmp_path: Path) -> None:
    runs = {}
    for audited in (False, True):
        folder = tmp_path / str(audited)
        folder.mkdir()
        model, history = _fit(folder, SCRIPTED, epochs=len(SCRIPTED), patience=2,
                              audited=audited, test_pass=True)
        files = sorted(p.name for p in folder.iterdir())
        runs[audited] = ([(h["epoch"], h[MONITOR]) for h in history], files,
                         {k: v.clone() for k, v in model.network.state_dict().items()})
    (plain_epochs, plain_files, plain_weights), (epochs, files, weights) = runs[False], \
        runs[True]
    assert len(epochs) == 5  # the same early stop, the same scores (NaN as text)
    assert str(epochs) == str(plain_epochs)
    assert files == [*plain_files, "trainspec-audit"] == ["best_3.ckpt", "trainspec-audit"]
    assert all(torch.equal(weights[k], plain_weights[k]) for k in plain_weights)


def test_a_metric_no_callback_judges_gets_no_verdicts(tmp_path: Path) -> None:
    """monitor= names val_loss, which neither ModelCheckpoint nor EarlyStopping reads: its
    scores are logged, with no improvement verdict, no mode and no patience to judge them."""
    from trainspec.adapters.poutyne.audit import audit_callback

    torch.manual_seed(0)
    model = pt.Model(torch.nn.Linear(4, 2), "sgd", "cross_entropy", batch_metrics=["accuracy"])
    train, valid = _loaders()
    model.fit_generator(train, valid, epochs=2, verbose=False, callbacks=[
        pt.ModelCheckpoint(str(tmp_path / "best.ckpt"), monitor="val_acc", mode="max",
                           save_best_only=True),
        audit_callback(tmp_path, run_id="loss", monitor="val_loss")])
    lines = [json.loads(line) for line in
             (tmp_path / "trainspec-audit" / "loss.rank0.jsonl").read_text().splitlines()]
    config = lines[0]["config"]
    assert (config["minimize"], config["patience"], config["has_patience"]) == \
        (None, None, False)
    vals = [e for e in lines if e.get("ev") == "val"]
    assert [v["improved"] for v in vals] == [None, None]
    assert all(isinstance(v["score"], float) and v["score"] > 0 for v in vals)  # the loss
    assert audit([tmp_path]).clause("BEST-1").verdict == "n/a"


def test_a_resumed_bundle_is_judged_across_its_launches(tmp_path: Path) -> None:
    """ModelBundle resumes in its own folder: launch 1 trains epochs 0 and 1 (0.5, then a
    miss), launch 2 resumes at epoch 2, where a second miss is the oracle's stop; Poutyne's
    EarlyStopping starts afresh on every train call (RES-3) and no step is saved (RES-1)."""
    from trainspec.adapters.poutyne.audit import audit_callback

    scores = [0.5, 0.4, 0.3, 0.2]
    for launch, epochs in (("first", 2), ("second", 4)):
        torch.manual_seed(0)
        metric = _Scripted(scores)
        bundle = pt.ModelBundle.from_network(
            str(tmp_path), torch.nn.Linear(4, 2), optimizer="sgd",
            loss_function="cross_entropy", epoch_metrics=[("score", metric)],
            monitor_metric=MONITOR, monitor_mode="max")
        train, valid = _loaders()
        bundle.train(train, valid, epochs=epochs, verbose=False, disable_tensorboard=True,
                     callbacks=[
            _Follow(metric), pt.EarlyStopping(monitor=MONITOR, mode="max", patience=2),
            audit_callback(tmp_path, run_id=launch)])
    logs = sorted((tmp_path / "trainspec-audit").glob("*.jsonl"))
    resumed = json.loads(logs[1].read_text().splitlines()[0])["resumed_from"]
    assert resumed == {"epoch": 1, "train_step": None, "run_id": None, "path": str(tmp_path)}
    # ModelBundle's own best ModelCheckpoint, found in the CallbackList, gave the verdicts
    improved = [json.loads(line).get("improved") for log in logs
                for line in log.read_text().splitlines() if '"ev":"val"' in line]
    assert improved == [True, False, False, False]
    report = audit([tmp_path])
    verdicts = {c.id: c.verdict for c in report.clauses}
    # both agree with the matrix (fail): Poutyne saves no step (RES-1.2: the resume starts
    # its count at 0), and EarlyStopping.on_train_begin resets its wait (RES-3.3)
    assert (verdicts["RES-1"], verdicts["RES-3"]) == ("fail", "fail"), report.clause("RES-3")
    assert "RES-1.2" in report.clause("RES-1").evidence
    assert "improved=False, stop=False" in report.clause("RES-3").evidence
    assert (_matrix()["RES-1"], _matrix()["RES-3"]) == ("fail", "fail")


def test_importing_the_audit_callback_does_not_import_poutyne() -> None:
    code = ("import sys, trainspec.adapters.poutyne.audit as m; "
            "assert 'poutyne' not in sys.modules; print(m.audit_callback.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "audit_callback"
