"""A training loop in the shape of pytorch/examples ``imagenet/main.py`` (BSD-3-Clause licence),
written anew from a reading of its ``main_worker``, ``train``, ``validate`` and
``save_checkpoint``, not copied.

A loop function: ``main_worker`` optionally resumes from ``args.resume`` (when the file
exists; otherwise it says so and starts from scratch), then for each epoch calls ``train``,
``validate`` and the scheduler's epoch step, decides ``is_best = acc1 > best_acc1`` (the best
accuracy a module-level global), and calls ``save_checkpoint(state, is_best)``, which writes
``checkpoint.pth.tar`` into the working folder and copies it to ``model_best.pth.tar`` on an
improvement. The file's ``epoch`` is the next epoch to run.

Kept as the original has it: the comparison and ``max`` (``best_acc1`` starts at 0), the
checkpoint's keys, the in-place ``torch.save`` and ``shutil.copyfile``, the resume. Left out:
the data sets and transforms, distributed training, AMP, the meters and the progress display.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader

best_acc1 = 0.0


@dataclass
class Args:
    epochs: int
    start_epoch: int = 0
    resume: str = ""
    arch: str = "linear"


def main_worker(args: Args, model: torch.nn.Module, criterion: Any,
                optimizer: torch.optim.Optimizer, scheduler: Any,
                train_loader: DataLoader[Any], val_loader: DataLoader[Any]) -> None:
    global best_acc1  # noqa: PLW0603 - as the original keeps it
    if args.resume:
        if os.path.isfile(args.resume):
            print(f"=> loading checkpoint '{args.resume}'")
            checkpoint = torch.load(args.resume)
            args.start_epoch = checkpoint["epoch"]
            best_acc1 = checkpoint["best_acc1"]
            model.load_state_dict(checkpoint["state_dict"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            scheduler.load_state_dict(checkpoint["scheduler"])
        else:
            print(f"=> no checkpoint found at '{args.resume}'")
    for epoch in range(args.start_epoch, args.epochs):
        train(train_loader, model, criterion, optimizer, epoch)
        acc1 = validate(val_loader, model, criterion)
        scheduler.step()
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)
        save_checkpoint({"epoch": epoch + 1, "arch": args.arch, "state_dict": model.state_dict(),
                         "best_acc1": best_acc1, "optimizer": optimizer.state_dict(),
                         "scheduler": scheduler.state_dict()}, is_best)


def train(train_loader: DataLoader[Any], model: torch.nn.Module, criterion: Any,
          optimizer: torch.optim.Optimizer, epoch: int) -> None:
    model.train()
    for images, target in train_loader:
        loss = criterion(model(images), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def validate(val_loader: DataLoader[Any], model: torch.nn.Module, criterion: Any) -> float:
    model.eval()
    right = total = 0
    with torch.no_grad():
        for images, target in val_loader:
            right += int((model(images).argmax(1) == target).sum())
            total += len(target)
    return 100.0 * right / max(1, total)


def save_checkpoint(state: dict[str, Any], is_best: bool,
                    filename: str = "checkpoint.pth.tar") -> None:
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, "model_best.pth.tar")
