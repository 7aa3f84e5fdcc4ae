"""The adapter for PyTorch Ignite (``trainspec check ignite``).

Ignite is configured the way its documentation tells a user to, for the scenario's keys, and
never bent to pass a check:

- ``create_supervised_trainer(model, optimizer, loss_fn,
  gradient_accumulation_steps=grad_accum_steps)`` trains, the LR schedule runs through
  ``LRScheduler`` on ``Events.ITERATION_STARTED``, and ``ignite.utils.manual_seed`` seeds;
- an evaluator from ``create_supervised_evaluator``, with a small ``Metric`` putting the scripted
  score in ``evaluator.state.metrics["score"]``, runs on
  ``Events.EPOCH_COMPLETED(every=val.every_n_epochs)``, and on ``Events.STARTED`` for
  ``val.first``;
- ``Checkpoint({"model": model}, DiskSaver(ckpt_root), n_saved=1, filename_prefix="best",
  score_function=..., score_name="score", global_step_transform=global_step_from_engine(trainer))``
  on the evaluator's COMPLETED keeps the best model (``best_model_<epoch>_score=<s>.pt``), and
  ``EarlyStopping(patience, score_function, trainer)`` follows it when patience is set. Both
  maximize; ``val.minimize`` negates the score through
  ``Checkpoint.get_default_score_fn("score", score_sign=-1.0)``, as Ignite's own
  ``add_early_stopping_by_val_score``/``gen_save_best_models_by_val_score`` do;
- ``Checkpoint(to_save, DiskSaver(ckpt_root), n_saved=1, include_self=True)`` on the trainer's
  EPOCH_COMPLETED, after the validation, keeps the last checkpoint ``checkpoint_<iteration>.pt``;
  ``to_save`` holds the model, optimizer, LR scheduler(s), the trainer, and the EarlyStopping and
  best Checkpoint handlers (Ignite documents their ``state_dict`` for saving their state). A
  third Checkpoint (``filename_prefix="epoch"``, ``n_saved=None``) on
  ``EPOCH_COMPLETED(every=ckpt.every_n_epochs)`` keeps the periodic files;
- resume: ``torch.load(ckpt.load_from, weights_only=True)`` and
  ``Checkpoint.load_objects(to_save, checkpoint)`` (Ignite's resume guide), then
  ``trainer.run(loader, max_epochs=num_epochs)``, which continues after the loaded trainer
  state's epoch; finetune: ``Checkpoint.load_objects({"model": model}, ckpt.load_from)`` into a
  fresh run;
- the test pass: the best checkpoint loaded with ``Checkpoint.load_objects`` when one was saved,
  then a second evaluator run on the test loader.

On several ranks (processes launched as torchrun launches them), the process group is Ignite's:
``idist.initialize(backend, timeout=timedelta(seconds=ddp.timeout_s))`` joins it (the torchrun
example of ``ignite.distributed.initialize``, whose documented kwargs for "gloo"/"nccl" are
``timeout``, ``init_method``, ``rank``, ``world_size``; ``idist.Parallel`` under torchrun calls
``initialize`` without them), with "gloo" unless ``ddp.backend`` says otherwise, and
``idist.finalize()`` destroys it at the end, after a barrier on a healthy run. Inside it, as the
docs of ``ignite.distributed.auto`` and Ignite's distributed examples do: ``idist.auto_model``
(DistributedDataParallel), ``idist.auto_optim``, ``idist.auto_dataloader`` for every split (a
DistributedSampler; the batch size given is the global one, divided by the world size),
``device=idist.device()`` for the engines, and ``train_sampler.set_epoch(epoch-1)`` on
EPOCH_STARTED as ``setup_common_training_handlers(train_sampler=...)`` does. The same calls are
no-ops on one process. Checkpoint and DiskSaver are used as they are: Ignite's DiskSaver writes
on rank 0 only (``save_on_rank=0``); the in-memory best copy (``ckpt.enable=false``) is kept on
every rank. After training every rank passes ``idist.barrier()`` before the test pass loads the
best file rank 0 wrote. The score metric's ``reset``/``update`` are ``@reinit__is_reduced`` and,
for the task's "reduce_mean" metric, its ``compute`` is ``@sync_all_reduce("total",
"count")``: Ignite sums each rank's (total, count) across ranks itself, as Ignite's guide to
custom metrics shows. The "torchmetrics" metric is pooled by torchmetrics, as for every
adapter; "local" leaves the score rank-local.

Every DiskSaver takes ``require_empty=False`` (as Ignite's own ``setup_common_training_handlers``
does): a resumed run writes into the folder that holds its checkpoint. With ``ckpt.enable=false``
the best Checkpoint keeps its copy in memory (Ignite documents any callable as a save handler),
so best-model selection is Ignite's own either way. A validation's ``improved`` is whether the
best Checkpoint fired ``SAVED_CHECKPOINT``, its ``stop`` is ``trainer.should_terminate`` once
EarlyStopping has run, its ``score`` is ``evaluator.state.metrics["score"]``. Epochs are
reported zero-based (Ignite counts them from 1); ``train_step`` is the trainer's ``iteration``
(Ignite keeps no optimizer-step counter; the events count optimizer steps with a hook).

Ignite is imported inside the methods only: importing this module never imports it.
"""

