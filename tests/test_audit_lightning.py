"""Audit mode for Lightning: real ``Trainer.fit`` runs with the ready callback, audited.

Each run is a Lightning job configured as its docs tell a user (``ModelCheckpoint`` monitoring a
logged metric, ``EarlyStopping`` with a patience), whose module logs a known score sequence. The
audit's verdicts are held to ``trainspec check lightning``'s (docs/matrix.json) on the clauses both
judge, each explained by the Lightning behaviour behind it (``adapters/lightning/causes.py``).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainspec.conformance.audit import audit

lightning: Any = pytest.importorskip("lightning")

ROOT = Path(__file__).resolve().parent.parent
MATRIX = json.loads((ROOT / "docs" / "matrix.json").read_text(encoding="utf-8"))
CHECKED = {c["id"]: c["verdict"] for c in MATRIX["targets"]["lightning"]["clauses"]}


class _Interrupt(Exception):
    """Stands for a pre-emption: the job dies at an epoch's start."""


def _fit(root: Path, scores: Sequence[float], *, resume: bool = False,
         die_at: int | None = None, every_n: int = 1, epochs: int | None = None,
         debug: bool = False) -> None:
    from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint

    from trainspec.adapters.lightning.audit import audit_callback

    class Scripted(lightning.LightningModule):  # type: ignore[misc]  # untyped base
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 2)

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            loss: torch.Tensor = torch.nn.functional.cross_entropy(self.net(batch[0]),
                                                                   batch[1])
            return loss

        def validation_step(self, batch: Any, index: int) -> None:
            self.net(batch[0])

        def on_validation_epoch_end(self) -> None:
            self.log("val_loss", scores[self.current_epoch])

        def test_step(self, batch: Any, index: int) -> None:
            self.net(batch[0])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Dies(Callback):
        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            if trainer.current_epoch == die_at:
                raise _Interrupt(f"killed at epoch {die_at}")

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 4, generator=g), torch.randint(0, 2, (32,), generator=g))
    loader = DataLoader(data, batch_size=8)
    lightning.seed_everything(0, verbose=False)
    trainer = lightning.Trainer(
        max_epochs=epochs or len(scores), accelerator="cpu", logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        check_val_every_n_epoch=every_n, default_root_dir=root, fast_dev_run=debug,
        callbacks=[audit_callback(), Dies(),
                   ModelCheckpoint(dirpath=root, filename="best", monitor="val_loss",
                                   mode="min", save_last=True),
                   EarlyStopping(monitor="val_loss", mode="min", patience=2)])
    module = Scripted()
    trainer.fit(module, loader, loader, ckpt_path=str(root / "last.ckpt") if resume else None)
    trainer.test(module, loader, ckpt_path=None if debug else "best", verbose=False)


def _run(root: Path, scores: Sequence[float], **options: Any) -> dict[str, tuple[str, str]]:
    with warnings.catch_warnings():  # Lightning's own warnings (few workers, deprecations)
        warnings.simplefilter("ignore")
        _fit(root, scores, **options)
    return {c.id: (c.verdict, c.evidence) for c in audit([root]).clauses}


# clause -> (the audit's verdict, why); every judged clause is listed
PLAIN = {
    "LOOP-1": ("pass", "epochs 0-3 trained once each, then the early stop"),
    "LOOP-2": ("pass", "every epoch validated (check_val_every_n_epoch=1)"),
    "BEST-1": ("pass", "strictly lower val_loss moves ModelCheckpoint's best; the tie does not"),
    "BEST-2": ("pass", "best.ckpt holds epoch 1's weights, the oracle's best"),
    "BEST-4": ("pass", "trainer.test(ckpt_path='best') loads them"),
    "PAT-1": ("pass", "EarlyStopping stops after two validations without improvement"),
    "PAT-5": ("pass", "every decision is the oracle's on these finite scores"),
}
FIRST_NAN = {
    "LOOP-1": ("pass", "one epoch, then the stop (itself a fault, charged below)"),
    "LOOP-2": ("pass", "the one epoch was validated"),
    "BEST-4": ("pass", "no improvement by the oracle: the test saw the final weights"),
    # ModelCheckpoint keeps a NaN as -inf while its top-k is not full, a new best
    "NAN-1": ("fail", "ModelCheckpoint._update_best_and_save / check_monitor_top_k"),
    # EarlyStopping(check_finite=True) stops at the first non-finite score
    "NAN-3": ("fail", "EarlyStopping._evaluate_stopping_criteria"),
    "PAT-1": ("pass", "the one wrong stop was taken at a NaN: NAN-3's, charged there"),
    "PAT-5": ("pass", "the improvement and the stop taken on a NaN: NAN-1's and NAN-3's, "
                      "charged there"),
}
OFF_GRID = {
    "LOOP-1": ("pass", "epochs 0-2 trained once each"),
    # check_val_every_n_epoch=2 validates after epoch 1 only, not after the final epoch 2
    "LOOP-2": ("fail", "_TrainingEpochLoop._should_check_val_epoch"),
    "BEST-1": ("pass", "its one validation is an improvement"),
    "BEST-2": ("pass", "best.ckpt holds that validation's weights"),
    "BEST-4": ("pass", "the test loads them"),
    "PAT-1": ("pass", "no stop"),
    "PAT-5": ("pass", "the one decision is the oracle's"),
}

