"""CKPT mutants: slips in what checkpoint files hold and how loading them fails."""

from __future__ import annotations

import contextlib
import io
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import torch

from tests.mutants.registry import mutant_of
from trainspec.errors import CheckpointError, CheckpointNotFoundError
from trainspec.reference import BaseTrainer, find_checkpoint


@mutant_of("check_checkpoint_files_and_contents",
           expect="the run wrote ['epoch_1.pt', 'epoch_3.pt']",
           proves=("CKPT-1.3",))
class EpochCheckpointsOffByOne(BaseTrainer):
    """Writes epoch_<e>.pt when (e + 1) % every_n_epochs == 0."""

    def _write_epoch_checkpoints(self) -> None:
        if self.ckpt_dir is None:
            return
        every = self.cfg.ckpt.every_n_epochs
        if every is not None and (self.epoch + 1) % every == 0:
            self._save(f"epoch_{self.epoch}.pt")
        if self.cfg.ckpt.save_last:
            self._save("last.pt")


@mutant_of("check_checkpoint_files_and_contents",
           expect="when epoch 1 started, last.pt said epoch None; expected 0",
           proves=("CKPT-1.1",))
class LastCheckpointOnlyAtTheEnd(BaseTrainer):
    """Writes last.pt after the final epoch only."""

    def _write_epoch_checkpoints(self) -> None:
        if self.ckpt_dir is not None and self.epoch == self.cfg.num_epochs - 1:
            super()._write_epoch_checkpoints()


@mutant_of("check_checkpoint_files_and_contents",
           expect="when epoch 3 started, last.pt said epoch 1; expected 2",
           proves=("CKPT-1.1",))
class LastCheckpointOnlyOnImprovement(BaseTrainer):
    """Writes last.pt only after an epoch that improved (the save sits under the best-model
    branch), so a run's last.pt lags behind after every non-improvement."""

    def _write_epoch_checkpoints(self) -> None:
        if self.ckpt_dir is not None and self.best_epoch == self._completed_epoch:
            super()._write_epoch_checkpoints()


@mutant_of("check_checkpoint_files_and_contents", expect="best.pt lacks optimizer_state_dict",
           proves=("CKPT-1.5",))
class CheckpointOmitsTheOptimizer(BaseTrainer):
    """Saves the model but not the other registered items."""

    def _save(self, name: str) -> None:
        items = self.ckpt_items
        self.ckpt_items = {k: v for k, v in items.items() if k == "model"}
        try:
            super()._save(name)
        finally:
            self.ckpt_items = items


@mutant_of("check_checkpoint_errors_name_the_file",
           expect="(no such file) did not raise; the run trained [0, 1] from scratch",
           proves=("CKPT-4.4",))
class MissingCheckpointStartsFresh(BaseTrainer):
    """Treats a missing or unreadable checkpoint as no checkpoint at all."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        try:
            return super()._load_checkpoint()
        except CheckpointError:
            self.is_resumed = False
            return None


@mutant_of("check_checkpoint_errors_name_the_file",
           expect="raised without naming the path tried: "
                  "RuntimeError: could not load the checkpoint",
           proves=("CKPT-4.1",))
class VagueCheckpointErrors(BaseTrainer):
    """Fails on a bad checkpoint without saying which file."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        try:
            return super()._load_checkpoint()
        except CheckpointError:
            raise RuntimeError("could not load the checkpoint") from None


@mutant_of("check_interrupted_write_keeps_the_previous_file",
           expect="last.pt, which held a complete checkpoint of epoch 1 before the write, no "
                  "longer loads",
           proves=("CKPT-2.1", "CKPT-2.2", "CKPT-2.4"))