from __future__ import annotations

import copy
import datetime
import math
import re
from collections.abc import Mapping
from pathlib import Path
from stat import S_ISREG
from typing import Any

import torch
from torch.nn import functional
from torch.utils.data.distributed import DistributedSampler

from trainspec.conformance.run.adapter import Capability, RunContext
from trainspec.conformance.run.files import as_int, file_entry, load_dict, top_level
from trainspec.conformance.run.probe import (
    plain_weights,
    pool_with_torchmetrics,
    rng_digests,
    task_data,
    task_model,
)
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import encode
from trainspec.errors import AdapterError

__all__ = ["IgniteAdapter"]

MONITOR = "score"
# Checkpoint's default names: {prefix}_{name}_{global_step}_{score_name}={score}.pt for the best
# model (name "model": one object saved), checkpoint_{iteration}.pt for the last checkpoint,
# epoch_checkpoint_{iteration}.pt for the periodic ones
_BEST_FILE = re.compile(r"^best_model_(\d+)_score=.*\.pt$")
_LAST_FILE = re.compile(r"^checkpoint_(\d+)\.pt$")
_EPOCH_FILE = re.compile(r"^epoch_checkpoint_(\d+)\.pt$")


def _role(name: str) -> str | None:
    """The role of an Ignite checkpoint file under this adapter's handlers."""
    if _BEST_FILE.match(name):
        return "best"
    if _LAST_FILE.match(name):
        return "last"
    return "epoch" if _EPOCH_FILE.match(name) else None


def _holds(name: str, content: dict[str, Any]) -> list[str]:
    """What a file holds in the spec's terms. A best file is the model's bare state_dict (its
    epoch is in its name only); a last or periodic file holds the model, the optimizer, the
    LR scheduler(s) and the trainer's state (epoch and iteration, the step). Ignite stores no
    run id and no config."""
    if _role(name) == "best":
        return ["epoch", "model"]
    names = {"model": "model", "optimizer": "optimizer", "lr_scheduler": "scheduler"}
    held = [spec for key, spec in names.items() if key in content]
    if isinstance(content.get("trainer"), dict):
        held[:0] = ["epoch", "step"]
    return held


def _progress(name: str, content: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(epoch, step) of a checkpoint in the suite's terms: the zero-based epoch it ends, and
    Ignite's iteration counter.

    A last or periodic file holds the trainer's ``state_dict`` (``iteration``,
    ``epoch_length``): its epoch is ``iteration // epoch_length - 1``. The best file holds the
    model's bare state_dict; its epoch is only in its name (``global_step_from_engine(trainer)``
    gives the count of completed epochs, 0 for val.first), and no step is recorded anywhere.
    """
    best = _BEST_FILE.match(name)
    if best:
        return int(best.group(1)) - 1, None
    trainer = content.get("trainer")
    if not isinstance(trainer, Mapping):
        return None, None
    iteration, length = as_int(trainer.get("iteration")), as_int(trainer.get("epoch_length"))
    if iteration is None or not length:
        return None, iteration
    return iteration // length - 1, iteration


def _model_state(content: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The model's weights in a best file (a bare state_dict) or a last file (under "model")."""
    state = content.get("model", content)
    if not isinstance(state, Mapping):
        return {}
    return {str(k): v for k, v in state.items() if isinstance(v, torch.Tensor)}


