"""The probe: a model trainer built on a seed-shaped base class, recording what the base does.

It uses the base the way a real model trainer does (design.md): builds a model, an optimizer and
an LR scheduler sized from ``len(train_loader)``, registers them with ``add_checkpoint_items``,
loads model weights from ``ckpt`` itself, shuffles with the global RNG, steps every
``grad_accum_steps`` batches, clips through ``clip_and_log_grad_norm``, pools its score through
``reduce_mean`` (or a torchmetrics metric), calls ``save_if_best`` then ``step_patience``, and
tests on ``best_model``. Everything the base decides is reported as records
(:mod:`trainspec.conformance.run.records`).

The probe's methods only delegate: each step is a function here taking the trainer and the
run (:class:`_Run`), so the subclass stays one screen and each step can be read alone.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch.nn import functional
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.files import as_int
from trainspec.conformance.run.jsonfields import encode
from trainspec.conformance.run.recording import (
    model_state_of,
    newest_file,
    snapshot_file,
    trainer_state,
)
from trainspec.conformance.run.records import (
    ConfigSeen,
    FileSnapshot,
    ItemsOnRaise,
    Phase,
    RunEnd,
    Setup,
    TestPass,
    TrainEnd,
    TrainStart,
    Validation,
)
from trainspec.conformance.run.scenario import CrashWhere, Scenario, Task

# the task kit lived here before run/task.py; re-exported while the framework adapters still
# import it from the probe (their owners move them to run.task)
from trainspec.conformance.run.task import (
    draw_host_rngs,
    plain_weights,
    pool_with_torchmetrics,
    task_data,
    task_model,
    task_optimizer,
    task_schedulers,
)

__all__ = ["crash_matches", "interrupt", "make_probe"]

_EVAL_LOADERS = ("val_loader", "test_loader", "eval_loader")


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


@dataclass(frozen=True, slots=True, kw_only=True)
class _Run:
    """What the probe's steps share: the scenario it trains and the context it records to."""

    scenario: Scenario
    ctx: RunContext

    @property
    def task(self) -> Task:
        return self.scenario.task


def make_probe(base: type[Any], scenario: Scenario, ctx: RunContext) -> type[Any]:
    """A subclass of ``base`` that trains the scenario's task and records what the base does."""
    run = _Run(scenario=scenario, ctx=ctx)

    class Probe(base):  # type: ignore[misc]
        _trained_this_run = False

        def __init__(self, cfg: Any, *args: Any, **kwargs: Any) -> None:
            try:
                super().__init__(cfg, *args, **kwargs)
            except Exception:
                _record_items_on_raise(self, run)
                raise
            self._probe_user_cfg = cfg  # the caller's config, read again at the end (DBG-2)

        def setup(self, ckpt: Mapping[str, object] | None) -> None:
            _setup(self, run, ckpt)

        def train_epoch(self) -> None:
            _train_epoch(self, run)

        def val_epoch(self) -> bool:
            return _val_epoch(self, run)

        def test(self) -> None:
            _test(self, run)

        def probe_end(self) -> RunEnd:
            """The run's end, once ``train()`` returned (the adapter records it)."""
            best = self.best_model
            num_epochs = _cfg(self._probe_user_cfg, "num_epochs")
            return RunEnd(train_step=int(self.train_step), best_file=_best_snapshot(self, run),
                          final_weights=self._final,
                          best_model=None if best is None else plain_weights(best),
                          user_config=ConfigSeen(num_epochs=None if num_epochs is None
                                                 else int(num_epochs)))

    Probe.__name__ = Probe.__qualname__ = f"Probe[{base.__name__}]"
    return Probe


# ------------------------------------------------------------------------------ set-up


