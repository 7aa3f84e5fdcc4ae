"""The probe: a model trainer built on a seed-shaped base class, recording what the base does.

It uses the base the way a real model trainer does (design.md): builds a model, an optimizer and
an LR scheduler sized from ``len(train_loader)``, registers them with ``add_checkpoint_items``,
loads model weights from ``ckpt`` itself, shuffles with the global RNG, steps every
``grad_accum_steps`` batches, clips through ``clip_and_log_grad_norm``, pools its score through
``reduce_mean`` (or a torchmetrics metric), calls ``save_if_best`` then ``step_patience``, and
tests on ``best_model``. Everything the base decides is emitted as events.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.files import load_dict
from trainspec.conformance.run.scenario import CrashWhere, Scenario, Task
from trainspec.conformance.run.trace import encode
from trainspec.errors import AdapterError

__all__ = ["make_probe", "newest_file", "plain_weights", "pool_with_torchmetrics", "rng_digests",
           "snapshot_file", "task_data", "task_model"]


def plain_weights(state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A state dict's tensors under DDP-independent names, copied to the CPU."""
    return {k.removeprefix("module."): v.detach().to("cpu", copy=True)
            for k, v in state.items() if isinstance(v, torch.Tensor)}


def _digest(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()[:16]


def rng_digests() -> dict[str, str]:
    out = {"torch": _digest(torch.get_rng_state().numpy().tobytes()),
           "python": _digest(repr(random.getstate()).encode())}
    try:
        import numpy
    except ImportError:
        return out
    state: Any = numpy.random.get_state(legacy=True)
    out["numpy"] = _digest(state[1].tobytes() + repr(state[2:]).encode())
    return out


def _draw_host_rngs() -> None:
    """One draw from python's and numpy's global generators: their state then matters to a
    resume, as it does for any pipeline that samples augmentations from them (RES-4)."""
    random.random()
    try:
        import numpy
    except ImportError:
        return
    numpy.random.random()


def newest_file(root: Path, name: str) -> Path | None:
    if not root.exists():
        return None
    found = [p for p in root.rglob(name) if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime_ns) if found else None


def model_state_of(ckpt: Mapping[str, Any]) -> Mapping[str, Any]:
    """The model weights inside a seed-shaped checkpoint (``model_state_dict``)."""
    for key in ("model_state_dict", "model", "state_dict"):
        value = ckpt.get(key)
        if isinstance(value, Mapping) and value:
            return value
    raise AdapterError(
        f"checkpoint: expected the model's weights under 'model_state_dict' (the seed shape: "
        f"add_checkpoint_items(model=...) saves '<name>_state_dict'), found keys "
        f"{sorted(ckpt)[:12]}. Save registered items as '<name>_state_dict'.")


def snapshot_file(path: Path | None) -> dict[str, Any] | None:
    """Identity and content of a checkpoint file, loaded weights-only; None when absent."""
    if path is None:
        return None
    stat = path.stat()
    out: dict[str, Any] = {"path": str(path), "mtime_ns": stat.st_mtime_ns, "size": stat.st_size}
    content, error = load_dict(path)
    if content is None:
        out["error"] = error
        return out
    epoch, step = content.get("epoch"), content.get("train_step")
    out["epoch"] = epoch if isinstance(epoch, int) else None
    out["step"] = step if isinstance(step, int) else None
    try:
        out["weights"] = encode(plain_weights(model_state_of(content)))
    except AdapterError as e:
        out["error"] = str(e)
    return out


def pool_with_torchmetrics(total: float, count: float,
                           device: torch.device | None = None) -> float:
    """The task's "torchmetrics" score: every rank's total and count summed by two synced
    torchmetrics ``SumMetric``s, NaN kept (``nan_strategy="disable"``), then total / count
    (NaN when no rank counted). Two sums rather than a weighted ``MeanMetric``: torchmetrics
    1.9's MeanMetric drops the weight when nan_strategy="disable". Every adapter scoring a
    "torchmetrics" task pools through this, so the metric library is the same for all."""
    from torchmetrics.aggregation import SumMetric

    sums = [SumMetric(nan_strategy="disable").to(device or "cpu") for _ in range(2)]
    sums[0].update(torch.tensor(total, dtype=torch.float64))
    sums[1].update(torch.tensor(count, dtype=torch.float64))
    pooled_total, pooled_count = (float(m.compute()) for m in sums)
    return math.nan if pooled_count == 0 else pooled_total / pooled_count


def task_data(task: Task, seed: int) -> dict[str, TensorDataset]:
    g = torch.Generator().manual_seed(1234 + seed)
    splits = {}
    for name, n in (("train", task.n_train), ("val", task.n_val), ("test", task.n_test)):
        x = torch.randn(n, task.features, generator=g)
        w = torch.arange(1, task.features + 1, dtype=torch.float32)
        y = ((x @ w) > 0).long() % task.classes
        splits[name] = TensorDataset(x, y)
    splits["eval"] = TensorDataset(torch.empty(0, task.features), torch.empty(0, dtype=torch.long))
    return splits


def task_model(task: Task) -> torch.nn.Module:
    if task.hidden:
        return torch.nn.Sequential(torch.nn.Linear(task.features, task.hidden), torch.nn.Tanh(),
                                   torch.nn.Linear(task.hidden, task.classes))
    return torch.nn.Linear(task.features, task.classes)


def _cfg(cfg: Any, dotted: str, default: Any = None) -> Any:
    """Read a dotted key from a typed config or a DictConfig, whichever the trainer holds."""
    node = cfg
    for key in dotted.split("."):
        if isinstance(node, Mapping):
            if key not in node:
                return default
            node = node[key]
        elif hasattr(node, key):
            node = getattr(node, key)
        else:
            return default
    return node


def make_probe(base: type[Any], scenario: Scenario, ctx: RunContext) -> type[Any]:
    """A subclass of ``base`` that trains the scenario's task and records what the base does."""
    task = scenario.task

    class Probe(base):  # type: ignore[misc]
        _trained_this_run = False

        def setup(self, ckpt: dict[str, Any] | None) -> None:
            seed = int(_cfg(self.cfg, "seed", 0))
            splits = task_data(task, seed)
            model = task_model(task)
            if ckpt is not None:
                model.load_state_dict(model_state_of(ckpt))
            self.model = self.make_ddp(model)
            world = int(self.world_size)
            self._sampler: DistributedSampler[Any] | None = None
            if world > 1:
                self._sampler = DistributedSampler(splits["train"], num_replicas=world,
                                                   rank=int(self.rank), shuffle=task.shuffle,
                                                   seed=seed)
                self.train_loader = DataLoader(splits["train"], batch_size=task.batch_size,
                                               sampler=self._sampler)
            else:
                self.train_loader = DataLoader(splits["train"], batch_size=task.batch_size,
                                               shuffle=task.shuffle)
            self.val_loader = DataLoader(splits["val"], batch_size=task.batch_size)
            self.test_loader = DataLoader(splits["test"], batch_size=task.batch_size)
            if task.empty_eval_split:
                self.eval_loader = DataLoader(splits["eval"], batch_size=task.batch_size)
            self.optimizer = self._optimizer()
            num_epochs = int(_cfg(self.cfg, "num_epochs", 1))
            total_steps = max(1, len(self.train_loader) * max(num_epochs, 1))
            items: dict[str, Any] = {"model": self.model, "optimizer": self.optimizer}
            if task.scheduler:
                self.scheduler = torch.optim.lr_scheduler.LinearLR(
                    self.optimizer, start_factor=1.0, end_factor=0.1, total_iters=total_steps)
                items["scheduler"] = self.scheduler
            if task.extra_scheduler:
                self.scheduler2 = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=3)
                items["scheduler2"] = self.scheduler2
            self.add_checkpoint_items(**items)
            self._final = plain_weights(self.model.state_dict())
            ctx.emit({
                "ev": "setup", "ckpt_given": ckpt is not None, "train_len_seen":
                len(self.train_loader), "schedule_steps": total_steps,
                "epoch": int(self.epoch), "train_step": int(self.train_step),
                "cfg_seen": {
                    "num_epochs": num_epochs,
                    "grad_accum_steps": _cfg(self.cfg, "grad_accum_steps"),
                    "ckpt.enable": _cfg(self.cfg, "ckpt.enable"),
                    "save_preds.enable": _cfg(self.cfg, "save_preds.enable"),
                    "wandb.mode": _cfg(self.cfg, "wandb.mode"),
                },
            })

        def _optimizer(self) -> torch.optim.Optimizer:
            module = self.model.module if hasattr(self.model, "module") else self.model
            params = list(module.parameters())
            groups: list[dict[str, Any]] = [{"params": params}]
            if task.extra_param_group:
                groups = [{"params": params[:-1]}, {"params": params[-1:], "lr": task.lr / 2}]
            if task.optimizer == "sgd":
                return torch.optim.SGD(groups, lr=task.lr, momentum=0.9)
            return torch.optim.Adam(groups, lr=task.lr)

        def _state(self) -> dict[str, Any]:
            state: dict[str, Any] = {
                "weights": plain_weights(self.model.state_dict()),
                "optimizer": self.optimizer.state_dict(),
                "rng": rng_digests(),
            }
            if task.scheduler:
                state["scheduler"] = self.scheduler.state_dict()
            return state

        def _best_snapshot(self) -> dict[str, Any] | None:
            if self.rank != 0:
                return None
            return snapshot_file(newest_file(ctx.ckpt_root, "best.pt"))

        def _visible_last_epoch(self) -> int | None:
            snap = snapshot_file(newest_file(ctx.ckpt_root, "last.pt"))
            return None if snap is None else snap.get("epoch")

        def train_epoch(self) -> None:
            epoch = int(self.epoch)
            ctx.crash_point("train_start", epoch)
            self._trained_this_run = True
            ctx.emit({"ev": "train_start", "epoch": epoch, "train_step": int(self.train_step),
                      "state": encode(self._state()),
                      "last_file_epoch": self._visible_last_epoch(),
                      "best_file": self._best_snapshot()})
            if self._sampler is not None:
                self._sampler.set_epoch(epoch)
            accum = int(_cfg(self.cfg, "grad_accum_steps", 1))
            device = self.device
            self.model.train()
            batches = steps = 0
            for i, (x, y) in enumerate(self.train_loader):
                _draw_host_rngs()  # as a data pipeline's augmentations would
                loss = functional.cross_entropy(self.model(x.to(device)), y.to(device)) / accum
                loss.backward()  # type: ignore[no-untyped-call]
                batches += 1
                if (i + 1) % accum == 0:  # no flush of a partial window: debug must force 1
                    self.clip_and_log_grad_norm(self.model)
                    self.optimizer.step()
                    if task.scheduler:
                        self.scheduler.step()
                    self.optimizer.zero_grad()
                    self.train_step += 1
                    steps += 1
            self.optimizer.zero_grad()
            self._final = plain_weights(self.model.state_dict())
            loaders = {n: getattr(self, n, None) for n in ("val_loader", "test_loader",
                                                           "eval_loader")}
            ctx.emit({"ev": "train_end", "epoch": epoch, "train_step": int(self.train_step),
                      "batches": batches, "optimizer_steps": steps,
                      "loader_len": len(self.train_loader),
                      "loader_batch_size": getattr(self.train_loader, "batch_size", None),
                      "loader_lens": {n: (None if v is None else len(v))
                                      for n, v in loaders.items()},
                      "loader_batches": {n: (None if v is None else sum(1 for _ in v))
                                         for n, v in loaders.items()}})
            ctx.crash_point("train_end", epoch)

        def val_epoch(self) -> bool:
            epoch = int(self.epoch)
            phase = "epoch" if self._trained_this_run else "first"
            if phase == "epoch":
                ctx.crash_point("val_start", epoch)
            total, count = scenario.scores.pairs(None if phase == "first" else epoch,
                                                 int(self.rank))
            score = self._pool(total, count)
            weights = plain_weights(self.model.state_dict())
            improved = bool(self.save_if_best(score))
            best = self._best_snapshot()
            if phase == "epoch":
                ctx.crash_point("val_after_save", epoch)
            stop = bool(self.step_patience(improved))
            ctx.emit({"ev": "val", "epoch": epoch, "phase": phase, "score": score,
                      "improved": improved, "stop": stop, "weights": encode(weights),
                      "best_file": best})
            return stop

        def _pool(self, total: float, count: float) -> float:
            if task.metric == "local":
                return math.nan if count == 0 else total / count
            if task.metric == "torchmetrics":
                return pool_with_torchmetrics(total, count, self.device)
            return float(self.reduce_mean(total, count))

        def test(self) -> None:
            best = self.best_model
            if best is not None:
                target = self.model
                try:
                    target.load_state_dict(best)
                except RuntimeError:  # best kept without the DDP wrapper's prefix
                    getattr(target, "module", target).load_state_dict(best)
            ctx.emit({"ev": "test", "used_best": best is not None,
                      "weights": encode(plain_weights(self.model.state_dict()))})

        def probe_end(self) -> dict[str, Any]:
            best = self.best_model
            return {"ev": "end", "epoch": int(self.epoch), "train_step": int(self.train_step),
                    "best_file": self._best_snapshot(),
                    "final_weights": encode(self._final),
                    "best_model": None if best is None else encode(plain_weights(best))}

    Probe.__name__ = Probe.__qualname__ = f"Probe[{base.__name__}]"
    return Probe


def interrupt(how: str, stall_s: float = 0.0) -> None:
    """Interrupt this process the way the scenario asks: a kill, a SIGTERM, a stall, an error."""
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    elif how == "stall":
        deadline = time.monotonic() + stall_s
        while time.monotonic() < deadline:  # alive, answering no collective
            time.sleep(0.05)
        raise RuntimeError(f"trainspec: this rank stalled for {stall_s} s on purpose")
    else:
        raise RuntimeError("trainspec: injected crash")


def crash_matches(scenario: Scenario, where: CrashWhere, epoch: int, rank: int) -> bool:
    crash = scenario.crash
    return crash is not None and crash.where == where and crash.epoch == epoch \
        and crash.rank == rank
