"""Adapters of a small checkpointing loop whose files ``trainspec check TARGET --self-test``
must judge rightly (tests/test_selftest.py). Each case changes the loop's files or the
adapter's reading of them in one way: some faults are the adapter's (the self-test names the
fix), some are facts of the trainer (the self-test names the checks that will judge them and
prescribes nothing to the adapter).

The loop writes ``last.pt`` after every epoch and ``best.pt`` on each improvement, and the
adapter reports its best weights from the best file, as an adapter of a trainer that keeps its
best on disk only does.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from trainspec import kit

SEED_LAYOUT = kit.FileLayout(roles={"last.pt": "last", "best.pt": "best"})


def _unpickle(path: Path) -> object:
    """The reader of a trainer that saves with the standard pickle."""
    with path.open("rb") as f:
        return pickle.load(f)


class HistoryBuffer:
    """A framework's logged values, rebuilt on unpickling through a bound class method
    (``getattr``), which a weights-only load refuses."""

    def __init__(self, values: list[float]) -> None:
        self.values = values

    @classmethod
    def rebuild(cls, values: list[float]) -> HistoryBuffer:
        return cls(values)

    def __reduce__(self) -> tuple[Any, tuple[list[float]]]:
        return (HistoryBuffer.rebuild, (self.values,))


class Checkpointing:
    """The loop, reported faithfully through the kit: the base of each case below (its own
    files are clean)."""

    name = "checkpointing loop"
    layout = SEED_LAYOUT
    best_from_file = True  # its best weights live in its best file only

    def capabilities(self) -> frozenset[kit.Capability]:
        return frozenset({"checkpoint"})

    def environment(self) -> dict[str, str | None]:
        return {"framework": None, "trainer": f"{__name__}:{type(self).__name__}"}

    def describe_checkpoints(self, root: Path) -> list[kit.FileRecord]:
        return self.layout.describe(root)

    # ------------------------------------------------------------- what each case changes

    def state(self, role: str, epoch: int, step: int, model: torch.nn.Module,
              optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return {"epoch": epoch, "train_step": step, "model_state_dict": model.state_dict(),
                "optimizer_state_dict": optimizer.state_dict()}

    def save(self, state: dict[str, Any], path: Path) -> None:
        torch.save(state, path)

    def finish(self, root: Path, epochs: int, step: int, model: torch.nn.Module,
               optimizer: torch.optim.Optimizer) -> None:
        """After the last epoch (a case may save once more)."""

    # ------------------------------------------------------------------------ the loop

    def run(self, scenario: kit.Scenario, ctx: kit.RunContext) -> None:
        task, get, root = scenario.task, scenario.get, ctx.ckpt_root
        torch.manual_seed(get("seed"))
        data = kit.task_data(task, get("seed"))
        loader = DataLoader(data["train"], batch_size=task.batch_size)
        model = kit.task_model(task)
        optimizer = kit.task_optimizer(task, model.parameters())
        rec = kit.Recorder(scenario, ctx, files=self.layout, model=model, optimizer=optimizer)
        rec.setup(epoch=0, train_len=len(loader), train_step=0)
        step, best_score, kept = 0, -math.inf, None
        for epoch in range(get("num_epochs")):
            rec.train_start(epoch, train_step=step)
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
                optimizer.step()
                step += 1
            rec.train_end(epoch, batches=len(loader), loader_len=len(loader), train_step=step)
            rec.val_start(epoch)
            score = rec.score(epoch)
            improved = math.isfinite(score) and score > best_score
            if improved:
                best_score, kept = score, kit.plain_weights(model.state_dict())
                self.save(self.state("best", epoch, step, model, optimizer), root / "best.pt")
            rec.validation(epoch, score=score, improved=improved, stop=False)
            self.save(self.state("last", epoch, step, model, optimizer), root / "last.pt")
        self.finish(root, get("num_epochs"), step, model, optimizer)
        best = self.layout.snapshot(root, "best")
        from_file = None if best is None else best.weights
        rec.end(best_model=from_file if self.best_from_file else kept, train_step=step)


# ---------------------------------------------------------------- files that do not load


class PickledBest(Checkpointing):
    """Saves its best file with the standard pickle, which ``torch.load`` cannot read, and the
    adapter gives no reader: the best weights it reports from that file are lost (the
    adapter's to fix: ``FileLayout(load=...)``)."""

    def save(self, state: dict[str, Any], path: Path) -> None:
        if path.name != "best.pt":
            return super().save(state, path)
        with path.open("wb") as f:
            pickle.dump(state, f, protocol=2)


class PickledBestRead(PickledBest):
    """The same, with the trainer's own reader given: clean."""

    layout = kit.FileLayout(roles=SEED_LAYOUT.roles, load=_unpickle)


class PickledFilesBestInMemory(PickledBest):
    """Every file saved with the standard pickle, the best weights reported from memory: the
    files do not load though ``RunEnd.best_model`` is there."""

    best_from_file = False

    def save(self, state: dict[str, Any], path: Path) -> None:
        with path.open("wb") as f:
            pickle.dump(state, f, protocol=2)


class OwnReaderFails(Checkpointing):
    """Its files hold a framework's object rebuilt through ``getattr``, and its own reader is
    ``torch.load`` at its weights-only default, which refuses them: the trainer cannot read
    its own files (a fact of the trainer), though the adapter gives that reader."""

    layout = kit.FileLayout(roles=SEED_LAYOUT.roles, load=torch.load)

    def state(self, role: str, epoch: int, step: int, model: torch.nn.Module,
              optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return {**super().state(role, epoch, step, model, optimizer),
                "history": HistoryBuffer([float(epoch)])}


# -------------------------------------------------------------------------- their epochs


class BestWithoutEpoch(Checkpointing):
    """Its best file holds the weights only, no epoch (a fact of the trainer)."""

    def state(self, role: str, epoch: int, step: int, model: torch.nn.Module,
              optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        full = super().state(role, epoch, step, model, optimizer)
        return {"model_state_dict": full["model_state_dict"]} if role == "best" else full


class EpochUnderOwnKey(Checkpointing):
    """Records the epoch under ``cur_epoch``, which the adapter's layout does not read (the
    adapter's to fix: ``FileLayout(keys={'epoch': 'cur_epoch'})``)."""

    def state(self, role: str, epoch: int, step: int, model: torch.nn.Module,
              optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        full = super().state(role, epoch, step, model, optimizer)
        full["cur_epoch"] = full.pop("epoch")
        return full


class FinalNextEpoch(Checkpointing):
    """Saves its last file once more when training ends, recording the next epoch to run,
    while every file before recorded the epoch done (a fact of the trainer)."""

    def finish(self, root: Path, epochs: int, step: int, model: torch.nn.Module,
               optimizer: torch.optim.Optimizer) -> None:
        self.save(self.state("last", epochs, step, model, optimizer), root / "last.pt")


class NextEpochEverywhere(Checkpointing):
    """Every file records the next epoch to run, and the layout reads it as the epoch done
    (the adapter's to fix: ``FileLayout(epoch_base=1)``)."""

    def state(self, role: str, epoch: int, step: int, model: torch.nn.Module,
              optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return super().state(role, epoch + 1, step, model, optimizer)


class ModelKeyWrong(Checkpointing):
    """The adapter's layout looks for the weights under a key the files do not have: the best
    weights it reports from the best file are lost (the adapter's to fix:
    ``FileLayout(keys={'model': ...})``)."""

    layout = kit.FileLayout(roles=SEED_LAYOUT.roles, keys={"model": "weights"})
