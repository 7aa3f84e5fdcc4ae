"""The ready Keras audit callback: real ``model.fit`` runs audited by ``trainspec audit``.

Each run is a tiny Keras job configured as Keras's docs tell a user to (ModelCheckpoint keeping
the best weights on ``val_score``, EarlyStopping with a patience, BackupAndRestore for a
resume), plus ``audit_callback``. The score is scripted, as the suite's adapter scripts it: a
compiled metric that logs a given value per epoch. The audit's verdicts are held to the
published ``trainspec check keras`` matrix (``docs/matrix.json``); where they differ, the table
says why, against Keras's sources (``adapters/keras/causes.py`` names them).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from trainspec.conformance.audit import audit
from trainspec.conformance.spec.results import Report

# Keras on its torch backend (its default, tensorflow, is not installed)
os.environ.setdefault("KERAS_BACKEND", "torch")
keras: Any = pytest.importorskip("keras")
# keras 3.15 turns its torch variables into numpy arrays with np.array(x) when it saves them, and
# numpy 2 warns that their __array__ lacks a `copy` keyword (keras/src/backend/torch/core.py)
pytestmark = pytest.mark.filterwarnings(
    r"ignore:__array__ implementation doesn't accept a copy keyword"
    r":DeprecationWarning:keras\.src\.backend\.")

ROOT = Path(__file__).resolve().parent.parent
MATRIX = {c["id"]: c["verdict"] for c in json.loads(
    (ROOT / "docs" / "matrix.json").read_text())["targets"]["keras"]["clauses"]}
nan, inf = math.nan, math.inf
DIFFERS = "differs:"  # a why that explains a verdict other than the matrix's

# improvement, worse, improvement after it, tie, worse, NaN: EarlyStopping(patience=3) stops
# after the NaN (three counted non-improvements), as the oracle does
SCORES = [0.5, 0.4, 0.7, 0.7, 0.6, nan, 0.9, 0.9]
EXPECTED: dict[str, tuple[str, str]] = {
    "LOOP-1": ("pass", "epochs 0..5 once each, in order, then EarlyStopping's stop"),
    "LOOP-2": ("pass", f"{DIFFERS} the matrix fails validation_freq=2 (trainer.py, "
               "Trainer._should_eval validates after 1-based multiples of it); this fit "
               "validates every epoch"),
    "LOOP-4": ("pass", "the test evaluate ran once, after fit"),
    "BEST-1": ("pass", f"{DIFFERS} the matrix fails a fit without ModelCheckpoint (TorchTrainer."
               "fit keeps no best) and one whose validation_freq skips epochs "
               "(ModelCheckpoint._should_save_model saves anyway); here ModelCheckpoint sees "
               "every validation, and takes the tie and the worse scores as no improvement"),
    "BEST-2": ("pass", "best.weights.h5 holds the weights of epoch 2 (0.7), the oracle's best"),
    "BEST-4": ("pass", f"{DIFFERS} the matrix fails an all-NaN run (MonitorCallback."
               "_is_improvement takes a first NaN as the best); here the first score is "
               "finite and the test pass loads epoch 2's weights"),
    "NAN-1": ("pass", f"{DIFFERS} the matrix fails +inf (ops.greater(inf, best) holds in "
              "MonitorCallback._is_improvement); this run's NaN is no improvement there"),
    "NAN-3": ("pass", f"{DIFFERS} the matrix fails +inf resetting EarlyStopping's wait; a NaN "
              "counts as a non-improvement, and the stop after it is the oracle's"),
    "PAT-1": ("pass", "EarlyStopping stops after three counted non-improvements"),
    "PAT-2": ("pass", "epoch 2's improvement after epoch 1's worse score refilled patience"),
    "PAT-5": ("pass", f"{DIFFERS} the matrix fails on NaN-first, +inf, validation_freq and "
              "start_from_epoch; this run meets none of them"),
}

# Keras's own failures met: EarlyStopping(start_from_epoch=2) starts its best at epoch 2, and
# +inf there is an improvement to ModelCheckpoint and EarlyStopping both
FAILING_SCORES = [0.5, 0.3, inf, 0.2, 0.1, 0.05, 0.0, 0.0]
EXPECTED_FAILING: dict[str, tuple[str, str]] = {
    "LOOP-1": ("pass", "epochs 0..4 in order, then EarlyStopping's (late) stop"),
    "LOOP-2": ("pass", f"{DIFFERS} validation_freq=1 (see above)"),
    "BEST-1": ("pass", f"{DIFFERS} every finite score is judged as the oracle does (see above)"),
    "BEST-2": ("fail", f"{DIFFERS} the matrix's BEST-2 run scores finite values; here +inf "
               "became ModelCheckpoint's best (MonitorCallback._is_improvement), so "
               "best.weights.h5 holds epoch 2's weights, not those of epoch 0"),
    "NAN-1": ("fail", "+inf at epoch 2 taken as an improvement (MonitorCallback._is_improvement)"),
    "NAN-3": ("fail", "+inf resets EarlyStopping's wait: it stops after epoch 4, the oracle "
              "after epoch 3"),
    "PAT-1": ("pass", "the late stop follows +inf taken as an improvement: NAN-3's fault, "
              "charged there (PAT-3 keeps start_from_epoch's)"),
    "PAT-3": ("fail", "EarlyStopping.on_epoch_end does nothing before start_from_epoch, so its "
              "best starts at epoch 2 and epoch 2's score counts as its improvement"),
    "PAT-5": ("fail", "the improvement and stop verdicts above"),
}


class _Scripted:
    """The score a compiled metric logs: ``scores[epoch]`` (``val_score`` on validation data),
    mixed into ``keras.metrics.Metric`` by :func:`_metric`."""

    dtype: Any

    def __init__(self, scores: Sequence[float]) -> None:
        super().__init__(name="score")  # type: ignore[call-arg]
        self.scores, self.epoch = list(scores), 0

    def update_state(self, *args: object, **kwargs: object) -> None:
        return None

    def result(self) -> Any:
        return keras.ops.convert_to_tensor(self.scores[self.epoch], dtype=self.dtype)

    def reset_state(self) -> None:
        return None


class _Epoch:
    """Sets the scripted metric's epoch; raises in the first batch of ``interrupt_at`` (a job
    killed mid-epoch, as BackupAndRestore's docs interrupt one)."""

    def __init__(self, metric: Any, interrupt_at: int | None = None) -> None:
        super().__init__()
        self.metric, self.interrupt_at = metric, interrupt_at

    def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
        self.metric.epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
        if self.metric.epoch == self.interrupt_at:
            raise RuntimeError("interrupted")