def _setup(trainer: Any, run: _Run, ckpt: Mapping[str, object] | None) -> None:
    """Model (loaded from ``ckpt`` by the probe itself), loaders, optimizer, schedules."""
    task, cfg = run.task, trainer.cfg
    seed = int(_cfg(cfg, "seed", 0))
    splits = task_data(task, seed)
    model = task_model(task)
    if ckpt is not None:
        model.load_state_dict(model_state_of(ckpt))
    trainer.model = trainer.make_ddp(model)
    _make_loaders(trainer, task, splits, seed)
    module = trainer.model.module if hasattr(trainer.model, "module") else trainer.model
    trainer.optimizer = task_optimizer(task, module.parameters())
    num_epochs = int(_cfg(cfg, "num_epochs", 1))
    total_steps = max(1, len(trainer.train_loader) * max(num_epochs, 1))
    items: dict[str, object] = {"model": trainer.model}
    schedules = iter(task_schedulers(task, trainer.optimizer, total_steps))
    if not task.schedulers_first:
        items["optimizer"] = trainer.optimizer
    if task.scheduler:
        trainer.scheduler = items["scheduler"] = next(schedules)
    if task.extra_scheduler:
        trainer.scheduler2 = items["scheduler2"] = next(schedules)
    items["optimizer"] = trainer.optimizer  # in its place, or after the schedulers
    trainer.add_checkpoint_items(**items)
    # as registered, before the base restores anything (RES-5: all or nothing)
    trainer._probe_items = {n: (i, _state_key(i)) for n, i in items.items() if n != "model"}
    trainer._final = plain_weights(trainer.model.state_dict())
    mode, preds = _cfg(cfg, "wandb.mode"), _cfg(cfg, "save_preds.enable")
    run.ctx.record(Setup(
        epoch=int(trainer.epoch), train_step=int(trainer.train_step),
        train_len=len(trainer.train_loader),
        config=ConfigSeen(wandb_mode=None if mode is None else str(mode),
                          save_preds_enable=None if preds is None else bool(preds))))


def _state_key(item: Any) -> str:
    """An item's state_dict as comparable text."""
    return json.dumps(encode(item.state_dict()), sort_keys=True)


def _record_items_on_raise(trainer: Any, run: _Run) -> None:
    """Which registered items changed between set-up and the construction's raise."""
    registered: dict[str, tuple[Any, str]] = getattr(trainer, "_probe_items", {})
    if not registered:
        return  # it raised before set-up registered anything
    try:
        changed = tuple(n for n, (item, key) in registered.items() if _state_key(item) != key)
    except Exception:  # never mask the trainer's own error with the probe's
        return
    run.ctx.record(ItemsOnRaise(changed=changed,
                                unchanged=tuple(n for n in registered if n not in changed)))


def _make_loaders(trainer: Any, task: Task, splits: dict[str, TensorDataset], seed: int) -> None:
    """The train loader (sharded by a DistributedSampler on several ranks) and the
    evaluation loaders; the empty ``eval`` split only when the task asks for it."""
    world = int(trainer.world_size)
    trainer._sampler = None
    if world > 1:
        trainer._sampler = DistributedSampler(splits["train"], num_replicas=world,
                                              rank=int(trainer.rank), shuffle=task.shuffle,
                                              seed=seed)
        trainer.train_loader = DataLoader(splits["train"], batch_size=task.batch_size,
                                          sampler=trainer._sampler)
    else:
        trainer.train_loader = DataLoader(splits["train"], batch_size=task.batch_size,
                                          shuffle=task.shuffle)
    trainer.val_loader = DataLoader(splits["val"], batch_size=task.batch_size)
    trainer.test_loader = DataLoader(splits["test"], batch_size=task.batch_size)
    if task.empty_eval_split:
        trainer.eval_loader = DataLoader(splits["eval"], batch_size=task.batch_size)


# ---------------------------------------------------------------------------- training


def _train_epoch(trainer: Any, run: _Run) -> None:
    """One epoch: crash point, the state it starts from, the batches, what the loaders say."""
    epoch, ctx = int(trainer.epoch), run.ctx
    ctx.crash_point("train_start", epoch)
    trainer._trained_this_run = True
    schedules = [trainer.scheduler] if run.task.scheduler else []
    ctx.record(TrainStart(epoch=epoch, train_step=int(trainer.train_step),
                          state=trainer_state(trainer.model, trainer.optimizer, schedules),
                          last_file_epoch=_visible_last_epoch(run),
                          best_file=_best_snapshot(trainer, run)))
    if trainer._sampler is not None:
        trainer._sampler.set_epoch(epoch)
    batches, steps = _train_batches(trainer, run.task)
    trainer._final = plain_weights(trainer.model.state_dict())
    loaders = {n: getattr(trainer, n, None) for n in _EVAL_LOADERS}
    ctx.record(TrainEnd(
        epoch=epoch, train_step=int(trainer.train_step), batches=batches,
        optimizer_steps=steps, loader_len=len(trainer.train_loader),
        loader_batch_size=getattr(trainer.train_loader, "batch_size", None),
        eval_lens={n: (None if v is None else len(v)) for n, v in loaders.items()},
        eval_batches={n: (None if v is None else sum(1 for _ in v))
                      for n, v in loaders.items()}))
    ctx.crash_point("train_end", epoch)