class WritesCheckpointsInPlace(BaseTrainer):
    """torch.save straight over the old file: a crash mid-write leaves it torn."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        torch.save(state, path)


@mutant_of("check_loading_never_runs_embedded_code", expect="executed code embedded in last.pt",
           proves=("CKPT-3.1", "CKPT-3.2"))
class UnsafeCheckpointLoad(BaseTrainer):
    """Loads checkpoints with a full unpickler (weights_only=False), as the seed did."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        load_from = self.cfg.ckpt.load_from
        if load_from is None:
            return None
        self.ckpt_path = find_checkpoint(load_from, self.cfg.ckpt.dir)
        ckpt = torch.load(self.ckpt_path, map_location="cpu", weights_only=False)
        self.is_resumed = self._is_resume()
        if self.is_resumed:
            self.epoch, self.train_step = int(ckpt["epoch"]) + 1, int(ckpt["train_step"])
            self._completed_epoch = int(ckpt["epoch"])
        return dict(ckpt)


@mutant_of("check_sigterm_leaves_a_resumable_checkpoint",
           expect="the process ended (killed: killed by SIGTERM) without writing a checkpoint",
           proves=("CKPT-5.1",))
class IgnoresSigterm(BaseTrainer):
    """Installs no SIGTERM handler: a preemption kills the run wherever it is."""

    @contextlib.contextmanager
    def _sigterm_flag(self) -> Iterator[None]:
        self._sigterm_received = False
        yield


@mutant_of("check_sigterm_leaves_a_resumable_checkpoint",
           expect="the process ended (exited: exited with status 143) without writing a checkpoint",
           proves=("CKPT-5.1",))
class SigtermWithoutCheckpoint(BaseTrainer):
    """Exits at once on SIGTERM, saving nothing."""

    @contextlib.contextmanager
    def _sigterm_flag(self) -> Iterator[None]:
        self._sigterm_received = False

        def leave(signum: int, frame: FrameType | None) -> None:
            raise SystemExit(143)

        previous = signal.signal(signal.SIGTERM, leave)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)


@mutant_of("check_checkpoint_files_and_contents",
           expect="with ckpt.save_last=false and every_n_epochs unset the run wrote ['last.pt']",
           proves=("CKPT-1.2",))
class IgnoresSaveLast(BaseTrainer):
    """Writes last.pt after every epoch whatever ckpt.save_last says."""

    def _write_epoch_checkpoints(self) -> None:
        if self.ckpt_dir is None:
            return
        every = self.cfg.ckpt.every_n_epochs
        if every is not None and self.epoch % every == 0:
            self._save(f"epoch_{self.epoch}.pt")
        self._save("last.pt")


@mutant_of("check_checkpoint_files_and_contents",
           expect="with ckpt.save_last=false and every_n_epochs unset the run wrote "
                  "['epoch_0.pt', 'epoch_1.pt']",
           proves=("CKPT-1.4",))
class UnsetIntervalIsEveryEpoch(BaseTrainer):
    """Reads an unset ckpt.every_n_epochs as 1: every epoch gets its epoch_<e>.pt."""

    def _write_epoch_checkpoints(self) -> None:
        if self.ckpt_dir is None:
            return
        every = self.cfg.ckpt.every_n_epochs or 1
        if self.epoch % every == 0:
            self._save(f"epoch_{self.epoch}.pt")
        if self.cfg.ckpt.save_last:
            self._save("last.pt")


@mutant_of("check_checkpoint_files_and_contents",
           expect="does not load with weights_only=True",
           proves=("CKPT-1.6",))
class PicklesTheConfig(BaseTrainer):
    """Saves the config object itself rather than a plain dict of it: only a full unpickler
    reads the file back."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        super()._write_file(path, {**state, "config": self.cfg})


def _config_classes() -> list[Callable[..., Any] | tuple[Callable[..., Any], str]]:
    from trainspec.reference import config

    return [c for c in vars(config).values()
            if isinstance(c, type) and c.__module__ == config.__name__]


@mutant_of("check_checkpoint_files_and_contents",
           expect="best.pt does not load with weights_only=True (UnpicklingError: Weights only "
                  "load failed: WeightsUnpickler error: Unsupported global: GLOBAL "
                  "trainspec.reference.config.",
           proves=("CKPT-1.6",))
class PicklesTheConfigAndReadsItBack(BaseTrainer):
    """Saves the config object itself and reads its own files back with its config classes
    allowed: resume, finetune and best files work; only a plain weights-only load refuses
    them (one fault: CKPT-1's, and no other clause's)."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        super()._write_file(path, {**state, "config": self.cfg})

    def _load_checkpoint(self) -> dict[str, Any] | None:
        with torch.serialization.safe_globals(_config_classes()):
            return super()._load_checkpoint()