def _snapshot(path: Path | None) -> dict[str, Any] | None:
    """Identity and content of a checkpoint file, in the suite's BestFile shape."""
    if path is None:
        return None
    try:  # on several ranks, rank 0 may remove the file while another rank looks at it
        stat = path.stat()
    except OSError:
        return None
    if not S_ISREG(stat.st_mode):
        return None
    out: dict[str, Any] = {"path": str(path), "mtime_ns": stat.st_mtime_ns,
                           "size": stat.st_size}
    content, error = load_dict(path)
    if content is None:
        out["error"] = error
        return out
    out["epoch"], out["step"] = _progress(path.name, content)
    out["weights"] = encode(_model_state(content))
    return out


def _newest(root: Path, role: str) -> Path | None:
    if not root.exists():
        return None
    found: list[tuple[Path, int]] = []
    for path in root.rglob("*.pt"):
        if _role(path.name) != role:
            continue
        try:  # on several ranks, rank 0 may remove a file while another rank lists them
            stat = path.stat()
        except OSError:
            continue
        if S_ISREG(stat.st_mode):
            found.append((path, stat.st_mtime_ns))
    return max(found, key=lambda f: f[1])[0] if found else None


class IgniteAdapter:
    """Runs scenarios through Ignite engines and handlers, on one CPU process or on each rank
    of a world launched as torchrun launches one."""

    name = "ignite"

    def capabilities(self) -> frozenset[Capability]:
        # multi_rank: ignite.distributed joins the launched world (idist.initialize with the
        # timeout), DDP through idist.auto_model, the score pooled by sync_all_reduce.
        # not declared: sigterm (Ignite installs no SIGTERM handler),
        # start_patience (EarlyStopping cannot express it), debug (Ignite has no debug mode:
        # run(epoch_length=...) shortens the training epoch only; evaluation, checkpoint
        # handlers and the schedule are untouched), rng_state (Ignite's checkpoints hold no RNG
        # states; create_supervised_trainer(deterministic=True) reseeds per epoch instead, and
        # it is not the default)
        return frozenset({"checkpoint", "resume", "finetune", "early_stopping", "val_first",
                          "val_every_n", "test_pass", "grad_accum", "eval_only",
                          "multi_rank"})

    def environment(self) -> dict[str, str | None]:
        import ignite

        return {"framework": f"pytorch-ignite {ignite.__version__}"}

    def framework_sources(self) -> dict[str, str]:
        """Where in Ignite 0.5 the behaviour behind each failing clause comes from (read in the
        installed sources; paths relative to site-packages)."""
        ck = "ignite/handlers/checkpoint.py, Checkpoint"
        first_saved = (f"{ck}.__call__: saves whenever fewer than n_saved files are kept "
                       "(_check_lt_n_saved), whatever the score, NaN or -inf included")
        compare = (f"{ck}._compare_fn: a later score is kept iff new > the kept priority, with "
                   "no finiteness check: +inf beats any best, nothing beats a NaN")
        every = ("ignite/engine/events.py, CallableEventWithFilter.every_event_filter: "
                 "EPOCH_COMPLETED(every=n) fires when the 1-based epoch count % n == 0 "
                 "(0-based epochs n-1, 2n-1, ...), and not after a final epoch off that grid")
        nan_stop = ("ignite/handlers/early_stopping.py, EarlyStopping.__call__: "
                    "no_improvement = score <= best_score + threshold is False for NaN (and for "
                    "any score once best_score is NaN), so NaN resets the counter and becomes "
                    "best_score")
        stale_remove = (f"{ck}.__call__ and DiskSaver.remove: a resumed best Checkpoint "
                        "removes the file its restored state lists with path.unlink(), which "
                        "raises FileNotFoundError once the interrupted run replaced that file "
                        "after the checkpoint it resumes from was written")
        return {
            "RES-1": stale_remove,
            "RES-2": stale_remove,
            "RES-3": stale_remove,
            "DIST-2": "ignite/handlers/early_stopping.py, EarlyStopping.__call__: decides on "
                      "this rank's score_function value and calls trainer.terminate() on this "
                      "rank only; nothing makes the ranks' decisions agree",
            "DIST-3": f"{ck}.__call__: keeps a score iff this rank's score_function value beats "
                      "its own kept priority (_compare_fn) and fires SAVED_CHECKPOINT on that "
                      "rank; nothing makes the ranks' decisions agree, only the write is rank "
                      "0's (DiskSaver.__call__)",
            "DIST-4": f"{ck}.__call__ removes the old file (save_handler.remove), then "
                      "DiskSaver.__call__ writes on save_on_rank only, and neither waits for "
                      "the other ranks nor makes them wait (no barrier): they go on to the next "
                      "epoch while rank 0 still writes",
            "LOOP-2": f"{every}; ignite/engine/engine.py, Engine._internal_run_as_gen fires "
                      "Events.STARTED on every run() call, a resumed one too",
            "BEST-1": f"{first_saved}; {compare}",
            "BEST-3": f"{ck}.__call__: a to_save of one object is written as its bare "
                      "state_dict (checkpoint = checkpoint[name]): the step is recorded nowhere, "
                      "the epoch only in the file name (global_step_from_engine)",
            "BEST-4": f"{first_saved}; the test pass then loads that file",
            "NAN-1": compare,
            "NAN-2": first_saved,
            "NAN-3": nan_stop,
            "PAT-1": "ignite/handlers/early_stopping.py, EarlyStopping.__call__: the first "
                     "score only initializes best_score (never counted, even NaN), and a NaN "
                     "best_score makes every later score an improvement",
            "PAT-5": f"{first_saved}; {every}",
            "RES-5": f"{ck}.load_objects: hands each state to the object's load_state_dict "
                     "(via ignite/utils.py, _tree_apply2) with no check that the optimizer is "
                     "the one the checkpoint was written with; torch then fails in SGD.step",
            "CKPT-1": every,
            "CKPT-2": f"{ck}.__call__: with n_saved files kept, the old file is removed "
                      "(save_handler.remove) before the new one is written, so a kill during "
                      "the write leaves no last checkpoint at all",
            "CKPT-4": f"{ck}.load_objects: torch.load(checkpoint, weights_only=True) is called "
                      "as is; torch's error for a truncated file does not name it",
        }

    def describe_checkpoints(self, root: Path) -> list[dict[str, Any]]:
        """Every file under ``root``: ``best_model_<g>_score=<s>.pt``, ``checkpoint_<i>.pt``
        and ``epoch_checkpoint_<i>.pt`` mapped to the roles "best", "last" and "epoch".

        ``epoch`` is zero-based: from the trainer state a last or periodic file holds
        (``iteration // epoch_length - 1``), from the name of a best file, which holds the
        model's weights only (its ``step`` stays None: Ignite records none there). ``step`` is
        the trainer's ``iteration``.
        """
        entries: list[dict[str, Any]] = []
        if not root.exists():
            return entries
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            entry = file_entry(path, root, _role(path.name))
            if path.suffix == ".pt":
                content, error = load_dict(path)
                if content is None:
                    entry["error"] = error
                else:
                    epoch, step = _progress(path.name, content)
                    entry.update(epoch=epoch, step=step, **top_level(content),
                                 holds=_holds(path.name, content))
            entries.append(entry)
        return entries

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        if ctx.world_size == 1:
            _Run(scenario, ctx).run()
            return
        # launched as torchrun launches: Ignite joins the world (env://), spawns nothing
        import ignite.distributed as idist

        timeout = datetime.timedelta(seconds=float(scenario.get("ddp.timeout_s")))
        idist.initialize(scenario.get("ddp.backend") or "gloo", timeout=timeout)
        try:
            _Run(scenario, ctx).run()
            idist.barrier()  # every rank done before the group goes
        finally:
            idist.finalize()