def _metric(scores: Sequence[float]) -> Any:
    return type("Score", (_Scripted, keras.metrics.Metric), {})(scores)


def _fit(root: Path, scores: Sequence[float], *, epochs: int, patience: int, start: int = 0,
         test_pass: bool | None = None, audit_first: bool = False,
         interrupt_at: int | None = None, backup: bool = False) -> None:
    """One launch of a tiny Keras job in ``root``, with the audit callback."""
    from trainspec.adapters.keras.audit import audit_callback

    keras.backend.clear_session()  # layer names (and so the digests) as in a fresh process
    keras.utils.set_random_seed(0)
    x = keras.random.normal((32, 4), seed=1).cpu().numpy()
    y = (x[:, 0] > 0).astype("int64")
    metric = _metric(scores)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), metrics=[metric],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    best = root / "best.weights.h5"
    own = [keras.callbacks.ModelCheckpoint(best, monitor="val_score", mode="max",
                                           save_best_only=True, save_weights_only=True),
           keras.callbacks.EarlyStopping(monitor="val_score", mode="max", patience=patience,
                                         start_from_epoch=start)]
    if backup:
        own.append(keras.callbacks.BackupAndRestore(root / "backup"))
    audited = audit_callback(root, test_pass=test_pass)
    step = type("Epoch", (_Epoch, keras.callbacks.Callback), {})(metric, interrupt_at)
    callbacks = [step, audited, *own] if audit_first else [step, *own, audited]
    model.fit(x, y, batch_size=16, epochs=epochs, validation_data=(x, y), verbose=0,
              callbacks=callbacks)
    if test_pass:
        model.load_weights(best)  # the test pass on the best weights, as Keras's docs load them
        model.evaluate(x, y, batch_size=16, verbose=0, callbacks=[audited])


def _header(root: Path) -> dict[str, Any]:
    logs = sorted((root / "trainspec-audit").glob("*.rank0.jsonl"))
    assert len(logs) == 1
    header: dict[str, Any] = json.loads(logs[0].read_text().splitlines()[0])
    return header


def _verdicts(root: Path) -> Report:
    return audit([root])


def _judged(report: Report) -> dict[str, str]:
    return {c.id: c.verdict for c in report.clauses if c.verdict != "n/a"}


@pytest.fixture(scope="module")
def main_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("keras-main")
    _fit(root, SCORES, epochs=len(SCORES), patience=3, test_pass=True)
    return root


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("keras-failing")
    _fit(root, FAILING_SCORES, epochs=len(FAILING_SCORES), patience=2, start=2)
    return root


