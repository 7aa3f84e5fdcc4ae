"""An example trainer on :class:`~trainspec.reference.BaseTrainer`: an MLP on synthetic data.

Four Gaussian blobs in 16 dimensions, drawn from a fixed generator so that every run and every
rank sees the same splits. Run it on one process or under torchrun (gloo on CPU)::

    python -m trainspec.reference.example --epochs 5
    torchrun --nproc_per_node=2 -m trainspec.reference.example --epochs 5

It prints one line on rank 0: the best epoch, its validation accuracy and the test accuracy.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import logging
import math
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (the conventional alias)
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torchmetrics.classification import MulticlassAccuracy

from trainspec.reference.config import CkptConfig, DdpConfig, TrainConfig, ValConfig
from trainspec.reference.trainer import BaseTrainer

__all__ = ["MLPTrainer", "main", "make_splits"]

NUM_FEATURES = 16
NUM_CLASSES = 4
SPLIT_SIZES = {"train": 512, "val": 128, "test": 128}


def make_splits(seed: int = 1234, noise: float = 1.5) -> dict[str, TensorDataset]:
    """The train, val and test splits: class blobs around fixed centers, noisy enough to overlap.

    Drawn from a private generator, so the data never depends on (or disturbs) the global RNG
    that the trainer seeds, checkpoints and restores.
    """
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(NUM_CLASSES, NUM_FEATURES, generator=gen)
    splits = {}
    for name, size in SPLIT_SIZES.items():
        labels = torch.randint(0, NUM_CLASSES, (size,), generator=gen)
        features = centers[labels] + noise * torch.randn(size, NUM_FEATURES, generator=gen)
        splits[name] = TensorDataset(features, labels)
    return splits


class MLPTrainer(BaseTrainer):
    """A two-layer MLP classifier; validation accuracy picks the best epoch."""

    def setup(self, ckpt: dict[str, Any] | None) -> None:
        extra = self.cfg.extra
        batch_size = int(extra.get("batch_size", 32))
        splits = make_splits(seed=int(extra.get("data_seed", 1234)))

        # Each rank trains on its shard; the sampler's shuffle is seeded and re-drawn per epoch
        # (set_epoch). One rank shuffles with the global torch RNG, which a resume restores.
        self.train_sampler: DistributedSampler[Any] | None = None
        if self.is_distributed:
            self.train_sampler = DistributedSampler(
                splits["train"], num_replicas=self.world_size, rank=self.rank,
                shuffle=True, seed=self.cfg.seed)
        self.train_loader = DataLoader(splits["train"], batch_size=batch_size,
                                       shuffle=self.train_sampler is None,
                                       sampler=self.train_sampler)
        self.val_loader = self._eval_loader(splits["val"], batch_size)
        self.test_loader = self._eval_loader(splits["test"], batch_size)

        net = nn.Sequential(nn.Linear(NUM_FEATURES, int(extra.get("hidden", 32))), nn.ReLU(),
                            nn.Linear(int(extra.get("hidden", 32)), NUM_CLASSES))
        if ckpt is not None:  # resume or finetune: the model's weights are ours to load
            net.load_state_dict(ckpt["model_state_dict"])
        self.model = self.make_ddp(net)
        self.optimizer = torch.optim.AdamW(self.model.parameters(),
                                           lr=float(extra.get("lr", 3e-3)),
                                           weight_decay=self.cfg.weight_decay)
        # Sized from the full loader: setup runs before debug mode truncates it (DBG-5).
        steps_per_epoch = math.ceil(len(self.train_loader) / self.cfg.grad_accum_steps)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            self.optimizer, T_max=max(1, steps_per_epoch * self.cfg.num_epochs))
        self.add_checkpoint_items(model=self.model, optimizer=self.optimizer,
                                  scheduler=self.scheduler)

    def _eval_loader(self, dataset: TensorDataset, batch_size: int) -> DataLoader[Any]:
        # every rank scores its own shard; the metric pools the counts across ranks
        sampler: DistributedSampler[Any] | None = None
        if self.is_distributed:
            sampler = DistributedSampler(dataset, num_replicas=self.world_size, rank=self.rank,
                                         shuffle=False)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler)

    def train_epoch(self) -> None:
        if self.train_sampler is not None:
            self.train_sampler.set_epoch(self.epoch)
        self.model.train()
        accum = self.cfg.grad_accum_steps
        num_batches = len(self.train_loader)
        total_loss, seen = 0.0, 0
        self.optimizer.zero_grad(set_to_none=True)
        for i, (features, labels) in enumerate(self.train_loader):
            is_step = (i + 1) % accum == 0 or i + 1 == num_batches
            # DDP all-reduces gradients on every backward; skip that until the step's last batch
            with self._no_sync(skip=not is_step):
                logits = self.model(features.to(self.device))
                loss = F.cross_entropy(logits, labels.to(self.device))
                (loss / accum).backward()  # type: ignore[no-untyped-call]
            total_loss += float(loss.detach()) * len(labels)
            seen += len(labels)
            if is_step:
                self.clip_and_log_grad_norm()
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.train_step += 1
        self.log("train/loss", self.reduce_mean(total_loss, seen))

    @contextlib.contextmanager
    def _no_sync(self, *, skip: bool) -> Iterator[None]:
        if skip and isinstance(self.model, DistributedDataParallel):
            with self.model.no_sync():
                yield
        else:
            yield

    def accuracy(self, loader: DataLoader[Any]) -> float:
        """Accuracy over the whole split: compute() sums the counts of every rank."""
        metric = MulticlassAccuracy(num_classes=NUM_CLASSES, average="micro").to(self.device)
        self.model.eval()
        with torch.no_grad():
            for features, labels in loader:
                metric.update(self.model(features.to(self.device)), labels.to(self.device))
        return float(metric.compute())

    def val_epoch(self) -> bool:
        acc = self.accuracy(self.val_loader)
        self.log("val/acc", acc)
        return self.step_patience(self.save_if_best(acc, {"acc": acc}))

    def test(self) -> None:
        # the best epoch's weights when any validation improved, the final ones otherwise (BEST-4)
        if self.best_model is not None:
            self.unwrapped(self.model).load_state_dict(self.best_model)
        self.test_acc = self.accuracy(self.test_loader)
        self.log("test/acc", self.test_acc)
        self.logger.info(f"test acc {self.test_acc:.4f} "
                         f"({'best' if self.best_model is not None else 'final'} weights)")

    def summary(self) -> str:
        """The final line: best epoch and its validation accuracy, and the test accuracy."""
        best = ("none" if self.best_epoch is None
                else f"{self.best_epoch} (val acc {self.best_score:.4f})")
        test = getattr(self, "test_acc", None)
        return f"best epoch {best}, test acc {'n/a' if test is None else f'{test:.4f}'}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainspec.reference.example",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--epochs", type=int, default=5, help="epochs to train (default 5)")
    parser.add_argument("--patience", type=int, default=None,
                        help="stop after this many validations without improvement (default: "
                        "never)")
    parser.add_argument("--ckpt-dir", type=Path,
                        default=_default_ckpt_dir(),
                        help="where run folders go (default: %(default)s)")
    parser.add_argument("--debug", action="store_true", help="one batch per split, one epoch")
    parser.add_argument("--resume", metavar="FILE", default=None,
                        help="resume from this checkpoint (a last.pt)")
    return parser.parse_args(argv)


def _default_ckpt_dir() -> Path:
    """A folder of this user's under the temp directory: two users of one machine never
    write into (or resume from) each other's runs."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name in a bare container: the uid still separates
        user = str(os.getuid())
    return Path(tempfile.gettempdir()) / f"trainspec-example-{user}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # torchrun's conventions; a plain `python -m` run is rank 0 of 1
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    cfg = TrainConfig(
        seed=0,
        num_epochs=args.epochs,
        debug=args.debug,
        val=ValConfig(patience=args.patience),
        # one folder for every rank: the run directory inside it is named by rank 0's run id
        ckpt=CkptConfig(dir=str(args.ckpt_dir), load_from=args.resume,
                        resume=args.resume is not None),
        ddp=DdpConfig(timeout_s=60.0),
    )
    trainer = MLPTrainer(cfg, rank=rank, world_size=world_size)
    trainer.train()
    if rank == 0:
        print(trainer.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