class _Run:
    """One run of a scenario: builds the engines and handlers, and runs the trainer."""

    def __init__(self, scenario: Scenario, ctx: RunContext) -> None:
        self.scenario, self.ctx = scenario, ctx
        self.get = scenario.get
        self.pair = (math.nan, 1.0)  # this rank's scripted (total, count) of the validation
        self.phase = "epoch"  # of the validation under way: "first" or "epoch"
        self.saved_best = False  # the best Checkpoint saved during the validation under way
        self.memory: dict[str, dict[str, Any]] | None = None  # best copies, ckpt.enable=false
        self.steps = 0  # optimizer steps taken, counted by a hook on the optimizer
        self.start_steps = 0
        self.batches = 0
        self.schedulers: list[torch.optim.lr_scheduler.LRScheduler] = []

    def run(self) -> None:
        import ignite.distributed as idist
        from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
        from ignite.handlers.param_scheduler import LRScheduler
        from ignite.utils import manual_seed

        s, ctx, get = self.scenario, self.ctx, self.get
        task = s.task
        seed = int(get("seed"))
        manual_seed(seed)
        splits = task_data(task, seed)
        # on one process plain DataLoaders; on several a DistributedSampler each, and the
        # global batch size split over the ranks
        train_loader: Any = idist.auto_dataloader(  # a DataLoader (XLA: its own loader)
            splits["train"], batch_size=task.batch_size, shuffle=task.shuffle)
        self.val_loader: Any = idist.auto_dataloader(
            splits["val"], batch_size=task.batch_size, shuffle=False)
        self.test_loader: Any = idist.auto_dataloader(
            splits["test"], batch_size=task.batch_size, shuffle=False)
        self.device = device = idist.device()
        self.train_batch_size = train_loader.batch_size
        num_epochs = int(get("num_epochs"))
        total_steps = max(1, len(train_loader) * max(num_epochs, 1))
        if get("grad_clip") is not None:
            raise AdapterError("grad_clip: Ignite 0.5.5's create_supervised_trainer and "
                               "supervised_training_step take no gradient clipping argument")

        self.net = task_model(task)  # the task's model; self.model is what Ignite trains
        self.model = model = idist.auto_model(self.net)  # DistributedDataParallel on >1 rank
        self.optim = optimizer = idist.auto_optim(self.optimizer(self.net))
        optimizer.register_step_post_hook(self.count_step)
        self.trainer = trainer = create_supervised_trainer(
            model, optimizer, functional.cross_entropy, device=device,
            gradient_accumulation_steps=int(get("grad_accum_steps")))
        to_save: dict[str, Any] = {"model": model, "optimizer": optimizer}
        if task.scheduler:
            self.schedulers.append(torch.optim.lr_scheduler.LinearLR(
                optimizer, start_factor=1.0, end_factor=0.1, total_iters=total_steps))
        if task.extra_scheduler:
            self.schedulers.append(torch.optim.lr_scheduler.StepLR(optimizer, step_size=3))
        for i, scheduler in enumerate(self.schedulers):
            handler = LRScheduler(scheduler)
            trainer.add_event_handler(Events.ITERATION_STARTED, handler)
            to_save["lr_scheduler" if i == 0 else f"lr_scheduler{i + 1}"] = handler
        to_save["trainer"] = trainer

        # the suite's own handlers first on each event: they observe what Ignite does next
        trainer.add_event_handler(Events.EPOCH_STARTED, self.train_start)
        sampler = train_loader.sampler
        if isinstance(sampler, DistributedSampler):  # as setup_common_training_handlers does
            trainer.add_event_handler(Events.EPOCH_STARTED,
                                      lambda engine: sampler.set_epoch(engine.state.epoch - 1))
        trainer.add_event_handler(Events.ITERATION_COMPLETED, self.count_batch)
        trainer.add_event_handler(Events.EPOCH_COMPLETED, self.train_end)
        self.attach_validation(to_save)
        to_load = self.attach_checkpoints(to_save)
        self.load(to_load)

        self.final = plain_weights(self.net.state_dict())
        ctx.emit({"ev": "setup", "ckpt_given": get("ckpt.load_from") is not None,
                  "train_len_seen": len(train_loader), "schedule_steps": total_steps,
                  "epoch": 0, "train_step": 0,
                  "cfg_seen": {"num_epochs": num_epochs,
                               "grad_accum_steps": get("grad_accum_steps"),
                               "ckpt.enable": get("ckpt.enable"), "save_preds.enable": None,
                               "wandb.mode": None}})
        trainer.run(train_loader, max_epochs=num_epochs)
        self.final = plain_weights(self.net.state_dict())
        if ctx.world_size > 1:
            idist.barrier()  # the best file rank 0 wrote is complete before any rank loads it
        self.test(create_supervised_evaluator(model, device=device))
        ctx.emit({"ev": "end", "epoch": int(trainer.state.epoch),
                  "train_step": int(trainer.state.iteration),
                  "best_file": self.best_snapshot(), "final_weights": encode(self.final),
                  "best_model": self.best_model()})

    def attach_validation(self, to_save: dict[str, Any]) -> None:
        """The evaluator, its score metric, the best Checkpoint and EarlyStopping on its
        COMPLETED (in that order, with the suite's crash point between the two), and the
        trainer's events that run it."""
        from ignite.engine import Engine, Events, create_supervised_evaluator
        from ignite.handlers import Checkpoint, EarlyStopping, global_step_from_engine
        from ignite.handlers.checkpoint import CheckpointEvents
        from ignite.metrics import Metric
        from ignite.metrics.metric import reinit__is_reduced, sync_all_reduce

        run, get, trainer = self, self.get, self.trainer

        class ScriptedScore(Metric):
            """This rank's scripted (total, count) of the validation, as an Ignite metric: the
            batches go through the model, the score is the script's total / count. Written
            as Ignite's guide to custom metrics says for distributed use: ``reset`` and
            ``update`` are ``@reinit__is_reduced``."""

            @reinit__is_reduced
            def reset(self) -> None:
                self.total, self.count = 0.0, 0.0

            @reinit__is_reduced
            def update(self, output: Any) -> None:
                self.total, self.count = run.pair

            def compute(self) -> float:  # rank-local: the task's "local" metric
                return math.nan if self.count == 0 else self.total / self.count

        class PooledScore(ScriptedScore):
            """The same, pooled across ranks by Ignite: ``@sync_all_reduce`` sums every rank's
            total and count before ``compute`` (sum of totals over sum of counts; a NaN
            total makes the sum NaN; no count anywhere: NaN). A no-op on one process."""

            @sync_all_reduce("total", "count")
            def compute(self) -> float:
                return super().compute()

        class TorchmetricsScore(ScriptedScore):
            """The task's "torchmetrics" score: pooled by torchmetrics, as for every adapter
            (``pool_with_torchmetrics``), inside Ignite's metric."""

            def compute(self) -> float:
                return pool_with_torchmetrics(self.total, self.count)

        metric = self.scenario.task.metric
        score = {"local": ScriptedScore, "torchmetrics": TorchmetricsScore}.get(
            metric, PooledScore)()
        evaluator = create_supervised_evaluator(self.model, metrics={MONITOR: score},
                                                device=self.device)
        evaluator.register_events(*CheckpointEvents)
        sign = -1.0 if get("val.minimize") else 1.0
        score_function = Checkpoint.get_default_score_fn(MONITOR, score_sign=sign)
        self.best_handler = Checkpoint(
            {"model": self.model}, self.best_saver(), filename_prefix="best",
            score_function=score_function, score_name=MONITOR, n_saved=1,
            global_step_transform=global_step_from_engine(trainer))
        evaluator.add_event_handler(Events.COMPLETED, self.best_handler)
        evaluator.add_event_handler(CheckpointEvents.SAVED_CHECKPOINT, self.on_saved)
        evaluator.add_event_handler(Events.COMPLETED, self.after_save)
        patience = get("val.patience")
        if patience is not None:
            stopper = EarlyStopping(patience=int(patience), score_function=score_function,
                                    trainer=trainer)
            evaluator.add_event_handler(Events.COMPLETED, stopper)
            to_save["early_stopping"] = stopper
        to_save["best_checkpoint"] = self.best_handler
        evaluator.add_event_handler(Events.COMPLETED, self.emit_validation)

        def validate(engine: Engine, phase: str) -> None:
            epoch = None if phase == "first" else engine.state.epoch - 1
            if epoch is not None:
                self.ctx.crash_point("val_start", epoch)
            self.phase, self.saved_best = phase, False
            self.pair = self.scenario.scores.pairs(epoch, self.ctx.rank)
            evaluator.run(self.val_loader)

        if get("val.first"):
            trainer.add_event_handler(Events.STARTED, validate, "first")
        trainer.add_event_handler(Events.EPOCH_COMPLETED(every=int(get("val.every_n_epochs"))),
                                  validate, "epoch")

    def best_saver(self) -> Any:
        """Where the best Checkpoint saves: the run's folder, or memory without ckpt.enable."""
        from ignite.handlers import DiskSaver
        from ignite.handlers.checkpoint import BaseSaveHandler

        if self.get("ckpt.enable"):
            return DiskSaver(self.ctx.ckpt_root, require_empty=False)

        class MemorySaver(BaseSaveHandler):
            """Keeps checkpoints in memory, as copies (a save handler is any callable)."""

            def __init__(self, store: dict[str, dict[str, Any]]) -> None:
                self.store = store

            def __call__(self, checkpoint: Mapping[str, Any], filename: str,
                         metadata: Mapping[str, Any] | None = None) -> None:
                self.store[filename] = copy.deepcopy(dict(checkpoint))

            def remove(self, filename: str) -> None:
                self.store.pop(filename, None)

        self.memory = {}
        return MemorySaver(self.memory)

    def attach_checkpoints(self, to_save: dict[str, Any]) -> dict[str, Any]:
        """The last and periodic Checkpoints on the trainer's EPOCH_COMPLETED, after the
        validation; returns what a resume loads."""
        from ignite.engine import Events
        from ignite.handlers import Checkpoint, DiskSaver

        get, trainer = self.get, self.trainer
        to_load = dict(to_save)
        if not get("ckpt.enable"):
            return to_load
        if get("ckpt.save_last"):
            last = Checkpoint(to_save, DiskSaver(self.ctx.ckpt_root, require_empty=False),
                              n_saved=1, include_self=True)
            trainer.add_event_handler(Events.EPOCH_COMPLETED, last)
            to_load["checkpointer"] = last
        every = get("ckpt.every_n_epochs")
        if every:
            trainer.add_event_handler(Events.EPOCH_COMPLETED(every=int(every)), Checkpoint(
                to_save, DiskSaver(self.ctx.ckpt_root, require_empty=False),
                filename_prefix="epoch", n_saved=None))
        return to_load

    def load(self, to_load: dict[str, Any]) -> None:
        """Resume: every saved object back; finetune: the model's weights into a fresh run."""
        from ignite.handlers import Checkpoint

        get = self.get
        load_from = get("ckpt.load_from")
        if load_from is None:
            return
        if not get("ckpt.resume") or get("ckpt.model_only"):
            Checkpoint.load_objects(to_load={"model": self.model}, checkpoint=load_from)
            return
        # loaded first, as Ignite's resume guide does, so that the last Checkpoint restores
        # its own file list only from its own files (a periodic file holds none)
        checkpoint = torch.load(load_from, map_location="cpu", weights_only=True)
        if "checkpointer" not in checkpoint:
            to_load.pop("checkpointer", None)
        Checkpoint.load_objects(to_load=to_load, checkpoint=checkpoint)

    def optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        task = self.scenario.task
        params = list(model.parameters())
        groups: list[dict[str, Any]] = [{"params": params}]
        if task.extra_param_group:
            groups = [{"params": params[:-1]}, {"params": params[-1:], "lr": task.lr / 2}]
        if task.optimizer == "sgd":
            return torch.optim.SGD(groups, lr=task.lr, momentum=0.9)
        return torch.optim.Adam(groups, lr=task.lr)

    def test(self, tester: Any) -> None:
        """The test pass, on the best checkpoint's weights when the best Checkpoint saved one."""
        from ignite.engine import Events
        from ignite.handlers import Checkpoint

        if not self.get("test.enable"):
            return
        best = self.best_checkpoint()
        if best is not None:
            Checkpoint.load_objects(to_load={"model": self.model}, checkpoint=best)

        def on_start(engine: Any) -> None:
            self.ctx.emit({"ev": "test", "used_best": best is not None,
                           "weights": encode(plain_weights(self.net.state_dict()))})

        tester.add_event_handler(Events.STARTED, on_start)
        tester.run(self.test_loader)

    # the trainer's events

    def count_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.steps += 1

    def count_batch(self, engine: Any) -> None:
        self.batches += 1

    def train_start(self, engine: Any) -> None:
        epoch = int(engine.state.epoch) - 1  # Ignite counts epochs from 1
        self.ctx.crash_point("train_start", epoch)
        self.batches, self.start_steps = 0, self.steps
        state: dict[str, Any] = {"weights": plain_weights(self.net.state_dict()),
                                 "optimizer": self.optim.state_dict(), "rng": rng_digests()}
        if self.schedulers:
            state["scheduler"] = self.schedulers[0].state_dict()
        last = _snapshot(_newest(self.ctx.ckpt_root, "last"))
        self.ctx.emit({"ev": "train_start", "epoch": epoch,
                       "train_step": int(engine.state.iteration), "state": encode(state),
                       "last_file_epoch": None if last is None else last.get("epoch"),
                       "best_file": self.best_snapshot()})

    def train_end(self, engine: Any) -> None:
        epoch = int(engine.state.epoch) - 1
        self.final = plain_weights(self.net.state_dict())
        # Ignite draws every batch of a loader it runs on; there is no third, eval split
        lens: dict[str, int | None] = {"eval_loader": None, "val_loader": len(self.val_loader),
                                       "test_loader": len(self.test_loader)}
        self.ctx.emit({"ev": "train_end", "epoch": epoch,
                       "train_step": int(engine.state.iteration), "batches": self.batches,
                       "optimizer_steps": self.steps - self.start_steps,
                       "loader_len": int(engine.state.epoch_length),
                       "loader_batch_size": self.train_batch_size,
                       "loader_lens": lens, "loader_batches": lens})
        self.ctx.crash_point("train_end", epoch)

    # the evaluator's events

    def on_saved(self, engine: Any) -> None:
        self.saved_best = True

    def after_save(self, engine: Any) -> None:
        if self.phase == "epoch":
            self.ctx.crash_point("val_after_save", int(self.trainer.state.epoch) - 1)

    def emit_validation(self, evaluator: Any) -> None:
        trainer_epoch = int(self.trainer.state.epoch)
        epoch = trainer_epoch if self.phase == "first" else trainer_epoch - 1
        self.ctx.emit({"ev": "val", "epoch": epoch, "phase": self.phase,
                       "score": float(evaluator.state.metrics[MONITOR]),
                       "improved": self.saved_best,
                       "stop": bool(self.trainer.should_terminate),
                       "weights": encode(plain_weights(self.net.state_dict())),
                       "best_file": self.best_snapshot()})

    # the best model, as the best Checkpoint keeps it

    def best_checkpoint(self) -> Path | dict[str, Any] | None:
        """The best Checkpoint's current file, or its in-memory copy; None before any save."""
        handler = self.best_handler
        if handler.last_checkpoint is None:
            return None
        if self.memory is not None:
            return self.memory.get(str(handler.last_checkpoint))
        path = Path(handler.last_checkpoint)
        return path if path.is_file() else None

    def best_snapshot(self) -> dict[str, Any] | None:
        best = self.best_checkpoint()
        return _snapshot(best) if isinstance(best, Path) else None

    def best_model(self) -> Any:
        best = self.best_checkpoint()
        if best is None:
            return None
        if isinstance(best, Path):
            content, _ = load_dict(best)
            return None if content is None else encode(_model_state(content))
        return encode(_model_state(best))