DEBUG = {
    "LOOP-1": ("pass", "fast_dev_run trains one epoch, its own schedule"),
    "LOOP-2": ("pass", "and validates it"),
    "DBG-2": ("pass", "one epoch"),
    "DBG-4": ("pass", "its one batch steps the optimizer"),
    # under fast_dev_run ModelCheckpoint still writes last.ckpt when training ends
    "DBG-3": ("fail", "ModelCheckpoint.on_train_end"),
    # fast_dev_run suppresses ModelCheckpoint's bookkeeping, the only place Lightning tracks a
    # best score: nothing is an improvement (check's BEST-1 cause, with checkpointing off)
    "BEST-1": ("fail", "_CallbackConnector._configure_checkpoint_callbacks"),
    "PAT-5": ("fail", "the same improvement verdict"),
    "PAT-1": ("pass", "one validation, no stop due"),
    "BEST-4": ("pass", "no improvement by the trainer: the test saw the final weights"),
}


@pytest.mark.slow
@pytest.mark.parametrize(("scores", "options", "expected"), [
    ((0.5, 0.4, 0.4, 0.45, 0.3, 0.35), {}, PLAIN),
    ((math.nan, 0.5, 0.4, 0.4, 0.45, 0.46), {}, FIRST_NAN),
    ((0.5, 0.4, 0.3), {"every_n": 2}, OFF_GRID),
    ((0.5, 0.4, 0.3), {"debug": True}, DEBUG),
], ids=["plain", "first-nan", "off-grid", "debug"])
def test_the_audit_of_a_real_lightning_run_agrees_with_check(
        tmp_path: Path, scores: Sequence[float], options: dict[str, Any],
        expected: dict[str, tuple[str, str]]) -> None:
    verdicts = _run(tmp_path, scores, **options)
    judged = {cid: v for cid, (v, _) in verdicts.items() if v != "n/a"}
    assert judged == {cid: v for cid, (v, _) in expected.items()}, verdicts
    # a clause the real run judged gets trainspec check's verdict wherever the run met the
    # situation its check fails on; a pass here on a clause check fails is a run that never met
    # it (no NaN, no off-grid epoch), so only the audit's fails are held to the matrix
    for cid, verdict in judged.items():
        if verdict == "fail":
            assert CHECKED[cid] == "fail", (cid, verdicts[cid])


@pytest.mark.slow
def test_the_log_records_the_jobs_own_settings(tmp_path: Path) -> None:
    _run(tmp_path, (0.5, 0.4, 0.4, 0.45))
    (log,) = (tmp_path / "trainspec-audit").glob("*.rank0.jsonl")
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    config = lines[0]["config"]
    assert (config["num_epochs"], config["minimize"], config["patience"],
            config["val_every_n_epochs"], config["save_last"]) == (4, True, 2, 1, True)
    assert lines[0]["trainer"].startswith("lightning:")
    kinds = [line["ev"] for line in lines[1:]]
    assert kinds[0] == "setup", kinds
    assert kinds[-3:] == ["end", "test", "close"], kinds
    assert [line["improved"] for line in lines if line.get("ev") == "val"] == \
        [True, True, False, False]


@pytest.mark.slow
def test_a_resumed_lightning_run_is_audited_across_its_launches(tmp_path: Path) -> None:
    scores = (0.5, 0.4, 0.45, 0.35, 0.36, 0.37, 0.2)
    with pytest.raises(_Interrupt):
        _run(tmp_path, scores, die_at=2)
    verdicts = _run(tmp_path, scores, resume=True)
    logs = sorted((tmp_path / "trainspec-audit").glob("*.jsonl"))
    assert len(logs) == 2
    resumed = json.loads(logs[0].read_text().splitlines()[0])["resumed_from"] or \
        json.loads(logs[1].read_text().splitlines()[0])["resumed_from"]
    assert resumed["epoch"] == 1, resumed
    # ModelCheckpoint's best and EarlyStopping's counter are in Lightning's checkpoint: the
    # resumed launch, writing into the same folder, continues at epoch 2 and stops where an
    # uninterrupted run stops. (check's RES-3 fail is a resume into a folder of its own, where
    # ModelCheckpoint.load_state_dict does not reload the best score: adapters/lightning/causes)
    assert CHECKED["RES-3"] == "fail"
    assert verdicts["RES-1"][0] == "pass", verdicts["RES-1"]
    assert verdicts["RES-3"][0] == "pass", verdicts["RES-3"]
    assert verdicts["PAT-1"][0] == "pass", verdicts["PAT-1"]


def test_importing_the_audit_callback_does_not_import_lightning() -> None:
    code = ("import sys, trainspec.adapters.lightning.audit as m; "
            "assert 'lightning' not in sys.modules; print(m.audit_callback.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "audit_callback"
