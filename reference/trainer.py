"""The reference BaseTrainer: the epoch loop and everything around it that needs no model.

A subclass supplies :meth:`BaseTrainer.setup` and the epoch internals (:meth:`train_epoch`,
:meth:`val_epoch`, optionally :meth:`test`); the base owns the loop, checkpoints, resume, best-model
selection, early stopping, debug mode and the process group. It is the seed's shape with the
seed's weak points fixed; every choice below is a clause of the spec (docs/spec/).

One module, longer than the house's usual: the loop and the state its checkpoints carry are one
unit (what a checkpoint holds is what resume restores), and split in two each half would reach
into the other's attributes.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from copy import deepcopy
from itertools import chain
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from torch.nn.parallel import DistributedDataParallel

from trainspec.errors import CheckpointCorruptError, ResumeMismatchError
from trainspec.reference.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from trainspec.reference.config import TrainConfig
from trainspec.reference.distributed import ProcessGroup
from trainspec.reference.loaders import OneBatchLoader
from trainspec.reference.rng import capture_rng, restore_rng, seed_everything
from trainspec.reference.runlog import EpochProgress, RunLogger

__all__ = ["BaseTrainer", "Stateful"]

CHECKPOINT_FORMAT = "trainspec.reference/1"
PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM


@runtime_checkable
class Stateful(Protocol):
    """What :meth:`BaseTrainer.add_checkpoint_items` accepts: a model, optimizer, scheduler..."""

    def state_dict(self) -> Mapping[str, Any]: ...
    def load_state_dict(self, state_dict: dict[str, Any], /) -> Any: ...


def _unwrap(item: Stateful) -> Stateful:
    return item.module if isinstance(item, DistributedDataParallel) else item


def _class_name(item: Stateful) -> str:
    cls = type(_unwrap(item))
    return f"{cls.__module__}.{cls.__qualname__}"


class BaseTrainer(ABC):
    """The training loop every model trainer is built on.

    Args:
        cfg: a :class:`TrainConfig`, or a nested mapping (dict, omegaconf ``DictConfig``) of the
            same keys; unknown top-level keys are kept in ``cfg.extra``.
        rank: this process's rank (torchrun's ``RANK``).
        world_size: the number of ranks (torchrun's ``WORLD_SIZE``).
    """

    config_type: ClassVar[type[TrainConfig]] = TrainConfig
    loader_names: ClassVar[tuple[str, ...]] = ("train_loader", "val_loader", "test_loader",
                                               "eval_loader")
    model: torch.nn.Module

    def __init__(self, cfg: TrainConfig | Mapping[str, Any], rank: int = 0,
                 world_size: int = 1) -> None:
        self.user_cfg = cfg if isinstance(cfg, TrainConfig) else self.config_type.from_mapping(cfg)
        self.cfg = self.user_cfg.effective()  # debug derives a config; the user's is untouched
        self.rank, self.world_size = rank, world_size
        seed_everything(self.cfg.seed)
        self.pg = self._join_process_group()
        self.device = self.pg.device
        self.is_distributed = self.pg.is_distributed
        self.logger = RunLogger(rank)
        self.epoch = 0
        self.train_step = 0
        self.ckpt_items: dict[str, Stateful] = {}
        self.ckpt_dir: Path | None = None
        self.is_resumed = False
        self.is_preempted = False
        self._completed_epoch = -1
        self._grad_norms: list[float] = []
        self._warned_rank_score = False
        self._stopped = False
        self._sigterm_received = False
        self.reset_best_tracking()
        try:
            self._prepare()
        except BaseException:
            self.pg.close(is_healthy=False)
            raise

    def _join_process_group(self) -> ProcessGroup:
        """The run's process group, every collective bounded by ``ddp.timeout_s`` (DIST-5)."""
        return ProcessGroup.join(self.rank, self.world_size, self.cfg.ddp)

    def _prepare(self) -> None:
        self.run_id = self.pg.broadcast_text(
            f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}")
        ckpt = self._load_checkpoint()
        self.setup(ckpt)
        if ckpt is not None:
            self._apply_checkpoint(ckpt)
        if self.cfg.debug:
            self._truncate_loaders()
        self._make_run_dir()

    # ---------------------------------------------------------------- hooks for the subclass

    @abstractmethod
    def setup(self, ckpt: dict[str, Any] | None) -> None:
        """Build model, data, optimizer; register them with :meth:`add_checkpoint_items`.

        ``ckpt`` is the loaded checkpoint (resume or finetune) or ``None``. Loading the model's
        weights from it is the subclass's job (it may extend a vocabulary or graft a head);
        everything else registered is restored by the base after this returns, on resume only.
        """

    @abstractmethod
    def train_epoch(self) -> None:
        """Train one epoch over ``self.train_loader``; count optimizer steps in ``train_step``."""

    @abstractmethod
    def val_epoch(self) -> bool:
        """Validate; return True to stop early (usually ``step_patience(save_if_best(score))``)."""

    def test(self) -> None:
        """Evaluate once after the loop, on ``best_model`` when set (BEST-4)."""
        self.logger.warn("test() is not implemented by this trainer; nothing evaluated")

    def log_training_results(self) -> None:  # noqa: B027 (an optional hook, empty by default)
        """Called once after the test pass."""

    # ---------------------------------------------------------------- the loop

    def train(self) -> None:
        """Run the loop: ``val.first``, epochs ``start..num_epochs-1``, then the test pass.

        A validation that exhausts patience ends the loop on every rank at once. Checkpoints of
        an epoch are written after its validation, so they carry its improvement and patience
        state: a resume from them makes the same decisions as a run never interrupted.
        """
        cfg = self.cfg
        progress = EpochProgress(start=self.epoch, total=cfg.num_epochs,
                                 enabled=self.rank == 0)
        is_healthy = False
        try:
            with self._sigterm_flag():
                should_stop = self._stopped
                if cfg.val.first and not self.is_resumed:
                    should_stop = self._validate()
                    self.logger.push(epoch=self.epoch - 1, step=self.train_step)
                for epoch in self._epochs():
                    if should_stop:
                        break
                    self.epoch = epoch
                    self.train_epoch()
                    self._completed_epoch = epoch
                    if self._is_validation_due(epoch):
                        should_stop = self._validate()
                    self._push_epoch_metrics()  # with the epoch's validation metrics
                    self._write_epoch_checkpoints()
                    # every file of this epoch is complete before any rank trains the next
                    self.barrier()
                    progress.update(epoch_done=epoch + 1, note=self._best_note())
                    if self.pg.any_rank(self._sigterm_received):
                        self._preempt()
            if self._should_test():
                self.test()
            self.log_training_results()
            self.logger.push(epoch=self.epoch, step=self.train_step)  # test metrics
            is_healthy = True
        finally:
            progress.close()
            self.pg.close(is_healthy=is_healthy)

    def _epochs(self) -> range:
        """The epochs this run trains: from the start (0, or k+1 on resume) to the end."""
        return range(self.epoch, self.cfg.num_epochs)

    def _is_validation_due(self, epoch: int) -> bool:
        """Every ``val.every_n_epochs`` epochs, and always after the final one."""
        return epoch % self.cfg.val.every_n_epochs == 0 or epoch == self.cfg.num_epochs - 1

    def _should_test(self) -> bool:
        """Once after the loop, however it ended, when ``test.enable``."""
        return self.cfg.test.enable

    def _validate(self) -> bool:
        # the verdict is reduced over ranks: one rank leaving the loop alone would leave the
        # others blocked in their next collective (DIST-2)
        should_stop = self.pg.any_rank(bool(self.val_epoch()))
        self._stopped = self._stopped or should_stop
        if should_stop:
            self.logger.info(f"early stop after epoch {self.epoch}; best epoch {self.best_epoch}")
        return should_stop

    def _preempt(self) -> None:
        self.is_preempted = True
        if self.ckpt_dir is not None and not self.cfg.ckpt.save_last:
            self._save("last.pt")  # the resumable checkpoint, whatever save_last says
        self.logger.warn(f"SIGTERM: stopped after epoch {self.epoch}; resume from "
                         f"{self.ckpt_dir / 'last.pt' if self.ckpt_dir else 'nothing (ckpt off)'}")
        self.pg.close(is_healthy=True)
        raise SystemExit(PREEMPTED_EXIT_CODE)

    @contextlib.contextmanager
    def _sigterm_flag(self) -> Iterator[None]:
        """Turn SIGTERM into a flag read at the next epoch boundary (CKPT-5)."""
        self._sigterm_received = False
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers can only be set from the main thread
            return

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            self._sigterm_received = True

        previous = signal.signal(signal.SIGTERM, on_sigterm)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    # ---------------------------------------------------------------- best model, patience

    def reset_best_tracking(self, minimize: bool | None = None) -> None:
        """Start best tracking afresh; ``minimize`` overrides ``val.minimize``."""
        self.val_minimize = self.cfg.val.minimize if minimize is None else minimize
        self.best_score = math.inf if self.val_minimize else -math.inf
        self.best_epoch: int | None = None
        self.best_model: dict[str, torch.Tensor] | None = None
        self.best_metrics: dict[str, float] = {}
        self.patience_left = self.cfg.val.patience
        self._stopped = False

    def is_improvement(self, score: float) -> bool:
        """Finite and strictly better than the incumbent; a tie is not (BEST-1, NAN-1)."""
        if not math.isfinite(score):
            return False
        return score < self.best_score if self.val_minimize else score > self.best_score

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None) -> bool:
        """Keep this validation's weights if ``score`` improves on the best so far.

        Call it on every rank. The score is taken from rank 0, so every rank decides alike
        (DIST-3); pool it first (:meth:`reduce_mean`, a torchmetrics ``compute()``). On an
        improvement the weights are copied to the host as ``best_model`` and ``best.pt`` is
        written (BEST-2, BEST-3).
        """
        local = float(score)
        score = self.pg.broadcast_float(local)
        if not self._warned_rank_score and not _same_float(local, score):
            self._warned_rank_score = True
            self.logger.warn(f"rank {self.rank} scored {local} but rank 0 scored {score}; using "
                             "rank 0's. Pool the score with reduce_mean or a torchmetrics metric.")
        if not self.is_improvement(score):
            return False
        self.best_score = score
        self.best_epoch = self._completed_epoch
        self.best_model = self._snapshot_weights()
        self.best_metrics = {f"best/val/{k}": float(v) for k, v in (metrics or {}).items()}
        self.best_metrics["best/val/score"] = score
        self._save("best.pt")
        return True

    def _snapshot_weights(self) -> dict[str, torch.Tensor]:
        """A host copy of the model's weights: later training never changes it (BEST-2).

        Keyed like the bare module (no DDP ``module.`` prefix), so it loads into the model on
        any number of ranks: ``self.unwrapped(self.model).load_state_dict(self.best_model)``.
        """
        module = self.unwrapped(self.model)
        return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}

    @staticmethod
    def unwrapped(module: torch.nn.Module) -> torch.nn.Module:
        """The module inside a DDP wrapper, or the module itself."""
        inner = module.module if isinstance(module, DistributedDataParallel) else module
        assert isinstance(inner, torch.nn.Module)
        return inner

    def step_patience(self, improved: bool) -> bool:
        """Count this validation for early stopping; True once patience is exhausted.

        An improvement refills the counter; a non-improvement (a non-finite score included)
        counts once the epoch reaches ``val.start_patience``. Unset patience never stops.
        """
        patience = self.cfg.val.patience
        if self.patience_left is None or patience is None:
            return False
        if improved:
            self.patience_left = patience
        elif self.epoch >= self.cfg.val.start_patience:
            self.patience_left -= 1
        return self.patience_left <= 0

    def _best_note(self) -> str:
        return "" if self.best_epoch is None else f"best {self.best_score:.4g} @ {self.best_epoch}"

    # ---------------------------------------------------------------- helpers for the subclass

    def add_checkpoint_items(self, **items: Stateful) -> None:
        """Register state saved in every checkpoint and restored on resume (model included).

        Every rank registers; writing stays rank 0's job.
        """
        for name, item in items.items():
            if not isinstance(item, Stateful):
                raise TypeError(f"add_checkpoint_items({name}=...): expected an object with "
                                f"state_dict and load_state_dict, got {type(item).__name__}")
        self.ckpt_items.update(items)

    def reduce_mean(self, total: float, count: float) -> float:
        """The mean over the whole split: sum of totals over sum of counts across ranks.

        NaN when no rank contributed. Every rank calls it the same number of times (DIST-1).
        """
        total, count = self.pg.all_sum([float(total), float(count)])
        return math.nan if count == 0 else total / count

    def barrier(self) -> None:
        self.pg.barrier()

    def make_ddp(self, module: torch.nn.Module,
                 find_unused_parameters: bool = False) -> torch.nn.Module:
        """The module on this rank's device, wrapped in DDP when the run is distributed."""
        module = module.to(self.device)
        if not self.is_distributed:
            return module
        if self.device.type == "cuda":
            module = torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)  # type: ignore[no-untyped-call]
            return DistributedDataParallel(module, device_ids=[self.device.index],
                                           find_unused_parameters=find_unused_parameters)
        return DistributedDataParallel(module, find_unused_parameters=find_unused_parameters)

    def clip_and_log_grad_norm(self, *modules: torch.nn.Module) -> torch.Tensor:
        """Clip gradients to ``grad_clip`` (none when unset) and record the pre-clip norm."""
        params = chain.from_iterable(m.parameters() for m in (modules or (self.model,)))
        max_norm = math.inf if self.cfg.grad_clip is None else self.cfg.grad_clip
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
        self._grad_norms.append(float(norm))
        return norm

    def log(self, name: str, value: float) -> None:
        """Stage a metric; it is written with the epoch's record."""
        self.logger.log(name, value)

    def _push_epoch_metrics(self) -> None:
        if self._grad_norms:
            self.logger.log("train/grad_norm", sum(self._grad_norms) / len(self._grad_norms))
            self._grad_norms.clear()
        self.logger.push(epoch=self.epoch, step=self.train_step)

    # ---------------------------------------------------------------- checkpoints

    def _make_run_dir(self) -> None:
        if not self.cfg.ckpt.enable:
            return
        self.ckpt_dir = (Path(self.cfg.ckpt.dir).expanduser() / self.run_id).resolve()
        if self.rank == 0:
            self.ckpt_dir.mkdir(parents=True, exist_ok=True)
            self.logger.metrics_path = self.ckpt_dir / "metrics.jsonl"
            self.logger.info(f"run {self.run_id}: checkpoints in {self.ckpt_dir}")

    def _write_epoch_checkpoints(self) -> None:
        if self.ckpt_dir is None:
            return
        every = self.cfg.ckpt.every_n_epochs
        if every is not None and self.epoch % every == 0:
            self._save(f"epoch_{self.epoch}.pt")
        if self.cfg.ckpt.save_last:
            self._save("last.pt")

    def _save(self, name: str) -> None:
        """Write one checkpoint file from rank 0; every rank takes part (RNG states gather)."""
        if self.ckpt_dir is None:
            return
        rng = self.pg.gather_tensors(capture_rng(self.device))
        if self.rank != 0:
            return
        state: dict[str, Any] = {
            "format": CHECKPOINT_FORMAT,
            "epoch": self._completed_epoch,
            "train_step": self.train_step,
            "run_id": self.run_id,
            "world_size": self.world_size,
            "config": _plain(self.cfg.to_dict()),
            "trainer_state": {
                "best_score": self.best_score,
                "best_epoch": self.best_epoch,
                "patience_left": self.patience_left,
                "stopped": self._stopped,
                "minimize": self.val_minimize,
            },
            "rng": rng,
        }
        for item_name, item in self.ckpt_items.items():
            state[f"{item_name}_state_dict"] = _unwrap(item).state_dict()
            state[f"{item_name}_class"] = _class_name(item)
        if self.best_model is not None and name != "best.pt":
            state["best_model_state_dict"] = self.best_model
        self._write_file(self.ckpt_dir / name, state)

    def _write_file(self, path: Path, state: dict[str, Any]) -> None:
        """Rank 0's atomic write; complete when this returns (DIST-4, CKPT-2)."""
        save_checkpoint(path, state, fsync=self.cfg.ckpt.fsync)

    def _load_checkpoint(self) -> dict[str, Any] | None:
        ckpt_cfg = self.cfg.ckpt
        if ckpt_cfg.load_from is None:
            return None
        path = find_checkpoint(ckpt_cfg.load_from, ckpt_cfg.dir)
        ckpt = load_checkpoint(path)
        self.ckpt_path = path
        self.is_resumed = self._is_resume()
        if self.is_resumed:
            missing = [k for k in ("epoch", "train_step") if k not in ckpt]
            if missing:
                raise CheckpointCorruptError(
                    f"{path}: cannot resume, the checkpoint has no {' or '.join(missing)}. "
                    "Finetune from it instead: ckpt.resume=false or ckpt.model_only=true.")
            self.epoch = int(ckpt["epoch"]) + 1
            self._completed_epoch = int(ckpt["epoch"])
            self.train_step = int(ckpt["train_step"])
            self.logger.info(f"resuming {path} at epoch {self.epoch}, step {self.train_step}")
        else:
            self.logger.info(f"finetuning from {path}: weights only, a fresh run")
        return ckpt

    def _is_resume(self) -> bool:
        """Resume continues a run; anything else loading a checkpoint is a finetune (FT-2)."""
        return self.cfg.ckpt.resume and not self.cfg.ckpt.model_only

    def _apply_checkpoint(self, ckpt: dict[str, Any]) -> None:
        """After setup: a resume restores everything but the model; a finetune nothing (FT-1)."""
        if not self.is_resumed:
            return
        loaded = self._restore_items(ckpt)
        self._restore_tracking(ckpt)
        self._restore_rng(ckpt)
        self.logger.info(f"resumed {', '.join(loaded) or 'no items'}, best tracking, RNG")

    def _resume_error(self, message: str) -> ResumeMismatchError:
        return ResumeMismatchError(
            f"resuming {self.ckpt_path}: {message}. State that no longer fits the run makes "
            "this a finetune, not a resume: pass ckpt.model_only=true or ckpt.resume=false.")

    def _restore_items(self, ckpt: dict[str, Any]) -> list[str]:
        """Every registered item but the model, all or nothing (RES-2, RES-5).

        Every item is checked before any is loaded, and a load that fails puts back what was
        already loaded: a run never goes on half-restored.
        """
        items = {n: _unwrap(i) for n, i in self.ckpt_items.items() if n != "model"}
        for name, item in items.items():
            if f"{name}_state_dict" not in ckpt:
                raise self._resume_error(f"'{name}' is registered but the checkpoint carries "
                                         f"no {name}_state_dict")
            saved_class = ckpt.get(f"{name}_class")
            if saved_class is not None and saved_class != _class_name(item):
                raise self._resume_error(f"'{name}' is a {_class_name(item)} but the "
                                         f"checkpoint holds a {saved_class}")
        saved = ckpt.get("trainer_state", {})
        if saved and bool(saved.get("minimize")) != self.val_minimize:
            raise self._resume_error(f"val.minimize is {self.val_minimize} but the checkpoint's "
                                     f"best score was tracked with minimize="
                                     f"{saved.get('minimize')}")
        before = {name: dict(deepcopy(item.state_dict())) for name, item in items.items()}
        loaded: list[str] = []
        for name, item in items.items():
            try:
                item.load_state_dict(ckpt[f"{name}_state_dict"])
            except (ValueError, RuntimeError, KeyError, TypeError) as e:
                for done in loaded:
                    items[done].load_state_dict(before[done])
                raise self._resume_error(f"cannot restore '{name}': {e}") from None
            loaded.append(name)
        return loaded

    def _restore_tracking(self, ckpt: dict[str, Any]) -> None:
        """The incumbent best (score, epoch, weights) and the patience counter (RES-3)."""
        saved = ckpt.get("trainer_state", {})
        if saved:
            self.best_score = float(saved["best_score"])
            self.best_epoch = saved["best_epoch"]
            patience = saved["patience_left"]
            self.patience_left = None if self.cfg.val.patience is None else patience
            self._stopped = bool(saved.get("stopped", False))
        if "best_model_state_dict" in ckpt:
            self.best_model = dict(ckpt["best_model_state_dict"])

    def _restore_rng(self, ckpt: dict[str, Any]) -> None:
        """This rank's generators, as they were when the checkpoint was written (RES-4)."""
        rng = ckpt.get("rng")
        if isinstance(rng, list) and self.rank < len(rng):
            restore_rng(rng[self.rank], self.device)

    def _truncate_loaders(self) -> None:
        # after setup: whatever setup sized from len(train_loader) saw the full length (DBG-5)
        for name in self.loader_names:
            loader = getattr(self, name, None)
            if loader is not None:
                setattr(self, name, OneBatchLoader(loader))
        self.logger.warn(f"debug: one batch per split, {self.cfg.num_epochs} epoch(s), "
                         "no checkpoints")


def _same_float(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _plain(value: object) -> Any:
    """Keep what a weights-only load accepts; anything else is stored as its repr."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)