@mutant_of("check_checkpoint_errors_name_the_file",
           expect="a checkpoint truncated to half its size (corrupt-last.pt) raised without naming "
                  "the file",
           proves=("CKPT-4.3",))
class BareUnpicklingError(BaseTrainer):
    """Reads the checkpoint with torch.load alone: a truncated file raises torch's own error,
    which names no file."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        load_from = self.cfg.ckpt.load_from
        if load_from is None:
            return None
        self.ckpt_path = find_checkpoint(load_from, self.cfg.ckpt.dir)
        ckpt = torch.load(self.ckpt_path, map_location="cpu", weights_only=True)
        self.is_resumed = self._is_resume()
        if self.is_resumed:
            self.epoch, self.train_step = int(ckpt["epoch"]) + 1, int(ckpt["train_step"])
            self._completed_epoch = int(ckpt["epoch"])
        return dict(ckpt)


@mutant_of("check_checkpoint_errors_name_the_file",
           expect="raised without naming the location relative to ckpt.dir",
           proves=("CKPT-4.2",))
class NamesOnlyTheGivenPath(BaseTrainer):
    """Looks for ckpt.load_from as given only, never under ckpt.dir, and says so."""

    def _load_checkpoint(self) -> dict[str, Any] | None:
        load_from = self.cfg.ckpt.load_from
        if load_from is not None and not Path(load_from).is_file():
            raise CheckpointNotFoundError(
                f"ckpt.load_from: no checkpoint file at {load_from}. Point ckpt.load_from at "
                "an existing .pt file, or unset it to start fresh.")
        return super()._load_checkpoint()


@mutant_of("check_sigterm_to_one_rank_stops_every_rank",
           expect="SIGTERM to rank 1 during epoch 1: rank 0 trained epochs [0, 1] and raised "
                  "RuntimeError",
           proves=("CKPT-5.5",))
class PreemptsOnItsOwnFlag(BaseTrainer):
    """Acts on its own rank's SIGTERM flag at the epoch's end without asking the others (the
    verdict of one rank): the rank the signal reached leaves, the others train on and wait for
    it in a collective."""

    def barrier(self) -> None:
        super().barrier()
        if self._sigterm_received:
            self._preempt()


@mutant_of("check_sigterm_leaves_a_resumable_checkpoint",
           expect="after SIGTERM during epoch 1 the process exited with status 0, expected 143",
           proves=("CKPT-5.3",))
class SigtermExitsZero(BaseTrainer):
    """Saves on SIGTERM, then exits with status 0, as if the run had finished."""

    def _preempt(self) -> None:
        try:
            super()._preempt()
        except SystemExit:
            raise SystemExit(0) from None


@mutant_of("check_sigterm_leaves_a_resumable_checkpoint",
           expect="with ckpt.save_last=false, after SIGTERM during epoch 1 the process exited "
                  "with status 143 leaving no last.pt",
           proves=("CKPT-5.2",))
class SigtermHonoursSaveLast(BaseTrainer):
    """On SIGTERM writes last.pt only when ckpt.save_last asks for it."""

    def _preempt(self) -> None:
        self.is_preempted = True
        self.pg.close(is_healthy=True)
        raise SystemExit(143)


@mutant_of("check_sigterm_leaves_a_resumable_checkpoint",
           expect="resumed from the checkpoint written on SIGTERM (epoch 1), the run decided "
                  "[(0, True, False), (2, ",
           proves=("CKPT-5.4",))
class SigtermSavesMidEpoch(BaseTrainer):
    """Saves last.pt from the SIGTERM handler, mid-epoch, as if the epoch in progress were
    complete: a resume skips that epoch's validation."""

    @contextlib.contextmanager
    def _sigterm_flag(self) -> Iterator[None]:
        self._sigterm_received = False

        def save_now(signum: int, frame: FrameType | None) -> None:
            self._completed_epoch = self.epoch
            self._save("last.pt")
            raise SystemExit(143)

        previous = signal.signal(signal.SIGTERM, save_now)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)


