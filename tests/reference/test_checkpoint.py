"""CKPT: which files a run writes, what they hold, and how they are written and read."""

from __future__ import annotations

import dataclasses
import errno
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

import pytest
import torch

from tests.reference.reference_helpers import (
    Counter,
    ScriptedTrainer,
    assert_same_state,
    assert_same_weights,
    make_config,
)
from trainspec.errors import (
    CheckpointCorruptError,
    CheckpointNotFoundError,
    CheckpointWriteError,
)
from trainspec.reference import (
    PREEMPTED_EXIT_CODE,
    TrainConfig,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


def loading(cfg: TrainConfig, load_from: str, *, resume: bool = True) -> TrainConfig:
    return dataclasses.replace(cfg, ckpt=dataclasses.replace(cfg.ckpt, load_from=load_from,
                                                             resume=resume))


# --------------------------------------------------------------------------------- CKPT-1


@pytest.mark.clause("CKPT-1", "DIST-4")
def test_last_pt_is_complete_after_every_epoch_before_the_next_starts(tmp_path: Path) -> None:
    seen: dict[int, int] = {}

    def read_last_pt(trainer: ScriptedTrainer) -> None:
        assert trainer.ckpt_dir is not None
        if trainer.epoch > 0:
            seen[trainer.epoch] = int(load_checkpoint(trainer.ckpt_dir / "last.pt")["epoch"])

    trainer = ScriptedTrainer(make_config(tmp_path, num_epochs=4), scores=[0.1] * 4,
                              on_train_epoch=read_last_pt)
    trainer.train()
    assert seen == {1: 0, 2: 1, 3: 2}
    assert trainer.ckpt_dir is not None
    assert load_checkpoint(trainer.ckpt_dir / "last.pt")["epoch"] == 3


@pytest.mark.clause("CKPT-1")
@pytest.mark.parametrize(("every", "save_last", "files"), [
    (2, True, ["epoch_0.pt", "epoch_2.pt", "epoch_4.pt", "last.pt"]),
    (3, False, ["epoch_0.pt", "epoch_3.pt"]),
    (None, True, ["last.pt"]),
    (None, False, []),
])
def test_epoch_files_follow_every_n_epochs_and_last_pt_follows_save_last(
        tmp_path: Path, every: int | None, save_last: bool, files: list[str]) -> None:
    cfg = make_config(tmp_path, num_epochs=5, ckpt={"every_n_epochs": every,
                                                    "save_last": save_last})
    trainer = ScriptedTrainer(cfg, scores=[0.5] * 5)  # one improvement: best.pt at epoch 0
    trainer.train()
    assert trainer.checkpoint_files() == sorted([*files, "best.pt"])
    assert trainer.ckpt_dir is not None
    for name in files:
        if name.startswith("epoch_"):
            epoch = int(name.removeprefix("epoch_").removesuffix(".pt"))
            assert load_checkpoint(trainer.ckpt_dir / name)["epoch"] == epoch


@pytest.mark.clause("CKPT-1")
def test_a_checkpoint_holds_epoch_step_run_id_config_and_every_item(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, num_epochs=2, val={"patience": 3}, model_name="tiny")
    trainer = ScriptedTrainer(cfg, scores=[0.1, 0.2], extra_items={"counter": Counter(3)})
    trainer.train()
    assert trainer.ckpt_dir is not None
    # the plain loader a user would reach for: weights only, no trainspec involved
    saved = torch.load(trainer.ckpt_dir / "last.pt", map_location="cpu", weights_only=True)
    assert (saved["epoch"], saved["train_step"], saved["run_id"]) == (1, 12, trainer.run_id)
    assert saved["config"]["num_epochs"] == 2
    assert saved["config"]["val"]["patience"] == 3
    assert saved["config"]["model_name"] == "tiny"
    assert_same_weights(saved["model_state_dict"], trainer.final_weights())
    assert_same_state(saved["optimizer_state_dict"], trainer.optimizer.state_dict())
    assert_same_state(saved["scheduler_state_dict"], trainer.scheduler.state_dict())
    assert saved["counter_state_dict"] == {"value": 3}


# --------------------------------------------------------------------------------- CKPT-2


def torn_save(obj: object, f: BinaryIO, *args: Any, **kwargs: Any) -> None:
    f.write(b"PK\x03\x04 half a checkpoint")
    raise OSError("No space left on device (simulated)")


@pytest.mark.clause("CKPT-2")
def test_an_interrupted_write_leaves_the_previous_file_loadable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save_checkpoint(tmp_path / "last.pt", {"epoch": 1, "w": torch.ones(3)})
    monkeypatch.setattr(torch, "save", torn_save)
    with pytest.raises(OSError, match="simulated"):
        save_checkpoint(path, {"epoch": 2, "w": torch.zeros(3)})
    monkeypatch.undo()
    restored = load_checkpoint(path)
    assert restored["epoch"] == 1
    assert torch.equal(restored["w"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary file left


@pytest.mark.clause("CKPT-2")
def test_a_run_that_crashes_mid_write_can_resume_from_the_previous_epoch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_fills_at_epoch_2(trainer: ScriptedTrainer) -> None:
        if trainer.epoch == 2:
            monkeypatch.setattr(torch, "save", torn_save)

    cfg = make_config(tmp_path, num_epochs=4)
    crashed = ScriptedTrainer(cfg, scores=[0.1] * 4, on_train_epoch=disk_fills_at_epoch_2)
    with pytest.raises(OSError, match="simulated"):
        crashed.train()
    monkeypatch.undo()
    assert crashed.ckpt_dir is not None
    assert load_checkpoint(crashed.ckpt_dir / "last.pt")["epoch"] == 1
    resumed = ScriptedTrainer(loading(cfg, str(crashed.ckpt_dir / "last.pt")), scores=[0.1] * 4)
    resumed.train()
    assert resumed.trained_epochs == [2, 3]


# --------------------------------------------------------------------------------- CKPT-3


class RunsCode:
    """Unpickling this touches ``marker``: a stand-in for any code a checkpoint could carry."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


@pytest.fixture
def booby_trapped(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "code-was-run"
    path = tmp_path / "last.pt"
    torch.save({"epoch": 0, "train_step": 0, "model_state_dict": RunsCode(marker)}, path)
    torch.load(path, weights_only=False)  # the trap works: a full unpickle runs the code
    assert marker.exists()
    marker.unlink()
    return path, marker


@pytest.mark.clause("CKPT-3")
def test_loading_never_runs_code_embedded_in_a_checkpoint(
        booby_trapped: tuple[Path, Path]) -> None:
    path, marker = booby_trapped
    with pytest.raises(CheckpointCorruptError, match=rf"{path.name}: refused to load"):
        load_checkpoint(path)
    assert not marker.exists()


def test_a_refused_checkpoint_names_the_global_it_holds_without_escape_codes(
        booby_trapped: tuple[Path, Path]) -> None:
    path, _ = booby_trapped
    # RunsCode pickles itself through getattr, the global a weights-only load refuses
    with pytest.raises(CheckpointCorruptError, match=r"\(Unsupported global: GLOBAL getattr was "
                                                     r"not an allowed global by default\)\. "
                                                     r"Loading it fully") as caught:
        load_checkpoint(path)
    assert "\x1b" not in str(caught.value)


@pytest.mark.clause("CKPT-3")
@pytest.mark.parametrize("resume", [True, False])
def test_a_trainer_refuses_a_booby_trapped_checkpoint(
        tmp_path: Path, booby_trapped: tuple[Path, Path], resume: bool) -> None:
    path, marker = booby_trapped
    with pytest.raises(CheckpointCorruptError, match=r"last\.pt: refused to load"):
        ScriptedTrainer(loading(make_config(tmp_path), str(path), resume=resume))
    assert not marker.exists()


# --------------------------------------------------------------------------------- CKPT-4


@pytest.mark.clause("CKPT-4")
def test_a_missing_checkpoint_names_every_path_tried(tmp_path: Path) -> None:
    cfg = loading(make_config(tmp_path / "ckpts"), "run-1/last.pt")
    expected = (rf"tried run-1/last\.pt, {tmp_path / 'ckpts' / 'run-1' / 'last.pt'}\. "
                r"Point ckpt\.load_from")
    with pytest.raises(CheckpointNotFoundError, match=expected):
        ScriptedTrainer(cfg)
    absolute = tmp_path / "nowhere.pt"
    with pytest.raises(CheckpointNotFoundError, match=rf"tried {absolute}\."):
        find_checkpoint(str(absolute), str(tmp_path))


def test_a_relative_checkpoint_is_found_under_ckpt_dir(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "run-1" / "w.pt", {"epoch": 0})
    assert find_checkpoint("run-1/w.pt", str(tmp_path)) == tmp_path / "run-1" / "w.pt"


@pytest.mark.clause("CKPT-4")
@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "not-a-dict"])
def test_a_corrupt_checkpoint_names_the_file(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "epoch_3.pt"
    save_checkpoint(path, {"epoch": 3, "w": torch.arange(1000.0)})
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00not a checkpoint" * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        torch.save([1, 2, 3], path)
    with pytest.raises(CheckpointCorruptError, match=rf"{path}: ") as caught:
        load_checkpoint(path)
    assert "malicious" not in str(caught.value)
    assert "refused" not in str(caught.value)
    with pytest.raises(CheckpointCorruptError, match=r"epoch_3\.pt"):
        ScriptedTrainer(loading(make_config(tmp_path), str(path)))


def test_random_bytes_are_named_not_a_checkpoint_rather_than_a_refused_one(
        tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(CheckpointCorruptError, match=rf"{path}: not a torch checkpoint"):
        load_checkpoint(path)


def test_a_killed_write_leaves_a_temporary_that_the_next_save_sweeps(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)  # a pid that no longer runs, as a killed writer's
    stale = tmp_path / f".last.pt.{dead}.tmp"
    stale.write_bytes(b"half a checkpoint")
    alive = tmp_path / f".last.pt.{os.getppid()}.tmp"  # another live writer's: left alone
    alive.write_bytes(b"in progress")
    save_checkpoint(path, {"epoch": 0})
    assert not stale.exists()
    assert alive.exists()
    assert load_checkpoint(path) == {"epoch": 0}


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"),
                                     RuntimeError("[enforce fail at inline_container.cc:664] "
                                                  ". unexpected pos 64 vs 0")])
def test_a_full_disk_is_named_with_the_path_and_the_old_file_survives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: Exception) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"epoch": 0})

    def full_disk(obj: object, f: BinaryIO, *args: Any, **kwargs: Any) -> None:
        f.write(b"partial")
        raise failure

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointWriteError, match=rf"{path}: cannot write the checkpoint, no "
                                                   r"space left on the device \(\d+ bytes free"):
        save_checkpoint(path, {"epoch": 1})
    monkeypatch.undo()
    assert load_checkpoint(path) == {"epoch": 0}
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


# --------------------------------------------------------------------------------- CKPT-5


def sigterm_at_epoch(epoch: int) -> Any:
    def send(trainer: ScriptedTrainer) -> None:
        if trainer.epoch == epoch:
            os.kill(os.getpid(), signal.SIGTERM)
    return send


class SigtermReachedTheTest(Exception):
    pass


def _sigterm_reached_the_test(signum: int, frame: FrameType | None) -> None:
    raise SigtermReachedTheTest("SIGTERM was not handled by the trainer")


@pytest.fixture
def sigterm_guard() -> Iterator[Any]:
    """A SIGTERM handler for the test's duration: a trainer without its own fails the test
    instead of killing pytest."""
    previous = signal.signal(signal.SIGTERM, _sigterm_reached_the_test)
    try:
        yield _sigterm_reached_the_test
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.clause("CKPT-5", "RES-1", "RES-3", "RES-4")
def test_sigterm_finishes_the_epoch_writes_last_pt_and_exits_resumably(
        tmp_path: Path, sigterm_guard: Any) -> None:
    cfg = make_config(tmp_path, num_epochs=5, val={"patience": 2}, ckpt={"save_last": False})
    scores = [0.4, 0.5, 0.5, 0.3, 0.2]
    full = ScriptedTrainer(make_config(tmp_path / "full", num_epochs=5, val={"patience": 2}),
                           scores=scores)
    full.train()
    assert full.trained_epochs == [0, 1, 2, 3]

    preempted = ScriptedTrainer(cfg, scores=scores, on_train_epoch=sigterm_at_epoch(1))
    with pytest.raises(SystemExit) as exit_info:
        preempted.train()
    assert exit_info.value.code == PREEMPTED_EXIT_CODE == 143
    assert preempted.events == ["train 0", "val 0", "train 1", "val 1"]  # no test pass
    assert signal.getsignal(signal.SIGTERM) is sigterm_guard  # the trainer's handler is gone
    assert preempted.ckpt_dir is not None
    assert preempted.checkpoint_files() == ["best.pt", "last.pt"]  # though save_last=false
    assert load_checkpoint(preempted.ckpt_dir / "last.pt")["epoch"] == 1

    resumed = ScriptedTrainer(loading(cfg, str(preempted.ckpt_dir / "last.pt")), scores=scores)
    resumed.train()
    assert resumed.trained_epochs == [2, 3]
    assert (resumed.best_epoch, resumed.train_step) == (full.best_epoch, full.train_step)
    assert [(v.epoch, v.improved, v.stop) for v in
            preempted.validations + resumed.validations] == [
        (v.epoch, v.improved, v.stop) for v in full.validations]
    assert_same_weights(resumed.final_weights(), full.final_weights())


@pytest.mark.clause("CKPT-2")
def test_ckpt_fsync_false_skips_fsync_but_still_replaces_atomically(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    cfg = TrainConfig.from_mapping({"ckpt": {"dir": str(tmp_path), "fsync": False}})
    assert cfg.ckpt.fsync is False
    target = tmp_path / "last.pt"
    save_checkpoint(target, {"epoch": 0}, fsync=cfg.ckpt.fsync)
    assert synced == []
    assert load_checkpoint(target)["epoch"] == 0
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary file left