def _train_batches(trainer: Any, task: Task) -> tuple[int, int]:
    """The epoch's batches, stepping every ``grad_accum_steps``: (batches, optimizer steps)."""
    accum = int(_cfg(trainer.cfg, "grad_accum_steps", 1))
    device, model = trainer.device, trainer.model
    model.train()
    batches = steps = 0
    for i, (x, y) in enumerate(trainer.train_loader):
        draw_host_rngs()  # as a data pipeline's augmentations would
        loss = functional.cross_entropy(model(x.to(device)), y.to(device)) / accum
        loss.backward()  # type: ignore[no-untyped-call]
        batches += 1
        if (i + 1) % accum == 0:  # no flush of a partial window: debug must force 1
            trainer.clip_and_log_grad_norm(model)
            trainer.optimizer.step()
            if task.scheduler:
                trainer.scheduler.step()
            trainer.optimizer.zero_grad()
            trainer.train_step += 1
            steps += 1
    trainer.optimizer.zero_grad()
    return batches, steps


# -------------------------------------------------------------------- validation, test


def _val_epoch(trainer: Any, run: _Run) -> bool:
    """Score as the scenario says, let the base decide, record its verdicts once final."""
    epoch, ctx = int(trainer.epoch), run.ctx
    phase: Phase = "epoch" if trainer._trained_this_run else "first"
    if phase == "epoch":
        ctx.crash_point("val_start", epoch)
    total, count = run.scenario.scores.pairs(None if phase == "first" else epoch,
                                             int(trainer.rank))
    score = _pool(trainer, run.task, total, count)
    weights = plain_weights(trainer.model.state_dict())
    improved = bool(trainer.save_if_best(score))
    best = _best_snapshot(trainer, run)
    if phase == "epoch":
        ctx.crash_point("val_after_save", epoch)
    stop = bool(trainer.step_patience(improved))
    ctx.record(Validation(epoch=epoch, phase=phase, score=score, improved=improved, stop=stop,
                          weights=weights, best_file=best))
    return stop


def _pool(trainer: Any, task: Task, total: float, count: float) -> float:
    if task.metric == "local":
        return math.nan if count == 0 else total / count
    if task.metric == "torchmetrics":
        return pool_with_torchmetrics(total, count, trainer.device)
    return float(trainer.reduce_mean(total, count))


def _test(trainer: Any, run: _Run) -> None:
    """Test on ``best_model`` when the base kept one, on the current weights otherwise."""
    best = trainer.best_model
    if best is not None:
        target = trainer.model
        try:
            target.load_state_dict(best)
        except RuntimeError:  # best kept without the DDP wrapper's prefix
            getattr(target, "module", target).load_state_dict(best)
    run.ctx.record(TestPass(weights=plain_weights(trainer.model.state_dict())))


# --------------------------------------------------------------------- files as seen now


def _best_snapshot(trainer: Any, run: _Run) -> FileSnapshot | None:
    if trainer.rank != 0:
        return None
    return snapshot_file(newest_file(run.ctx.ckpt_root, "best.pt"))


def _epoch_only(content: Mapping[str, object]
                ) -> tuple[int | None, int | None, Mapping[str, object]]:
    # only the epoch is wanted: a last.pt whose weights the probe cannot find still says it
    return as_int(content.get("epoch")), None, {}


def _visible_last_epoch(run: _Run) -> int | None:
    snap = snapshot_file(newest_file(run.ctx.ckpt_root, "last.pt"), read=_epoch_only)
    return None if snap is None else snap.epoch


# ------------------------------------------------------------------------- crash points


def interrupt(how: str, stall_s: float = 0.0, until: Callable[[], bool] | None = None) -> None:
    """Interrupt this process the way the scenario asks: a kill, a SIGTERM, a stall, an error.

    A stall lasts ``stall_s``, or until ``until()`` says there is nothing left to wait for.
    """
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    elif how == "stall":
        began = time.monotonic()
        while time.monotonic() < began + stall_s:  # alive, answering no collective
            if until is not None and until():
                break
            time.sleep(0.05)
        raise RuntimeError(f"trainspec: this rank stalled for {time.monotonic() - began:.1f} "
                           f"s (at most {stall_s} s) on purpose")
    else:
        raise RuntimeError("trainspec: injected crash")


def crash_matches(scenario: Scenario, where: CrashWhere, epoch: int, rank: int) -> bool:
    crash = scenario.crash
    return crash is not None and crash.where == where and crash.epoch == epoch \
        and crash.rank == rank
