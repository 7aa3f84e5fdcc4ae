"""A faithful port of the seed BaseTrainer (shared/seed/000_646f52b10633b439.txt), weak points kept.

Same logic, line for line where it could be; changed only what cannot run here: W&B, Hydra, tqdm
and the ``core.*`` package do not exist, so

- ``Logger`` is a stand-in over the standard library's logging, with a random run id as W&B's;
- ``save_ckpt`` is a plain function: ``torch.save`` straight onto the path, each registered item as
  ``<name>_state_dict`` (what the seed's own restore reads) and the config as a plain mapping
  under ``config``;
- ``setup_ddp`` calls ``init_process_group`` from torchrun's environment with ``cfg.ddp``'s backend
  and timeout (the seed hands ``cfg.ddp`` to its setup; honouring ``ddp.timeout`` is assumed),
  and ``cleanup_ddp`` destroys the group, from ``__del__`` as in the seed;
- ``make_ddp`` moves the module to ``self.device`` and passes ``device_ids`` on CUDA only, so it
  runs on CPU with gloo;
- the progress bar is a plain ``range``, and the best-effort git diff record of ``_setup_ckpt``
  is left out (it belongs to no clause, and a test must not run git in the repository).

The weak points the spec names stay as they are: unset patience means ``num_epochs``;
checkpoints are written before validation and carry no best score, patience or RNG state;
loading uses ``weights_only=False``; the write is not atomic; an absent item is only warned
about and nothing records an item's class; ``ckpt.model_only`` does not stop ``ckpt.resume``
from restoring the epoch and step; the ``val.first`` verdict is ignored and a resumed run
repeats it; SIGTERM is not handled; ranks decide on their own scores.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import secrets
from abc import abstractmethod
from collections.abc import Callable, Iterator
from copy import deepcopy
from datetime import timedelta
from itertools import chain, islice
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817 (the seed's name)

__all__ = ["SeedTrainer"]

# ---------------------------------------------------------------- stand-ins for core.*

DEFAULT_NO_WEIGHT_DECAY = ["bias", "norm", "_emb"]

_F = TypeVar("_F", bound=Callable[..., Any])


def rank_zero_only(fn: _F) -> _F:
    """Run the method on rank 0 only (the seed's ``core.utils.util.rank_zero_only``)."""

    @functools.wraps(fn)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "rank", 0) == 0:
            return fn(self, *args, **kwargs)
        return None

    return wrapped  # type: ignore[return-value]


def expand_path(path: object) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(str(path))))


def get_device(rank: int) -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cpu")


def seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


def setup_ddp(rank: int, world_size: int, ddp_cfg: Any) -> None:
    """Join torchrun's process group (env:// from MASTER_ADDR/PORT) on several ranks."""
    if world_size <= 1 or dist.is_initialized():
        return
    backend = (ddp_cfg.get("backend") if ddp_cfg is not None else None) or (
        "nccl" if torch.cuda.is_available() else "gloo")
    timeout_s = ddp_cfg.get("timeout") if ddp_cfg is not None else None
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=None if timeout_s is None else timedelta(seconds=timeout_s))


def cleanup_ddp() -> None:
    try:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except TypeError:  # called from __del__ at interpreter exit, module globals already gone
        pass


def param_groups(*modules: torch.nn.Module, weight_decay: float,
                 no_weight_decay: list[str]) -> list[dict[str, Any]]:
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for module in modules:
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            if param.ndim <= 1 or any(n in name for n in no_weight_decay):
                no_decay.append(param)
            else:
                decay.append(param)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def _plain_config(cfg: DictConfig) -> Any:
    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if value is None or isinstance(value, bool | int | float | str):
            return value
        return str(value)

    return plain(OmegaConf.to_container(cfg, resolve=True))


def save_ckpt(filepath: Path, *, train_step: int, epoch: int, run_id: str, cfg: DictConfig,
              **items: Any) -> Path:
    """``torch.save`` of progress, config and every item's state, straight onto ``filepath``."""
    state: dict[str, Any] = {"train_step": train_step, "epoch": epoch, "run_id": run_id,
                             "config": _plain_config(cfg)}
    for name, item in items.items():
        target = item.module if isinstance(item, DDP) else item
        if hasattr(target, "state_dict"):
            state[f"{name}_state_dict"] = target.state_dict()
    torch.save(state, filepath)
    return filepath