@mutant_of("check_checkpoint_files_and_contents",
           expect="early stopping triggered at epoch 3, but the final last.pt says epoch 2",
           proves=("CKPT-1.1",))
class NoCheckpointAtTheEarlyStop(BaseTrainer):
    """Leaves the loop as soon as patience runs out, before the epoch's checkpoints: the epoch
    at which early stopping triggers is never saved."""

    def _write_epoch_checkpoints(self) -> None:
        if not self._stopped:
            super()._write_epoch_checkpoints()


@mutant_of("check_interrupted_write_keeps_the_previous_file",
           expect="of best.pt in epoch 2 (0 bytes), best.pt, which held a complete checkpoint of "
                  "epoch 1 before the write, no longer loads",
           proves=("CKPT-2.1", "CKPT-2.2", "CKPT-2.4"))
class WritesTheBestFileInPlace(BaseTrainer):
    """Writes last.pt atomically but serializes best.pt in memory and writes the bytes
    straight over the old file: a kill mid-write leaves the best model torn."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        if path.name != "best.pt":
            super()._write_file(path, state)
            return
        buffer = io.BytesIO()
        torch.save(state, buffer)
        with open(path, "wb") as f:
            f.write(buffer.getvalue())


@mutant_of("check_loading_never_runs_embedded_code",
           expect="the embedded code ran: the resume from a copy of last.pt executed code "
                  "embedded in last.pt (it created a marker folder, then the run raised: "
                  "ValueError: checksum mismatch",
           proves=("CKPT-3.1", "CKPT-3.2"))
class ChecksItsFilesAfterUnpickling(BaseTrainer):
    """Unpickles its checkpoint fully, and only then checks it against the checksum written
    beside it: a crafted file's code has run by the time the mismatch is raised."""

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        super()._write_file(path, state)
        path.with_name(path.name + ".sha256").write_text(_digest(path))

    def _load_checkpoint(self) -> dict[str, Any] | None:
        load_from = self.cfg.ckpt.load_from
        if load_from is None:
            return None
        path = find_checkpoint(load_from, self.cfg.ckpt.dir)
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        if path.with_name(path.name + ".sha256").read_text() != _digest(path):
            raise ValueError("checksum mismatch: the checkpoint changed after it was written")
        return super()._load_checkpoint() if ckpt else None


def _digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@mutant_of("check_interrupted_write_keeps_the_previous_file",
           expect="of best.pt in epoch 2 (0 bytes), best.pt, which held a complete checkpoint of "
                  "epoch 1 before the write, no longer loads",
           proves=("CKPT-2.1", "CKPT-2.2", "CKPT-2.4"))
class OverwritesTheBestFileInPlace(BaseTrainer):
    """Writes a numbered file anew every epoch and best.pt, both with torch.save straight onto
    the path (last.pt atomically): a kill mid-write tears a new numbered file, which had no
    previous version to lose, and tears the best model in place, which had."""

    def _write_epoch_checkpoints(self) -> None:
        if self.ckpt_dir is None:
            return
        self._save(f"epoch_{self.epoch}.pt")  # the epoch's first write: a new path
        if self.cfg.ckpt.save_last:
            self._save("last.pt")

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        if path.name == "last.pt":
            super()._write_file(path, state)
        else:
            torch.save(state, path)
