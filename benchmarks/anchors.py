"""Anchor arms of the trainer benchmark: the same model and data through Lightning's and HF's
Trainer, configured for speed as a user would (CPU, no logger, no progress bar, no model
summary), checkpoints off or on.

Every arm does the bare loop's work: the same model from the same seed, the same data, the same
AdamW (passed in, so no framework swaps in its fused variant), no gradient clipping, no LR
schedule, one validation pass per epoch. Checkpoints on, each keeps what the reference keeps:
the newest checkpoint every epoch and the best one by validation loss (Lightning:
``ModelCheckpoint(monitor="val_loss", save_top_k=1, save_last=True)``; HF:
``save_strategy="epoch"``, ``save_total_limit=2``, ``metric_for_best_model="eval_loss"``, as
the project's HF adapter does). Only the fit is timed (``Trainer.fit`` / ``Trainer.train``),
with the framework's own start-up of a fit (callbacks, loops, data checks) inside it, as the
reference's ``train()`` is; building the Trainer object is not timed, as building the
reference's trainer is not. Each framework is imported lazily, inside its arm.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (the conventional alias)
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.workload import SEED, Clock, ModelSize, Timing, make_model, make_optimizer, splits

__all__ = ["ANCHORS", "Arm", "hf_loop", "lightning_loop", "unavailable"]

# the frameworks' chatter (start-up banners, "few dataloader workers" hints): not ours to show
_QUIET = ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning",
          "transformers", "accelerate")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    levels = {name: logging.getLogger(name).level for name in _QUIET}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in _QUIET:
                logging.getLogger(name).setLevel(logging.ERROR)
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _folder(ckpt_dir: Path | None, scratch: Path) -> Path:
    """Where a framework may write: the checkpoint folder emptied (so no run finds an earlier
    run's files: Lightning would version its names, HF would rotate them), or ``scratch``."""
    if ckpt_dir is None:
        return scratch
    shutil.rmtree(ckpt_dir, ignore_errors=True)
    ckpt_dir.mkdir(parents=True)
    return ckpt_dir


# ------------------------------------------------------------------------------ Lightning

def lightning_loop(size: ModelSize, ckpt_dir: Path | None, scratch: Path) -> Timing:
    """``lightning.Trainer.fit`` on the workload; returns the time the fit took."""
    import lightning
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint

    clock = Clock()

    class FirstStep(Callback):
        def on_train_batch_start(self, *args: object) -> None:
            clock.first_step()

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(SEED)
            self.net = make_model(size)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            features, labels = batch
            return F.cross_entropy(self.net(features), labels)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            features, labels = batch
            self.log("val_loss", F.cross_entropy(self.net(features), labels),
                     batch_size=len(labels))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return make_optimizer(self.net)

    root = _folder(ckpt_dir, scratch)
    train, val = splits(size)
    module = Module()
    callbacks: list[Callback] = [FirstStep()]
    if ckpt_dir is not None:
        callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, monitor="val_loss", mode="min",
                                         save_top_k=1, save_last=True))
    with _quiet():
        trainer = lightning.Trainer(
            accelerator="cpu", devices=1, max_epochs=size.epochs, logger=False,
            enable_progress_bar=False, enable_model_summary=False,
            enable_checkpointing=ckpt_dir is not None, callbacks=callbacks,
            num_sanity_val_steps=0, default_root_dir=root)
        loaders = (DataLoader(train, batch_size=size.batch_size, shuffle=True),
                   DataLoader(val, batch_size=size.batch_size))
        with clock:
            trainer.fit(module, *loaders)
    return clock.timing


# ----------------------------------------------------------------------------- HF Trainer

class _Classifier(nn.Module):
    """The workload's model in the shape HF's Trainer calls: keyword inputs, a loss out."""

    def __init__(self, size: ModelSize) -> None:
        super().__init__()
        torch.manual_seed(SEED)
        self.net = make_model(size)

    def forward(self, features: torch.Tensor,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits: torch.Tensor = self.net(features)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out


def _collate(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {"features": torch.stack([b[0] for b in batch]),
            "labels": torch.stack([b[1] for b in batch])}


def hf_loop(size: ModelSize, ckpt_dir: Path | None, scratch: Path) -> Timing:
    """``transformers.Trainer.train`` on the workload; returns the time the training took."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments

    clock = Clock()

    class FirstStep(TrainerCallback):
        def on_step_begin(self, *args: object, **kwargs: object) -> None:
            clock.first_step()

    root = _folder(ckpt_dir, scratch)
    train, val = splits(size)
    model = _Classifier(size)
    saving: dict[str, Any] = {"save_strategy": "no"} if ckpt_dir is None else {
        "save_strategy": "epoch", "save_total_limit": 2,
        "metric_for_best_model": "eval_loss", "greater_is_better": False}
    with _quiet():
        args = TrainingArguments(
            output_dir=str(root), num_train_epochs=size.epochs,
            per_device_train_batch_size=size.batch_size,
            per_device_eval_batch_size=size.batch_size, eval_strategy="epoch",
            prediction_loss_only=True, max_grad_norm=0.0, lr_scheduler_type="constant",
            seed=SEED, use_cpu=True, report_to="none", disable_tqdm=True,
            logging_strategy="no", dataloader_pin_memory=False, remove_unused_columns=False,
            **saving)
        trainer = Trainer(model=model, args=args, train_dataset=_Tuples(train),
                          eval_dataset=_Tuples(val), data_collator=_collate,
                          optimizers=(make_optimizer(model.net), None),
                          callbacks=[FirstStep()])
        # with tqdm off the Trainer prints every evaluation's metrics: a user who asked for
        # no logging removes the printer too
        trainer.remove_callback(PrinterCallback)
        with clock:
            trainer.train()
    return clock.timing


class _Tuples(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A TensorDataset with a length HF's Trainer can read (it sizes epochs from it)."""

    def __init__(self, data: TensorDataset) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        features, labels = self.data[index]
        return features, labels


# display name -> (import name, the arm)
Arm = Callable[[ModelSize, Path | None, Path], Timing]
ANCHORS: dict[str, tuple[str, Arm]] = {
    "Lightning": ("lightning", lightning_loop),
    "HF Trainer": ("transformers", hf_loop),
}


def unavailable(name: str) -> str | None:
    """Why an anchor cannot run here (its framework not installed), or None."""
    module = ANCHORS[name][0]
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed"
    return None