@pytest.mark.parametrize(("run", "table"), [("main_run", EXPECTED),
                                            ("failing_run", EXPECTED_FAILING)])
def test_the_audit_of_a_real_fit_gives_the_expected_verdicts(
        run: str, table: dict[str, tuple[str, str]], request: pytest.FixtureRequest) -> None:
    report = _verdicts(request.getfixturevalue(run))
    judged = _judged(report)
    evidence = {c.id: c.evidence for c in report.clauses}
    assert set(judged) == set(table), evidence
    for clause, (verdict, _) in table.items():
        assert judged[clause] == verdict, f"{clause}: {evidence[clause]}"


@pytest.mark.parametrize("table", [EXPECTED, EXPECTED_FAILING])
def test_each_verdict_agrees_with_check_or_says_why_not(
        table: dict[str, tuple[str, str]]) -> None:
    for clause, (verdict, why) in table.items():
        assert (verdict == MATRIX[clause]) == (not why.startswith(DIFFERS)), \
            f"{clause}: audit {verdict}, check {MATRIX[clause]} ({why})"


def test_the_log_holds_what_keras_was_configured_with(main_run: Path,
                                                      failing_run: Path) -> None:
    header = _header(main_run)
    assert header["trainer"] == "keras.src.models.sequential.Sequential"
    assert header["resumed_from"] is None
    assert header["config"] == {
        "num_epochs": 8, "val_first": False, "val_every_n_epochs": 1, "minimize": False,
        "patience": 3, "has_patience": True, "start_patience": 0, "test_enable": True,
        "ckpt_enable": None, "save_last": None, "ckpt_every_n_epochs": None, "debug": False}
    config = _header(failing_run)["config"]
    assert (config["patience"], config["start_patience"], config["test_enable"]) == (2, 2, None)


def test_the_callback_settles_the_same_wherever_it_stands(main_run: Path,
                                                          tmp_path: Path) -> None:
    # before ModelCheckpoint and EarlyStopping it reads their verdicts at the next epoch
    _fit(tmp_path, SCORES, epochs=len(SCORES), patience=3, audit_first=True)

    def decisions(root: Path) -> list[tuple[object, ...]]:
        lines = [json.loads(line) for line in next(
            (root / "trainspec-audit").glob("*.jsonl")).read_text().splitlines()[1:]]
        return [(e["epoch"], e["score"], e["improved"], e["stop"], e["weights"])
                for e in lines if e["ev"] == "val"]

    first = decisions(tmp_path)
    assert [d[2:4] for d in first] == [(True, False), (False, False), (True, False),
                                       (False, False), (False, False), (False, True)]
    assert first == decisions(main_run)


def test_a_resumed_fit_is_audited_with_its_first_launch(tmp_path: Path) -> None:
    # killed in epoch 2, resumed by BackupAndRestore at epoch 2 with the step it saved
    scores = [0.5, 0.7, 0.6, 0.65]
    with pytest.raises(RuntimeError, match="interrupted"):
        _fit(tmp_path, scores, epochs=4, patience=3, backup=True, interrupt_at=2)
    _fit(tmp_path, scores, epochs=4, patience=3, backup=True)
    report = audit([tmp_path])
    verdicts = {c.id: c.verdict for c in report.clauses}
    # RES-1 as check: each resume continues at k+1 with the saved step. RES-3 as check:
    # BackupAndRestore backs up weights, optimizer and epoch only, so ModelCheckpoint.best
    # starts afresh and takes 0.6 (worse than 0.7) as an improvement
    assert (verdicts["RES-1"], verdicts["RES-3"]) == (MATRIX["RES-1"], MATRIX["RES-3"])
    assert (verdicts["RES-1"], verdicts["RES-3"]) == ("pass", "fail")
    assert "improved=True" in report.clause("RES-3").evidence
    headers = sorted((json.loads(p.read_text().splitlines()[0]) for p in
                      (tmp_path / "trainspec-audit").glob("*.jsonl")),
                     key=lambda h: h["started_ns"])
    assert headers[0]["resumed_from"] is None
    resumed = headers[1]["resumed_from"]
    assert (resumed["epoch"], resumed["train_step"]) == (1, 4)  # 2 epochs of 2 batches


def test_importing_the_audit_callback_does_not_import_keras() -> None:
    code = ("import sys, trainspec.adapters.keras.audit as m; "
            "assert 'keras' not in sys.modules; print(m.audit_callback.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