class Logger:
    """The seed's W&B logger, reduced to the standard library."""

    def __init__(self, rank: int, disable_pbar: bool = False) -> None:
        self.rank = rank
        self.disable_pbar = disable_pbar
        self._log = logging.getLogger(f"{__name__}.rank{rank}")
        self.run_id = secrets.token_hex(4)
        self.metrics: dict[str, Any] = {}
        self.wandb_mode = "disabled"

    def init_wandb(self, wandb_cfg: Any, log_code: bool = False) -> None:
        self.wandb_mode = str(wandb_cfg.mode)

    def save_config(self, cfg: DictConfig) -> None:
        self._log.debug("config: %s", OmegaConf.to_container(cfg))

    def set_epoch_pbar(self, pbar: object) -> None:
        return None

    def info(self, msg: str) -> None:
        if self.rank == 0:
            self._log.info(msg)

    def warn(self, msg: str) -> None:
        if self.rank == 0:
            self._log.warning(msg)

    def log(self, name: str, value: Any, pbar: bool = True) -> None:
        self.metrics[name] = value

    def log_dict(self, values: dict[str, Any]) -> None:
        self.metrics.update(values)

    def push(self) -> None:
        self.metrics.clear()


# ---------------------------------------------------------------- the seed


class _OneBatchLoader:
    """A loader capped at its first batch, for ``cfg.debug`` runs.

    Iteration and ``len`` see the cap, everything else passes through to the loader.
    """

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        return islice(iter(self.loader), 1)

    def __len__(self) -> int:
        return min(len(self.loader), 1)  # an empty split stays empty

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class SeedTrainer:
    """The epoch loop, and everything around it that depends on neither task nor model.

    Logging, checkpointing, DDP, early stopping and best-model selection live here;
    a subclass supplies :meth:`setup` and the epoch internals.
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer

    def __init__(self, cfg: DictConfig, rank: int, world_size: int) -> None:
        assert cfg.get("data_root"), (
            "data_root is unset: set BWB_DATA_ROOT, its per-build override, or pass data_root="
        )
        seed_everything(cfg.seed)
        setup_ddp(rank, world_size, cfg.ddp)
        self.cfg = cfg
        self.precision = cfg.precision
        self.rank = rank
        self.world_size = world_size
        self.is_distributed = dist.is_initialized()
        self.device = get_device(rank)
        self.train_step = 0
        self.epoch = 0
        self._grad_norms: list[float] = []
        self.to_ckpt: dict[str, Any] = {}
        if self.cfg.debug:
            self.cfg.wandb.mode = "disabled"
            self.cfg.ckpt.enable = False
            self.cfg.num_workers = 0
            self.cfg.num_epochs = min(self.cfg.num_epochs, 1)  # 0 stays eval-only
            if "grad_accum_steps" in self.cfg:
                self.cfg.grad_accum_steps = 1  # else no batch ever reaches an optimizer step
            if OmegaConf.select(self.cfg, "save_preds.enable"):
                self.cfg.save_preds.enable = False  # a truncated file scores as a whole one
        self._setup_logger()
        self.logger.save_config(self.cfg)
        self.best_model: dict[str, Any] | None = None
        self.best_metrics: dict[str, Any] = {}
        self._best_tracking_initialized = False
        ckpt = self._load_ckpt()
        self.setup(ckpt)
        self._restore_checkpoint_items(ckpt)
        if self.cfg.debug:
            self._truncate_loaders()
        self._setup_ckpt()

    def __del__(self) -> None:
        cleanup_ddp()

    def train(self) -> dict[str, Any] | None:
        """Run the full training loop.

        Iterates over epochs, calling :meth:`train_epoch` each epoch and :meth:`val_epoch`
        every ``val.every_n_epochs`` epochs and at the final epoch. Checkpoints are saved after
        each epoch. Supports early stopping via the return value of :meth:`val_epoch`.
        """
        if self.cfg.val.first:
            self.val_epoch()
        epoch_pbar = range(self.epoch, self.cfg.num_epochs)  # the seed's tqdm bar
        self.logger.set_epoch_pbar(epoch_pbar)
        early_stop = False
        for epoch in epoch_pbar:
            self.epoch = epoch
            self.barrier()
            self.train_epoch()
            self.log_epoch_grad_norm()
            self._save_checkpoint()
            self._save_last_checkpoint()
            should_do_val = (self.epoch % self.cfg.val.every_n_epochs == 0) or (  # if user asked
                self.epoch == self.cfg.num_epochs - 1  # if last epoch
            )
            if should_do_val:
                early_stop = self.val_epoch()
            if early_stop:
                break
        if self.cfg.test.get("enable", True):
            self.test()
        self.log_training_results()
        result: dict[str, Any] | None = self.__dict__.get("return_value", None)
        return result

    @abstractmethod
    def train_epoch(self) -> None:
        """Perform a training epoch."""

    @abstractmethod
    def val_epoch(self) -> bool:
        """Perform a validation epoch; True if early stopping should be triggered."""

    def test(self) -> None:
        """Perform a test epoch, at the end of training if `test.enable` is True."""
        self.logger.warn("Test method not implemented for this Trainer, doing nothing.")

    def log_training_results(self) -> None:
        """Log the training results, at the end of training."""

    @abstractmethod
    def setup(self, ckpt: dict[str, Any] | None) -> None:
        """Set up the trainer, after distributed, the checkpoint and logging."""

    def _setup_logger(self) -> None:
        self.logger = Logger(self.rank, disable_pbar=self.cfg.get("disable_pbar", False))
        self.logger.init_wandb(self.cfg.wandb, log_code=self.cfg.get("log_code", False))
        self.logger.info(f"Run ID: {self.logger.run_id} (seed {self.cfg.seed})")
        if self.cfg.wandb.mode != "online":
            self.logger.warn(f"W&B mode: {self.cfg.wandb.mode}")

    def _truncate_loaders(self) -> None:
        """Cap every split at one batch, after :meth:`setup` sized what it sizes."""
        for name in ("train_loader", "val_loader", "test_loader", "eval_loader"):
            loader = getattr(self, name, None)
            if loader is not None:
                setattr(self, name, _OneBatchLoader(loader))
        self.logger.warn(
            f"Debug mode: one batch per split, {self.cfg.num_epochs} epoch(s), "
            "no W&B or checkpoints"
        )

    def add_checkpoint_items(self, **kwargs: Any) -> None:
        """Add items to the checkpoint dictionary, saved and restored by state_dict."""
        self.to_ckpt.update(kwargs)

    def _restore_checkpoint_items(self, ckpt: dict[str, Any] | None) -> None:
        """Load the state of everything :meth:`add_checkpoint_items` registered (resume only)."""
        if ckpt is None or not self.cfg.ckpt.resume or self.cfg.ckpt.model_only:
            return
        restored, absent = [], []
        for name, item in self.to_ckpt.items():
            if name == "model" or not hasattr(item, "load_state_dict"):
                continue
            key = f"{name}_state_dict"
            if key not in ckpt:
                absent.append(key)
                continue
            target = item.module if isinstance(item, DDP) else item
            try:
                target.load_state_dict(ckpt[key])
            except (ValueError, RuntimeError) as e:
                raise RuntimeError(
                    f"Cannot restore '{name}' from {self.cfg.ckpt.load_from}: {e}. State "
                    "that no longer fits the run means this is a finetune rather than a "
                    "resume: pass ckpt.model_only=true or ckpt.resume=false."
                ) from None
            restored.append(name)
        if restored:
            self.logger.info(f"Resumed state: {', '.join(restored)}")
        if absent:
            self.logger.warn(f"Checkpoint carries no {', '.join(absent)}; left at init")

    @rank_zero_only
    def _setup_ckpt(self) -> None:
        if not self.cfg.ckpt.enable:
            self.logger.warn("Checkpointing disabled")
            self.ckpt_dir: Path | None = None
            return
        # Create checkpoint directory, e.g. <ckpt.dir>/<trainer>_<run_dir>/best.pt
        trainer = (self.cfg.get("hydra_choices") or {}).get("trainer")
        run_dir = f"{trainer}_{self.logger.run_id}" if trainer else self.logger.run_id
        self.ckpt_dir = (expand_path(self.cfg.ckpt.dir) / run_dir).resolve()
        self.ckpt_dir.mkdir(exist_ok=True, parents=True)
        self.logger.info(f"Checkpoint directory: {self.ckpt_dir}")
        # (the seed records the git diff and commit here, best effort; left out, see above)
        if len(self.to_ckpt) > 0:
            self.logger.info(f"Checkpoints will track: {list(self.to_ckpt.keys())}")
        else:
            self.logger.warn("No items specified for checkpointing")

    @rank_zero_only
    def _save_checkpoint(self) -> None:
        if self.ckpt_dir is None:
            return
        every_n_epochs = self.cfg.ckpt.every_n_epochs
        if (every_n_epochs is None) or (self.epoch % every_n_epochs != 0):
            return
        self.last_ckpt_path = save_ckpt(
            filepath=self.ckpt_dir / f"epoch_{self.epoch}.pt",
            train_step=self.train_step,
            epoch=self.epoch,
            run_id=self.logger.run_id,
            cfg=self.cfg,
            **self.to_ckpt,
        )

    @rank_zero_only
    def _save_last_checkpoint(self) -> None:
        if self.ckpt_dir is None:
            return
        if not self.cfg.ckpt.get("save_last", True):
            return
        self.last_ckpt_path = save_ckpt(
            filepath=self.ckpt_dir / "last.pt",
            train_step=self.train_step,
            epoch=self.epoch,
            run_id=self.logger.run_id,
            cfg=self.cfg,
            **self.to_ckpt,
        )

    @rank_zero_only
    def _save_best_checkpoint(self) -> None:
        if self.ckpt_dir is None:
            return
        self.best_ckpt_path = save_ckpt(
            filepath=self.ckpt_dir / "best.pt",
            train_step=self.train_step,
            epoch=self.epoch,
            run_id=self.logger.run_id,
            cfg=self.cfg,
            **self.to_ckpt,
        )

    def _load_ckpt(self) -> dict[str, Any] | None:
        if self.cfg.ckpt.load_from is None:
            return None
        ckpt_path = expand_path(self.cfg.ckpt.load_from)
        if not ckpt_path.exists():
            # try this other path
            ckpt_path = expand_path(self.cfg.ckpt.dir) / self.cfg.ckpt.load_from
            if not ckpt_path.exists():
                raise ValueError(
                    f"Checkpoint not found at {self.cfg.ckpt.load_from} or {ckpt_path}"
                )
        self.cfg.ckpt.load_from = ckpt_path
        self.logger.info(f"Loading checkpoint {ckpt_path}")
        ckpt: dict[str, Any] = torch.load(
            ckpt_path,
            map_location=self.device,
            weights_only=False,
        )
        if self.cfg.ckpt.resume:
            self.epoch = ckpt["epoch"] + 1
            self.train_step = ckpt["train_step"]
            self.logger.info(
                f"Resuming from: epoch = {self.epoch}, train_step = {self.train_step}")
        return ckpt

    def make_ddp(self, module: torch.nn.Module,
                 find_unused_parameters: bool = False) -> torch.nn.Module:
        """Wrap a module in DistributedDataParallel if running in distributed mode."""
        if self.is_distributed:
            if self.device.type == "cuda":  # the port's one change: device_ids on CUDA only
                to_sync_bn: Any = torch.nn.SyncBatchNorm.convert_sync_batchnorm
                ret = to_sync_bn(module.to(self.device))
                return DDP(ret, device_ids=[self.device.index],
                           find_unused_parameters=find_unused_parameters)
            return DDP(module.to(self.device), find_unused_parameters=find_unused_parameters)
        return module

    def barrier(self) -> None:
        """Synchronize all processes in the distributed group."""
        if self.is_distributed:
            dist.barrier()

    def reduce_mean(self, total: float, count: float) -> float:
        """Mean over the whole split rather than over this rank's shard of it."""
        if self.is_distributed:
            pair = torch.tensor([total, count], dtype=torch.float64, device=self.device)
            dist.all_reduce(pair)
            total, count = pair.tolist()
        return float("nan") if count == 0 else total / count

    def reset_best_tracking(self, minimize: bool | None = None) -> None:
        """Initialize the best-score bookkeeping used by :meth:`save_if_best`."""
        if minimize is None:
            minimize = bool(OmegaConf.select(self.cfg, "val.minimize", default=False))
        self.val_minimize = minimize
        patience = OmegaConf.select(self.cfg, "val.patience")
        if patience is None:
            # unset patience means never stop early, and num_epochs is that bound
            patience = OmegaConf.select(self.cfg, "num_epochs", default=float("inf"))
        self.patience = self._initial_patience = patience
        self.start_patience = OmegaConf.select(self.cfg, "val.start_patience", default=0)
        self.best_val = float("inf") if self.val_minimize else float("-inf")
        self.best_epoch = 0
        self.best_model = None
        self.best_metrics = {}
        self._best_tracking_initialized = True

    def save_if_best(self, score: float, metrics: dict[str, Any] | None = None) -> bool:
        """Keep this epoch's weights if its score is the best seen so far."""
        if not self._best_tracking_initialized:
            self.reset_best_tracking()
        # NaN compares False against anything, so an unguarded NaN would read as an
        # improvement and then win every later comparison as the incumbent best
        if not math.isfinite(score):
            return False
        sign = -1 if self.val_minimize else 1
        if sign * score <= sign * self.best_val:
            return False
        if metrics is not None:
            self.best_val_metrics = {f"best/val/{k}": v for k, v in metrics.items()}
            self.best_val_metrics["best/val/avg"] = score
            self.best_metrics = self.best_val_metrics | {"best/epoch": self.epoch}
            self.logger.log_dict(self.best_metrics)
        self.best_val = score
        self.best_epoch = self.epoch
        # snapshot on the host: it is held for the whole run and only read at test time
        self.best_model = {
            k: v.detach().to("cpu", copy=True) if torch.is_tensor(v) else deepcopy(v)
            for k, v in self.model.state_dict().items()
        }
        self._save_best_checkpoint()
        return True

    def step_patience(self, improved: bool) -> bool:
        """Advance the early-stopping counter; True once patience is exhausted."""
        if not self._best_tracking_initialized:
            self.reset_best_tracking()
        if improved:
            self.patience = self._initial_patience
        elif self.epoch >= self.start_patience:
            self.patience -= 1
        if self.patience <= 0:
            self.logger.info(
                f"Early stopping triggered at epoch {self.epoch}, best epoch was "
                f"{self.best_epoch}"
            )
            return True
        return False

    def get_param_groups(self, *modules: torch.nn.Module) -> list[dict[str, Any]]:
        """Split parameters into a weight-decayed and an undecayed optimizer group."""
        return param_groups(
            *(modules or (self.model,)),
            weight_decay=self.cfg.weight_decay,
            no_weight_decay=self.cfg.get("no_weight_decay", DEFAULT_NO_WEIGHT_DECAY),
        )

    def log_lr(self) -> None:
        """Log the current learning rate for each optimizer parameter group."""
        for i, param_group in enumerate(self.optimizer.param_groups):
            name = param_group.get("name", f"group_{i}")
            self.logger.log(f"lr/{name}", param_group["lr"])

    def clip_and_log_grad_norm(self, *modules: torch.nn.Module) -> torch.Tensor:
        """Clip gradients in place and log the pre-clip norm as ``train/grad_norm``."""
        self.log_param_grad_stats(*modules)
        max_norm = self.cfg.get("grad_clip")
        grad_norm = torch.nn.utils.clip_grad_norm_(
            chain.from_iterable(m.parameters() for m in (modules or (self.model,))),
            max_norm=float("inf") if max_norm is None else max_norm,
        )
        if self.cfg.get("log_train_step", True):
            self.logger.log("train/grad_norm", grad_norm.item(), pbar=False)
        else:
            self._grad_norms.append(grad_norm.item())
        return grad_norm

    def log_epoch_grad_norm(self) -> None:
        """Log the epoch-mean grad norm, the counterpart to the epoch-mean train loss."""
        if self._grad_norms:
            self.logger.log("train/grad_norm", sum(self._grad_norms) / len(self._grad_norms))
            self._grad_norms.clear()

    def log_param_grad_stats(self, *modules: torch.nn.Module) -> None:
        """Log per-parameter weight norm, grad norm, and grad-to-weight ratio."""
        weights, grads = self.cfg.get("log_weights"), self.cfg.get("log_grads")
        if not (weights or grads):
            return
        every_n = self.cfg.get("log_stats_every_n_steps", 1)
        if every_n <= 0 or self.train_step % every_n:
            return
        named = [
            (name.removeprefix("module."), param)  # keys match across DDP and single-GPU
            for module in (modules or (self.model,))
            for name, param in module.named_parameters()
            if param.requires_grad
        ]
        if not named:
            return
        # one host sync, not one per parameter
        zero = torch.zeros((), device=self.device)
        norms = torch.stack(
            [p.detach().norm().float() for _, p in named]
            + [zero if p.grad is None else p.grad.detach().norm().float() for _, p in named]
        ).tolist()
        w_norms, g_norms = norms[: len(named)], norms[len(named):]
        stats: dict[str, float] = {}
        for (name, param), w, g in zip(named, w_norms, g_norms, strict=True):
            if weights:
                stats[f"weight_norm/{name}"] = w
            if grads and param.grad is not None:
                stats[f"grad_norm/{name}"] = g
                if w > 0:
                    stats[f"grad_weight_ratio/{name}"] = g / w
        if weights:
            stats["weight_norm/total"] = sum(w * w for w in w_norms) ** 0.5
        self.logger.log_dict(stats)

    def push_logs(self) -> None:
        """Flush accumulated logs, including current epoch and step."""
        self.logger.log("train/epoch", self.epoch)
        self.logger.log("train/step", self.train_step)
        self.logger.push()

    def get_best_pbar_metrics(self) -> dict[str, Any]:
        """Return the best validation metrics formatted for the epoch progress bar."""
        if hasattr(self, "best_val_metrics"):
            return {k.replace("best/val/", ""): v for k, v in self.best_val_metrics.items()}
        return {}
