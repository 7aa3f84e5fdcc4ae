"""The adapter kit (``trainspec.kit``): one import surface, and its helpers for the shapes of
trainers, judged here with no worker process (a context that keeps what is recorded)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainspec import kit
from trainspec.conformance.run.scenario import CrashWhere
from trainspec.errors import AdapterError


class Kept:
    """A RunContext that keeps the records and the crash points called."""

    def __init__(self, root: Path) -> None:
        self.records: list[kit.Record] = []
        self.points: list[tuple[str, int]] = []
        self.root = root

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def ckpt_root(self) -> Path:
        return self.root

    def record(self, record: kit.Record) -> None:
        self.records.append(record)

    def crash_point(self, where: CrashWhere, epoch: int) -> None:
        self.points.append((where, epoch))


def test_every_name_the_kit_exports_is_there() -> None:
    missing = [name for name in kit.__all__ if not hasattr(kit, name)]
    assert missing == []
    assert isinstance(kit.Recorder, type)
    assert callable(kit.task_model)


LAYOUT = kit.FileLayout(roles={"checkpoint-epoch*.pth": "last", "model_best.pth": "best"},
                        keys={"model": "state_dict", "optimizer": "optimizer"}, epoch_base=1)


def _save(path: Path, epoch: int, model: torch.nn.Module) -> None:
    torch.save({"epoch": epoch, "state_dict": model.state_dict(), "optimizer": {}}, path)


def test_a_file_layout_maps_names_keys_and_1_based_epochs(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    _save(tmp_path / "checkpoint-epoch3.pth", 3, model)
    _save(tmp_path / "model_best.pth", 2, model)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    described = {f.relpath: f for f in LAYOUT.describe(tmp_path)}
    assert {k: (f.role, f.epoch) for k, f in described.items()} == {
        "checkpoint-epoch3.pth": ("last", 2), "model_best.pth": ("best", 1),
        "notes.txt": (None, None)}
    assert described["model_best.pth"].holds == ("epoch", "model", "optimizer")
    snap = LAYOUT.snapshot(tmp_path, "best")
    assert snap is not None
    assert snap.epoch == 1
    assert snap.weights is not None
    assert torch.equal(snap.weights["weight"], model.weight.detach())


def test_a_layout_reads_progress_kept_outside_the_keys(tmp_path: Path) -> None:
    layout = kit.FileLayout(roles={"weights_*.ckpt": "best"}, keys={"model": ""}, epoch_base=1,
                            progress=lambda path, _: (int(path.stem.split("_")[1]), 7))
    torch.save(torch.nn.Linear(2, 2).state_dict(), tmp_path / "weights_4.ckpt")
    (entry,) = layout.describe(tmp_path)
    assert (entry.role, entry.epoch, entry.step, entry.holds) == ("best", 3, 7, ("model",))


def test_a_file_without_the_weights_key_is_a_snapshot_with_its_error(tmp_path: Path) -> None:
    torch.save({"epoch": 1}, tmp_path / "model_best.pth")
    snap = LAYOUT.snapshot(tmp_path, "best")
    assert snap is not None
    assert snap.weights is None
    assert snap.error is not None
    assert "state_dict" in snap.error


def _recorder(tmp_path: Path, epoch_base: int = 1) -> tuple[kit.Recorder, Kept,
                                                             torch.nn.Module]:
    ctx = Kept(tmp_path)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scenario = kit.Scenario(name="t", scores=kit.ScoreScript.of([0.5, 0.4]))
    return kit.Recorder(scenario, ctx, epoch_base=epoch_base, model=model,
                        optimizer=optimizer), ctx, model


def test_the_recorder_reports_0_based_epochs_and_calls_every_crash_point(tmp_path: Path
                                                                         ) -> None:
    rec, ctx, _ = _recorder(tmp_path)
    rec.setup(epoch=1, train_len=3)
    for epoch in (1, 2):
        rec.train_start(epoch)
        rec.train_end(epoch, batches=3, loader_len=3)
        rec.val_start(epoch)
        rec.validation(epoch, score=rec.score(epoch), improved=epoch == 1, stop=None)
    rec.end(best_model=None, stop=True)
    kinds = [(type(r).__name__, getattr(r, "epoch", None)) for r in ctx.records]
    # a held validation is recorded once settled: when the next epoch starts, or at the end
    assert kinds == [("Setup", 0), ("TrainStart", 0), ("TrainEnd", 0), ("Validation", 0),
                     ("TrainStart", 1), ("TrainEnd", 1), ("Validation", 1), ("RunEnd", None)]
    assert ctx.points == [("train_start", 0), ("train_end", 0), ("val_start", 0),
                          ("val_after_save", 0), ("train_start", 1), ("train_end", 1),
                          ("val_start", 1), ("val_after_save", 1)]
    first, last = (r for r in ctx.records if isinstance(r, kit.Validation))
    assert (first.score, first.improved, first.stop) == (0.5, True, False)  # the run went on
    assert (last.score, last.improved, last.stop) == (0.4, False, True)  # end(stop=True)


def test_a_held_verdict_may_be_asked_when_the_validation_is_recorded(tmp_path: Path) -> None:
    rec, ctx, _ = _recorder(tmp_path, epoch_base=0)
    kept: dict[str, float] = {}
    score = rec.score(0) + 0.0
    rec.validation(0, score=score, improved=lambda: kept.get("best") is score, stop=None)
    kept["best"] = score  # the trainer keeps this very score as its best, after the hook
    rec.decide(stop=False)
    (v,) = [r for r in ctx.records if isinstance(r, kit.Validation)]
    assert v.improved is True


def test_a_verdict_never_given_is_the_adapters_error(tmp_path: Path) -> None:
    rec, _, _ = _recorder(tmp_path)
    rec.validation(1, score=0.5, improved=None, stop=None)
    with pytest.raises(AdapterError, match="improved"):
        rec.decide(stop=False)


def test_the_recorder_reports_the_evaluation_loaders_debug_mode_truncates(tmp_path: Path
                                                                           ) -> None:
    rec, ctx, _ = _recorder(tmp_path)
    rec.train_start(1)
    rec.train_end(1, batches=1, loader_len=1,
                  eval_lens={"val_loader": 1, "test_loader": 1, "eval_loader": None})
    rec.train_start(2)
    # the batches a validation really drew, counted by the adapter, may differ from len()
    rec.train_end(2, batches=1, loader_len=1, eval_lens={"val_loader": 1},
                  eval_batches={"val_loader": 2})
    first, second = (r for r in ctx.records if isinstance(r, kit.TrainEnd))
    assert (dict(first.eval_lens), dict(first.eval_batches)) == (
        {"val_loader": 1, "test_loader": 1, "eval_loader": None},
        {"val_loader": 1, "test_loader": 1, "eval_loader": None})
    assert (dict(second.eval_lens), dict(second.eval_batches)) == ({"val_loader": 1},
                                                                   {"val_loader": 2})


def test_a_train_end_without_evaluation_loaders_reports_none_to_judge(tmp_path: Path) -> None:
    rec, ctx, _ = _recorder(tmp_path)
    rec.train_end(1, batches=3, loader_len=3)
    (end,) = [r for r in ctx.records if isinstance(r, kit.TrainEnd)]
    assert (dict(end.eval_lens), dict(end.eval_batches)) == ({}, {})


def test_a_scheduler_built_inside_train_is_captured_from_the_epoch_it_is_given(
        tmp_path: Path) -> None:
    rec, ctx, _ = _recorder(tmp_path)
    assert rec.optimizer is not None
    rec.train_start(1)  # the trainer's train() has not built its scheduler yet
    scheduler = torch.optim.lr_scheduler.StepLR(rec.optimizer, step_size=1, gamma=0.5)
    rec.train_start(2, schedulers=[scheduler])
    rec.optimizer.step()
    scheduler.step()
    rec.train_start(3)  # kept for the later epochs, captured as it is then
    states = [r.state.scheduler for r in ctx.records if isinstance(r, kit.TrainStart)]
    assert states[0] is None
    assert isinstance(states[1], dict)
    assert isinstance(states[2], dict)
    assert (states[1]["last_epoch"], states[2]["last_epoch"]) == (0, 1)


class _Trainer:
    def save(self, state: dict[str, int], is_best: bool) -> str:
        return "saved"

    def train(self) -> dict[str, object]:
        not_improved_count = 2  # noqa: F841 - read by the hook through frame_locals
        return self.hook()

    def hook(self) -> dict[str, object]:
        return kit.frame_locals("train")


def test_observe_sees_an_argument_handed_on_and_frame_locals_a_local() -> None:
    trainer, seen = _Trainer(), []
    kit.observe(trainer, "save", after=lambda result, state, is_best: seen.append(
        (result, is_best)))
    assert trainer.save({"epoch": 1}, True) == "saved"
    assert seen == [("saved", True)]
    assert trainer.train()["not_improved_count"] == 2
    with pytest.raises(AdapterError, match="no call of 'fit'"):
        kit.frame_locals("fit")


def _doc_comment(name: str) -> str:
    """The ``#:`` comment above ``name``'s assignment in the module the kit takes it from."""
    import re

    for path in (Path(__file__).resolve().parent.parent / "conformance" / "run").glob("*.py"):
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if re.match(rf"^{re.escape(name)}(: [^=]+)? = ", line) and i and \
                    lines[i - 1].startswith("#:"):
                return lines[i - 1]
    return ""


def test_every_name_the_kit_exports_is_on_the_api_page_with_a_docstring() -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text(
        encoding="utf-8")
    absent = [n for n in kit.__all__ if f".{n}\n" not in page and f"`{n}`" not in page]
    assert absent == []
    import inspect

    def documented(name: str) -> bool:
        obj = getattr(kit, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            return bool((obj.__doc__ or "").strip())
        return bool(_doc_comment(name))  # a constant or a type alias: its ``#:`` comment

    undocumented = [n for n in kit.__all__ if not documented(n)]
    assert undocumented == []
