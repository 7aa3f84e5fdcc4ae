"""The seed's BaseTrainer, in its shape and style, with every weak point the spec names fixed.

Written from the seed (design.md, "The seed shape") and the spec pages alone, without the
reference trainer: it is a second, independently written trainer that meets every clause, so
that the suite can be shown to raise no false alarm on a conformant base class. What changed
against the seed, clause by clause:

- checkpoints of an epoch are written after its validation and carry the best score, epoch and
  weights, the patience counter and every rank's RNG states (RES-3, RES-4);
- every write is atomic: a temporary file in the same folder, fsync, ``os.replace`` (CKPT-2);
- checkpoints are read with ``torch.load(weights_only=True)`` (CKPT-3), and a missing or unreadable
  one raises an error naming the paths tried or the file (CKPT-4);
- a resume restores every registered item or none, and refuses state that no longer fits with
  the item's name and the finetune way out (RES-2, RES-5); ``ckpt.model_only`` wins over
  ``ckpt.resume`` (FT-2);
- unset patience never stops (PAT-4); ``val.first`` is an ordinary validation at epoch 0 whose
  verdict is honoured, and a resumed run does not repeat it (LOOP-2);
- the score is rank 0's, broadcast, and the stop verdict is reduced over ranks (DIST-2, DIST-3);
  rank 0 alone writes, and a barrier follows every epoch's files (DIST-4);
- ``ddp.timeout`` bounds every collective (DIST-5); SIGTERM is turned into a flag read at the
  epoch boundary: the epoch is finished, ``last.pt`` written, and the process exits with 143
  (CKPT-5); the process group is left at the end of :meth:`train`;
- debug mode derives its settings on the run's own copy of the config (DBG-2).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import secrets
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from copy import deepcopy
from datetime import timedelta
from itertools import chain, islice
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch.nn.parallel import DistributedDataParallel

__all__ = [
    "CheckpointNotFoundError",
    "CheckpointUnreadableError",
    "CorrectSeedTrainer",
    "ResumeMismatchError",
]

PREEMPTED_EXIT_CODE = 128 + int(signal.SIGTERM)  # 143, what a shell reports for SIGTERM


class CheckpointNotFoundError(FileNotFoundError):
    """``ckpt.load_from`` names no file, at any of the places it may be."""


class CheckpointUnreadableError(RuntimeError):
    """The checkpoint exists but cannot be read: truncated, corrupt, or not weights-only."""


class ResumeMismatchError(RuntimeError):
    """Checkpoint state that no longer fits the run, under ``ckpt.resume``."""


class _Preempted(Exception):
    """Raised at an epoch boundary after SIGTERM, once the resumable checkpoint is written."""


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


def _expand(path: object) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(str(path))))


def _unwrap(item: Any) -> Any:
    return item.module if isinstance(item, DistributedDataParallel) else item


def _class_name(item: Any) -> str:
    cls = type(_unwrap(item))
    return f"{cls.__module__}.{cls.__qualname__}"


def _plain(value: Any) -> Any:
    """What a weights-only load accepts: plain containers, numbers, strings; else the repr."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str | torch.Tensor):
        return value
    return str(value) if isinstance(value, os.PathLike) else repr(value)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def write_checkpoint(path: Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` so that a crash at any point leaves the old file whole.

    The bytes go to a temporary file next to ``path`` (same file system, so the rename is
    atomic), are flushed to disk, and only then replace ``path``.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # the rename itself reaches the disk
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return path


def _capture_rng() -> dict[str, Any]:
    """This process's generators, in a form a weights-only load gives back."""
    version, internal, gauss = random.getstate()
    # the 625 words of Python's generator as one tensor: quick to save and to load weights-only
    state: dict[str, Any] = {"python": [version, torch.tensor(internal, dtype=torch.int64), gauss],
                             "torch": torch.get_rng_state()}
    try:
        import numpy
    except ImportError:
        pass
    else:
        legacy: Any = numpy.random.get_state(legacy=True)
        name, keys, pos, has_gauss, cached = legacy
        state["numpy"] = [str(name), torch.from_numpy(keys.astype(numpy.int64)), int(pos),
                          int(has_gauss), float(cached)]
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _restore_rng(state: Mapping[str, Any]) -> None:
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((int(version), tuple(int(x) for x in internal.tolist()), gauss))
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy

        name, keys, pos, has_gauss, cached = state["numpy"]
        numpy.random.set_state((name, keys.numpy().astype(numpy.uint32), int(pos),
                                int(has_gauss), float(cached)))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(state["cuda"]))


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    with contextlib.suppress(ImportError):
        import numpy

        numpy.random.seed(seed)


def _default_param_groups(modules: tuple[torch.nn.Module, ...], weight_decay: float,
                          no_weight_decay: list[str]) -> list[dict[str, Any]]:
    decayed: list[torch.nn.Parameter] = []
    undecayed: list[torch.nn.Parameter] = []
    for module in modules:
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            skip = param.ndim <= 1 or any(pattern in name for pattern in no_weight_decay)
            (undecayed if skip else decayed).append(param)
    return [{"params": decayed, "weight_decay": weight_decay, "name": "decay"},
            {"params": undecayed, "weight_decay": 0.0, "name": "no_decay"}]


class CorrectSeedTrainer(ABC):
    """The epoch loop, and everything around it that depends on neither task nor model.

    Logging, checkpointing, DDP, early stopping and best-model selection live here; a subclass
    supplies :meth:`setup` and the epoch internals.
    """

    loader_names: ClassVar[tuple[str, ...]] = ("train_loader", "val_loader", "test_loader",
                                               "eval_loader")
    model: torch.nn.Module

    def __init__(self, cfg: DictConfig, rank: int, world_size: int) -> None:
        """Join the process group, load the checkpoint if any, and call :meth:`setup`.

        Args:
            cfg: the run's configuration; the trainer works on its own copy of it.
            rank: this process's rank (torchrun's ``RANK``).
            world_size: the number of ranks.
        """
        assert cfg.get("data_root"), (
            "data_root is unset: set BWB_DATA_ROOT, its per-build override, or pass data_root="
        )
        # debug mode rewrites settings; it does so on the run's copy, never the caller's config
        self.cfg: DictConfig = deepcopy(cfg)
        self.rank = rank
        self.world_size = world_size
        self.logger = logging.getLogger(f"{__name__}.rank{rank}")
        self._owns_group = False
        _seed_everything(int(self.cfg.seed))
        self.device = self._pick_device()
        self.is_distributed = self._join_process_group()
        self.precision = str(self.cfg.get("precision", "fp32"))
        self.train_step = 0
        self.epoch = 0
        self.completed_epoch = -1  # the epoch a checkpoint written now would say
        self.to_ckpt: dict[str, Any] = {}
        self.ckpt_dir: Path | None = None
        self.ckpt_path: Path | None = None
        self.is_resumed = False
        self.metrics: dict[str, float] = {}
        self._grad_norms: list[float] = []
        self._sigterm = False
        self._stopped = False
        try:
            if self.cfg.debug:
                self.cfg.wandb.mode = "disabled"
                self.cfg.ckpt.enable = False
                self.cfg.num_workers = 0
                self.cfg.num_epochs = min(self.cfg.num_epochs, 1)  # 0 stays eval-only
                if "grad_accum_steps" in self.cfg:
                    self.cfg.grad_accum_steps = 1  # else no batch ever reaches a step
                if OmegaConf.select(self.cfg, "save_preds.enable"):
                    self.cfg.save_preds.enable = False  # a truncated file scores as whole
            self.run_id = self._agree_on_run_id()
            self.logger.info("Run ID: %s (seed %s)", self.run_id, self.cfg.seed)
            self.best_model: dict[str, torch.Tensor] | None = None
            self.best_metrics: dict[str, float] = {}
            self.reset_best_tracking()
            ckpt = self._load_ckpt()
            self.setup(ckpt)
            if ckpt is not None and self.is_resumed:
                self._resume(ckpt)
            if self.cfg.debug:
                self._truncate_loaders()
            self._setup_ckpt()
        except BaseException:
            self._leave_process_group(healthy=False)
            raise

    # ------------------------------------------------------------------ hooks

    @abstractmethod
    def setup(self, ckpt: dict[str, Any] | None) -> None:
        """Build model, data and optimizer; register them with :meth:`add_checkpoint_items`.

        ``ckpt`` is the loaded checkpoint or None; loading the model's weights from it is the
        subclass's job. Everything else registered is restored by the base, on resume only.
        """

    @abstractmethod
    def train_epoch(self) -> None:
        """Perform a training epoch."""

    @abstractmethod
    def val_epoch(self) -> bool:
        """Validate; return True to stop early (``step_patience(save_if_best(score))``)."""

    def test(self) -> None:
        """Called once after the loop when ``test.enable``."""
        self.logger.warning("Test method not implemented for this Trainer, doing nothing.")

    def log_training_results(self) -> None:  # noqa: B027 (optional hook)
        """Called at the end of training."""

    # ------------------------------------------------------------------ the loop

    def train(self) -> dict[str, Any] | None:
        """Run ``val.first``, the epochs from ``epoch`` to ``num_epochs - 1``, then the test.

        Each epoch is trained, validated when due, and only then checkpointed, so a checkpoint
        carries its epoch's best-model and patience decisions. Returns ``return_value`` if
        the subclass set one.
        """
        healthy = False
        preempted = False
        try:
            with self._sigterm_as_flag():
                try:
                    self._loop()
                except _Preempted:
                    preempted = True
            if not preempted:
                if self.cfg.test.get("enable", True):
                    self.test()
                self.log_training_results()
            healthy = True
        finally:
            self._leave_process_group(healthy=healthy)
        if preempted:
            raise SystemExit(PREEMPTED_EXIT_CODE)
        result: dict[str, Any] | None = self.__dict__.get("return_value")
        return result

    def _loop(self) -> None:
        num_epochs = int(self.cfg.num_epochs)
        early_stop = self._stopped  # a resumed run that had stopped trains no further
        if self.cfg.val.first and not self.is_resumed and not early_stop:
            early_stop = self._validate()
            self.barrier()  # best.pt of the val.first validation is complete
        epoch = self.epoch
        while not early_stop and epoch < num_epochs:
            self.epoch = epoch
            self.train_epoch()
            self.completed_epoch = epoch
            self._log_epoch_grad_norm()
            if epoch % self.cfg.val.every_n_epochs == 0 or epoch == num_epochs - 1:
                early_stop = self._validate()
            self._save_epoch_checkpoints()
            self.barrier()  # every file of this epoch is complete before the next starts
            if self._any_rank(self._sigterm):
                self._preempt()
            epoch += 1

    def _validate(self) -> bool:
        # one rank leaving the loop alone would leave the others waiting in a collective
        stop = self._any_rank(bool(self.val_epoch()))
        if stop:
            self._stopped = True
            self.logger.info("Early stopping triggered at epoch %d, best epoch was %s",
                             self.epoch, self.best_epoch)
        return stop

    def _preempt(self) -> None:
        if self.ckpt_dir is not None and not self.cfg.ckpt.get("save_last", True):
            self._save_checkpoint("last.pt")  # the resumable point, whatever save_last says
            self.barrier()
        where = self.ckpt_dir / "last.pt" if self.ckpt_dir is not None else "nowhere"
        self.logger.warning("SIGTERM: stopped after epoch %d; resume from %s", self.epoch, where)
        raise _Preempted

    @contextlib.contextmanager
    def _sigterm_as_flag(self) -> Iterator[None]:
        """SIGTERM sets a flag the loop reads at the next epoch boundary."""
        self._sigterm = False
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            self._sigterm = True

        previous = signal.signal(signal.SIGTERM, on_sigterm)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    # ------------------------------------------------------------------ best model, patience

    def reset_best_tracking(self, minimize: bool | None = None) -> None:
        """Start best-model and patience bookkeeping afresh; ``minimize`` pins the direction."""
        if minimize is None:
            minimize = bool(OmegaConf.select(self.cfg, "val.minimize", default=False))
        self.val_minimize = minimize
        patience = OmegaConf.select(self.cfg, "val.patience")
        self.patience: int | None = None if patience is None else int(patience)
        self.start_patience = int(OmegaConf.select(self.cfg, "val.start_patience", default=0))
        self.best_val = math.inf if minimize else -math.inf
        self.best_epoch: int | None = None
        self.best_model = None
        self.best_metrics = {}

    def save_if_best(self, score: float, metrics: dict[str, float] | None = None) -> bool:
        """Keep this validation's weights if its score beats the best so far.

        Call it on every rank: the score compared is rank 0's, so every rank keeps the same
        best weights. A non-finite score never improves; a tie does not either. On an
        improvement the weights are copied to the host as ``best_model`` and ``best.pt`` is
        written.
        """
        score = self._from_rank_zero(float(score))
        if not math.isfinite(score):
            return False
        if (score >= self.best_val) if self.val_minimize else (score <= self.best_val):
            return False
        self.best_val = score
        self.best_epoch = self.completed_epoch
        self.best_model = {k: v.detach().to("cpu", copy=True)
                           for k, v in _unwrap(self.model).state_dict().items()}
        self.best_metrics = {f"best/val/{k}": float(v) for k, v in (metrics or {}).items()}
        self.best_metrics["best/val/avg"] = score
        self._save_checkpoint("best.pt")
        return True

    def step_patience(self, improved: bool) -> bool:
        """Count this validation for early stopping; True once patience is exhausted.

        An improvement refills the counter; otherwise it ticks down, but only once the epoch
        reaches ``val.start_patience``. With ``val.patience`` unset it never stops.
        """
        if self.patience is None:
            return False
        if improved:
            self.patience = int(self.cfg.val.patience)
        elif self.epoch >= self.start_patience:
            self.patience -= 1
        return self.patience <= 0

    # ------------------------------------------------------------------ helpers

    def add_checkpoint_items(self, **kwargs: Any) -> None:
        """Register objects with ``state_dict``/``load_state_dict``: saved in every checkpoint,
        restored on resume (the model is loaded by the subclass). Every rank registers."""
        self.to_ckpt.update(kwargs)

    def make_ddp(self, module: torch.nn.Module,
                 find_unused_parameters: bool = False) -> torch.nn.Module:
        """The module on this rank's device, in DistributedDataParallel when distributed."""
        module = module.to(self.device)
        if not self.is_distributed:
            return module
        if self.device.type == "cuda":
            to_sync_bn: Any = torch.nn.SyncBatchNorm.convert_sync_batchnorm
            module = to_sync_bn(module)
            return DistributedDataParallel(module, device_ids=[self.device.index],
                                           find_unused_parameters=find_unused_parameters)
        # gloo on CPU: no device_ids
        return DistributedDataParallel(module, find_unused_parameters=find_unused_parameters)

    def barrier(self) -> None:
        """Synchronize all processes in the distributed group."""
        if self.is_distributed:
            dist.barrier()

    def reduce_mean(self, total: float, count: float) -> float:
        """Sum of totals over sum of counts across ranks; NaN if no rank counted anything."""
        if self.is_distributed:
            pair = torch.tensor([total, count], dtype=torch.float64, device=self.device)
            dist.all_reduce(pair)
            total, count = pair.tolist()
        return math.nan if count == 0 else total / count

    def clip_and_log_grad_norm(self, *modules: torch.nn.Module) -> torch.Tensor:
        """Clip gradients to ``grad_clip`` (no clip when unset); record the pre-clip norm."""
        max_norm = self.cfg.get("grad_clip")
        norm = torch.nn.utils.clip_grad_norm_(
            chain.from_iterable(m.parameters() for m in (modules or (self.model,))),
            max_norm=math.inf if max_norm is None else float(max_norm),
        )
        self._grad_norms.append(float(norm))
        return norm

    def get_param_groups(self, *modules: torch.nn.Module) -> list[dict[str, Any]]:
        """A weight-decayed and an undecayed group (1-D parameters and listed names)."""
        return _default_param_groups(modules or (self.model,), float(self.cfg.weight_decay),
                                     list(self.cfg.get("no_weight_decay", ["bias", "norm"])))

    def log(self, name: str, value: float) -> None:
        """Record a metric (this trainer logs through the standard library only)."""
        self.metrics[name] = float(value)

    def _log_epoch_grad_norm(self) -> None:
        if self._grad_norms:
            self.log("train/grad_norm", sum(self._grad_norms) / len(self._grad_norms))
            self._grad_norms.clear()

    # ------------------------------------------------------------------ distributed

    def _pick_device(self) -> torch.device:
        backend = OmegaConf.select(self.cfg, "ddp.backend")
        if backend == "gloo" or not torch.cuda.is_available():
            return torch.device("cpu")
        if self.world_size > torch.cuda.device_count() and backend is None:
            return torch.device("cpu")
        local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        return torch.device("cuda", local_rank % torch.cuda.device_count())

    def _join_process_group(self) -> bool:
        if self.world_size <= 1:
            return False
        if not dist.is_initialized():
            timeout_s = OmegaConf.select(self.cfg, "ddp.timeout")
            if timeout_s is None:
                timeout_s = OmegaConf.select(self.cfg, "ddp.timeout_s")
            backend = "nccl" if self.device.type == "cuda" else "gloo"
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            dist.init_process_group(
                backend, rank=self.rank, world_size=self.world_size,
                timeout=None if timeout_s is None else timedelta(seconds=float(timeout_s)))
            self._owns_group = True
        return True

    def _leave_process_group(self, *, healthy: bool) -> None:
        """Destroy the group this trainer created; a barrier first when all went well, so no
        collective is in flight when gloo's threads are freed (torch can deadlock otherwise)."""
        if not self._owns_group or not dist.is_initialized():
            return
        if healthy:
            with contextlib.suppress(RuntimeError):
                dist.barrier()
        dist.destroy_process_group()
        self._owns_group = False

    def _any_rank(self, flag: bool) -> bool:
        if not self.is_distributed:
            return flag
        t = torch.tensor([int(flag)], dtype=torch.int32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def _from_rank_zero(self, value: float) -> float:
        if not self.is_distributed:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.broadcast(t, src=0)
        return float(t.item())

    def _agree_on_run_id(self) -> str:
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
        if not self.is_distributed:
            return run_id
        box: list[Any] = [run_id]
        dist.broadcast_object_list(box, src=0)
        return str(box[0])

    # ------------------------------------------------------------------ checkpoints

    def _setup_ckpt(self) -> None:
        if not self.cfg.ckpt.enable:
            self.logger.warning("Checkpointing disabled")
            return
        self.ckpt_dir = (_expand(self.cfg.ckpt.dir) / self.run_id).resolve()
        if self.rank == 0:
            self.ckpt_dir.mkdir(parents=True, exist_ok=True)
            self.logger.info("Checkpoint directory: %s", self.ckpt_dir)
            if self.to_ckpt:
                self.logger.info("Checkpoints will track: %s", list(self.to_ckpt))
            else:
                self.logger.warning("No items specified for checkpointing")

    def _save_epoch_checkpoints(self) -> None:
        if self.ckpt_dir is None:
            return
        every_n_epochs = self.cfg.ckpt.every_n_epochs
        if every_n_epochs is not None and self.epoch % every_n_epochs == 0:
            self._save_checkpoint(f"epoch_{self.epoch}.pt")
        if self.cfg.ckpt.get("save_last", True):
            self._save_checkpoint("last.pt")

    def _save_checkpoint(self, name: str) -> None:
        """Rank 0 writes ``name``; every rank calls this (the RNG states are gathered)."""
        if self.ckpt_dir is None:
            return
        rng: list[Any] = [_capture_rng()]
        if self.is_distributed:
            rng = [None] * self.world_size
            dist.all_gather_object(rng, _capture_rng())
        if self.rank != 0:
            return
        state: dict[str, Any] = {
            "epoch": self.completed_epoch,
            "train_step": self.train_step,
            "run_id": self.run_id,
            "config": _plain(OmegaConf.to_container(self.cfg, resolve=True)),
            "tracking": {
                "best_val": self.best_val,
                "best_epoch": self.best_epoch,
                "patience": self.patience,
                "stopped": self._stopped,
                "minimize": self.val_minimize,
            },
            "rng": rng,
        }
        if name != "best.pt" and self.best_model is not None:
            state["tracking"]["best_model"] = self.best_model  # best.pt's model *is* the best
        for item_name, item in self.to_ckpt.items():
            target = _unwrap(item)
            state[f"{item_name}_state_dict"] = target.state_dict()
            state[f"{item_name}_class"] = _class_name(target)
        write_checkpoint(self.ckpt_dir / name, state)

    def _find_ckpt(self, load_from: str) -> Path:
        tried = [_expand(load_from)]
        if not tried[0].is_absolute():
            tried.append(_expand(self.cfg.ckpt.dir) / load_from)
        for path in tried:
            if path.is_file():
                return path
        raise CheckpointNotFoundError(
            f"Checkpoint not found: ckpt.load_from={load_from!r}; tried "
            f"{' and '.join(str(p) for p in tried)}")

    def _load_ckpt(self) -> dict[str, Any] | None:
        load_from = self.cfg.ckpt.load_from
        if load_from is None:
            return None
        path = self._find_ckpt(str(load_from))
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise CheckpointUnreadableError(
                f"Cannot read checkpoint {path}: {_first_line(e)}. The file is truncated or "
                "corrupt, or holds objects a weights-only load refuses.") from e
        if not isinstance(ckpt, dict):
            raise CheckpointUnreadableError(f"{path} holds a {type(ckpt).__name__}, not a "
                                            "checkpoint dict")
        self.ckpt_path = path
        self.is_resumed = bool(self.cfg.ckpt.resume) and not bool(self.cfg.ckpt.model_only)
        if self.is_resumed:
            epoch, step = ckpt.get("epoch"), ckpt.get("train_step")
            if not isinstance(epoch, int) or not isinstance(step, int):
                raise ResumeMismatchError(
                    f"Cannot resume from {path}: it holds no integer epoch and train_step. "
                    "Start a new run from its weights instead: pass ckpt.model_only=true or "
                    "ckpt.resume=false.")
            self.completed_epoch = epoch
            self.epoch = epoch + 1
            self.train_step = step
            self.logger.info("Resuming from: epoch = %d, train_step = %d", self.epoch, step)
        else:
            self.logger.info("Finetuning from %s: weights only, a new run", path)
        return ckpt

    def _mismatch(self, item: str, why: str) -> ResumeMismatchError:
        return ResumeMismatchError(
            f"Cannot restore '{item}' from {self.ckpt_path}: {why}. State that no longer fits "
            "the run means this is a finetune rather than a resume: pass "
            "ckpt.model_only=true or ckpt.resume=false.")

    def _resume(self, ckpt: dict[str, Any]) -> None:
        tracking = ckpt.get("tracking")
        if isinstance(tracking, Mapping):
            minimize = bool(tracking.get("minimize", self.val_minimize))
            if minimize != self.val_minimize:
                raise self._mismatch("val.minimize", f"the checkpoint tracked its best score "
                                                     f"with val.minimize={minimize}")
        restored = self._restore_checkpoint_items(ckpt)
        if isinstance(tracking, Mapping):
            self._restore_tracking(tracking, ckpt)
        rng = ckpt.get("rng")
        if isinstance(rng, list) and self.rank < len(rng) and isinstance(rng[self.rank], dict):
            _restore_rng(rng[self.rank])
        self.logger.info("Resumed state: %s, best tracking, RNG", ", ".join(restored))

    def _restore_checkpoint_items(self, ckpt: dict[str, Any]) -> list[str]:
        """Every registered item but the model, all of them or none."""
        items = {name: _unwrap(item) for name, item in self.to_ckpt.items()
                 if name != "model" and hasattr(item, "load_state_dict")}
        for name, item in items.items():  # every check before the first load
            if f"{name}_state_dict" not in ckpt:
                raise self._mismatch(name, f"the checkpoint carries no {name}_state_dict")
            saved_class = ckpt.get(f"{name}_class")
            if saved_class is not None and saved_class != _class_name(item):
                raise self._mismatch(name, f"it is a {_class_name(item)} now, the checkpoint "
                                           f"holds a {saved_class}")
        backup = {name: deepcopy(item.state_dict()) for name, item in items.items()}
        touched: list[str] = []
        for name, item in items.items():
            touched.append(name)
            try:
                item.load_state_dict(ckpt[f"{name}_state_dict"])
            except Exception as e:
                for done in touched:  # put back what was loaded: nothing half-restored
                    with contextlib.suppress(Exception):
                        items[done].load_state_dict(backup[done])
                raise self._mismatch(name, _first_line(e)) from None
        return touched

    def _restore_tracking(self, tracking: Mapping[str, Any], ckpt: dict[str, Any]) -> None:
        self.best_val = float(tracking.get("best_val", self.best_val))
        self.best_epoch = tracking.get("best_epoch")
        if self.patience is not None and tracking.get("patience") is not None:
            self.patience = int(tracking["patience"])
        self._stopped = bool(tracking.get("stopped", False))
        best = tracking.get("best_model")
        if best is None and self.best_epoch is not None and self.best_epoch == ckpt.get("epoch"):
            best = ckpt.get("model_state_dict")  # a best.pt: its model is the best model
        if isinstance(best, Mapping):
            self.best_model = {str(k): v for k, v in best.items()}

    def _truncate_loaders(self) -> None:
        """Cap every split at one batch, after setup sized whatever it sizes from them."""
        for name in self.loader_names:
            loader = getattr(self, name, None)
            if loader is not None:
                setattr(self, name, _OneBatchLoader(loader))
        self.logger.warning("Debug mode: one batch per split, %s epoch(s), no W&B or "
                            "checkpoints", self.cfg.num_epochs)
