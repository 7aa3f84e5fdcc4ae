"""The adapter for PyTorch Lightning (``trainspec check lightning``).

Lightning is configured the way its documentation tells a user to, for the scenario's keys,
and never bent to pass a check:

- ``ModelCheckpoint(dirpath=ckpt_root, filename="best", monitor="score", mode=...,
  save_last=ckpt.save_last)`` keeps the best model and ``last.ckpt``; a second
  ``ModelCheckpoint(every_n_epochs=ckpt.every_n_epochs, save_top_k=-1)`` keeps the periodic
  ``epoch=N-step=M.ckpt`` files when that key is set;
- ``EarlyStopping(monitor="score", mode=..., patience=val.patience)`` only when patience is set
  (Lightning's EarlyStopping has no counterpart of ``val.start_patience``);
- ``Trainer(max_epochs=num_epochs, check_val_every_n_epoch=val.every_n_epochs,
  accumulate_grad_batches=grad_accum_steps, gradient_clip_val=grad_clip, ...)`` on CPU;
  on several ranks ``strategy=DDPStrategy(timeout=ddp.timeout_s), devices=world_size`` in
  processes launched as torchrun launches them (Lightning joins the process group and spawns
  nothing);
- resume: ``trainer.fit(..., ckpt_path=ckpt.load_from)``; finetune: the checkpoint's
  ``state_dict`` loaded into the module, then a fresh fit; debug: ``fast_dev_run=True``;
- the test pass: ``trainer.test(ckpt_path="best")`` when a best checkpoint exists.

The LightningModule trains the suite's task (the probe's data and model recipe) and logs the
scripted score as the monitored metric ``score``: each rank's (total, count) as a mean over
``count`` samples with ``sync_dist=True``, so Lightning pools it across ranks itself. A small
callback turns Lightning's hooks into the suite's events. A validation's ``improved`` is whether
ModelCheckpoint's best model changed at that validation, its ``stop`` is ``trainer.should_stop``
after EarlyStopping ran: both are read once every callback has acted on the validation (at the
next epoch's start, or when training ends), because Lightning runs its monitoring callbacks
after the user's.

Lightning is imported inside the methods only: importing this module never imports it.
"""

from __future__ import annotations

import datetime
import math
import re
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional
from torch.utils.data import DataLoader

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

__all__ = ["LightningAdapter"]

MONITOR = "score"
_PREFIX = "net."  # the module's attribute holding the task's model
_EPOCH_FILE = re.compile(r"^epoch=(\d+)-step=(\d+)(-v\d+)?\.ckpt$")


def _role(name: str) -> str | None:
    """The role of a Lightning checkpoint file under this adapter's names."""
    if not name.endswith(".ckpt"):
        return None
    if re.match(r"^last(-v\d+)?\.ckpt$", name):
        return "last"
    if re.match(r"^best(-v\d+)?\.ckpt$", name):
        return "best"
    return "epoch" if _EPOCH_FILE.match(name) else None


def _net_state(content: dict[str, Any]) -> dict[str, torch.Tensor]:
    state = content.get("state_dict", {})
    return {k.removeprefix(_PREFIX): v for k, v in state.items()
            if isinstance(v, torch.Tensor) and k.startswith(_PREFIX)}


def _holds(content: dict[str, Any]) -> list[str]:
    """What a Lightning checkpoint holds, in the spec's terms: ``epoch``, ``global_step``
    (step), ``state_dict`` (model), ``optimizer_states`` and ``lr_schedulers``; the config
    when the module saved hyperparameters (``hyper_parameters``). Lightning stores no run id."""
    present = {"epoch": "epoch", "global_step": "step", "state_dict": "model",
               "optimizer_states": "optimizer", "lr_schedulers": "scheduler",
               "hyper_parameters": "config"}
    return [name for key, name in present.items() if content.get(key) not in (None, [], {})]


def _snapshot(path: Path | None) -> dict[str, Any] | None:
    """Identity and content of a checkpoint file, in the suite's BestFile shape."""
    if path is None or not path.is_file():
        return None
    stat = path.stat()
    out: dict[str, Any] = {"path": str(path), "mtime_ns": stat.st_mtime_ns,
                           "size": stat.st_size}
    content, error = load_dict(path)
    if content is None:
        out["error"] = error
        return out
    # Lightning's own fields: ``epoch`` is trainer.current_epoch when saved (the epoch in
    # progress, zero-based), ``global_step`` counts optimizer steps
    out["epoch"] = as_int(content.get("epoch"))
    out["step"] = as_int(content.get("global_step"))
    out["weights"] = encode(_net_state(content))
    return out


class LightningAdapter:
    """Runs scenarios through ``lightning.Trainer`` on one CPU process."""

    name = "lightning"

    def capabilities(self) -> frozenset[Capability]:
        # not declared: sigterm (Lightning turns SIGTERM into an exception, not a saved
        # epoch), start_patience
        # (EarlyStopping cannot express it), val_first (a validation before fit is not seen by
        # ModelCheckpoint or EarlyStopping, so it cannot count), eval_only (needs val_first),
        # rng_state (Lightning's checkpoints hold no RNG states)
        return frozenset({"checkpoint", "resume", "finetune", "early_stopping", "val_every_n",
                          "test_pass", "debug", "grad_accum", "multi_rank"})

    def framework_sources(self) -> dict[str, str]:
        """Where in Lightning 2.6 the behaviour behind each failing clause comes from (read in
        the installed sources; paths relative to site-packages)."""
        mc = "lightning/pytorch/callbacks/model_checkpoint.py, ModelCheckpoint"
        nan_best = (f"{mc}._update_best_and_save: a NaN score is replaced by -inf (mode max) or "
                    "+inf (mode min) and saved while the top-k list is not full; "
                    "check_monitor_top_k compares with torch.gt/torch.lt, so +inf beats any best")
        no_tracking = ("lightning/pytorch/trainer/connectors/callback_connector.py, "
                       "_CallbackConnector._configure_checkpoint_callbacks: with "
                       "enable_checkpointing=False (ckpt.enable=false) there is no "
                       "ModelCheckpoint, and ModelCheckpoint is the only place Lightning tracks "
                       "a best score")
        return {
            "BEST-1": no_tracking,
            "PAT-5": no_tracking,
            "LOOP-2": "lightning/pytorch/loops/training_epoch_loop.py, "
                      "_TrainingEpochLoop._should_check_val_epoch: validates when "
                      "(current_epoch + 1) % check_val_every_n_epoch == 0",
            "BEST-4": f"{nan_best}; Trainer.test(ckpt_path='best') then loads that file",
            "NAN-1": nan_best,
            "NAN-2": nan_best,
            "NAN-3": "lightning/pytorch/callbacks/early_stopping.py, "
                     "EarlyStopping._evaluate_stopping_criteria: check_finite=True (the default) "
                     "stops training at the first non-finite score",
            "RES-5": "lightning/pytorch/strategies/strategy.py, "
                     "Strategy.load_optimizer_state_dict: optimizer.load_state_dict(opt_state) "
                     "for whatever optimizer configure_optimizers returns, with no check that it "
                     "is the one the checkpoint was written with",
            "DBG-3": f"{mc}.on_train_end: writes last.ckpt when save_last is set and none was "
                     "saved, without the fast_dev_run guard its other save paths have "
                     "(_should_skip_saving_checkpoint)",
            "CKPT-1": f"{mc}.on_validation_end: last.ckpt is written only when a top-k "
                      "checkpoint was saved at this step (save_last: 'a copy whenever a "
                      "checkpoint file gets saved'), and every_n_epochs saves when "
                      "(current_epoch + 1) % every_n_epochs == 0",
            "CKPT-4": "lightning/fabric/utilities/cloud_io.py, _load: the error of torch.load "
                      "on a damaged file is raised as is, without the checkpoint's path",
        }

    def environment(self) -> dict[str, str | None]:
        import lightning

        return {"framework": f"lightning {lightning.__version__}"}

    def describe_checkpoints(self, root: Path) -> list[dict[str, Any]]:
        """Every file under ``root``: last.ckpt, best.ckpt and epoch=N-step=M.ckpt mapped to
        the roles "last", "best" and "epoch". ``epoch`` is Lightning's stored ``epoch`` field
        as is (trainer.current_epoch at save time) and ``step`` its ``global_step``."""
        entries: list[dict[str, Any]] = []
        if not root.exists():
            return entries
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            entry = file_entry(path, root, _role(path.name))
            if path.suffix == ".ckpt":
                content, error = load_dict(path)
                if content is None:
                    entry["error"] = error
                else:
                    entry.update(epoch=as_int(content.get("epoch")),
                                 step=as_int(content.get("global_step")),
                                 **top_level(content), holds=_holds(content))
            entries.append(entry)
        return entries

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        _Run(scenario, ctx).run()


class _Run:
    """One run of a scenario: builds the module, the callbacks and the Trainer, and fits."""

    def __init__(self, scenario: Scenario, ctx: RunContext) -> None:
        self.scenario, self.ctx = scenario, ctx
        self.get = scenario.get

    def run(self) -> None:
        import lightning
        from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint

        s, ctx, get = self.scenario, self.ctx, self.get
        task = s.task
        seed = int(get("seed"))
        lightning.seed_everything(seed, verbose=False)
        splits = task_data(task, seed)
        train_loader = DataLoader(splits["train"], batch_size=task.batch_size,
                                  shuffle=task.shuffle)
        val_loader = DataLoader(splits["val"], batch_size=task.batch_size)
        test_loader = DataLoader(splits["test"], batch_size=task.batch_size)
        num_epochs = int(get("num_epochs"))
        total_steps = max(1, len(train_loader) * max(num_epochs, 1))
        mode = "min" if get("val.minimize") else "max"
        load_from = get("ckpt.load_from")
        resume = bool(get("ckpt.resume")) and not get("ckpt.model_only") \
            and load_from is not None
        debug = bool(get("debug"))

        class Module(lightning.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.net = task_model(task)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                out: torch.Tensor = self.net(x)
                return out

            def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
                x, y = batch
                return functional.cross_entropy(self(x), y)

            def validation_step(self, batch: Any, batch_idx: int) -> None:
                self(batch[0])  # the score is scripted, not measured

            def on_validation_epoch_end(self) -> None:
                # this rank's (total, count), logged the way Lightning's docs say for the
                # task's kind of metric: pooled by torchmetrics; a mean over `count` samples
                # with sync_dist=True, as a validation_step logging its batch's mean does
                # (Lightning weights each rank by its batch sizes); or a rank-local value
                total, count = s.scores.pairs(self.trainer.current_epoch, ctx.rank)
                local = math.nan if count == 0 else total / count
                if task.metric == "torchmetrics":  # pooled as for every adapter
                    self.log(MONITOR, pool_with_torchmetrics(total, count))
                elif task.metric == "reduce_mean":
                    # a rank without samples adds nothing (0 * 0); all without: 0/0 = NaN
                    self.log(MONITOR, local if count else 0.0, sync_dist=True,
                             batch_size=int(count))
                else:
                    self.log(MONITOR, local)

            def test_step(self, batch: Any, batch_idx: int) -> None:
                self(batch[0])

            def configure_optimizers(self) -> Any:
                params = list(self.net.parameters())
                groups: list[dict[str, Any]] = [{"params": params}]
                if task.extra_param_group:
                    groups = [{"params": params[:-1]},
                              {"params": params[-1:], "lr": task.lr / 2}]
                optimizer: torch.optim.Optimizer
                if task.optimizer == "sgd":
                    optimizer = torch.optim.SGD(groups, lr=task.lr, momentum=0.9)
                else:
                    optimizer = torch.optim.Adam(groups, lr=task.lr)
                if not task.scheduler:
                    return optimizer
                scheduler = torch.optim.lr_scheduler.LinearLR(
                    optimizer, start_factor=1.0, end_factor=0.1, total_iters=total_steps)
                return {"optimizer": optimizer,
                        "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

        if load_from is not None and not resume:  # finetune: the weights, a fresh run
            module = Module.load_from_checkpoint(load_from, map_location="cpu")
        else:
            module = Module()

        best_cb: Any = None
        callbacks: list[Any] = []
        if get("ckpt.enable"):
            best_cb = ModelCheckpoint(dirpath=ctx.ckpt_root, filename="best", monitor=MONITOR,
                                      mode=mode, save_last=bool(get("ckpt.save_last")))
            callbacks.append(best_cb)
            every = get("ckpt.every_n_epochs")
            if every:
                callbacks.append(ModelCheckpoint(dirpath=ctx.ckpt_root, every_n_epochs=every,
                                                 save_top_k=-1))
        patience = get("val.patience")
        if patience is not None:
            callbacks.append(EarlyStopping(monitor=MONITOR, mode=mode, patience=patience))

        run = self
        self.pending: dict[str, Any] | None = None
        self.loaders = {"val_loader": val_loader, "test_loader": test_loader}
        self.final: dict[str, torch.Tensor] = plain_weights(module.net.state_dict())

        class Events(Callback):
            """The suite's events from Lightning's hooks."""

            def __init__(self) -> None:
                self.batches = 0
                self.start_step = 0
                self.ended: int | None = None

            def on_train_start(self, trainer: Any, pl_module: Any) -> None:
                run.best_before = run.best_state()  # as restored by a resume

            def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
                run.flush(trainer)
                epoch = int(trainer.current_epoch)
                ctx.crash_point("train_start", epoch)
                self.batches, self.start_step, self.ended = 0, int(trainer.global_step), None
                state: dict[str, Any] = {"weights": plain_weights(pl_module.net.state_dict()),
                                         "optimizer": trainer.optimizers[0].state_dict(),
                                         "rng": rng_digests()}
                if trainer.lr_scheduler_configs:
                    state["scheduler"] = trainer.lr_scheduler_configs[0].scheduler.state_dict()
                last = _snapshot(ctx.ckpt_root / "last.ckpt")
                ctx.emit({"ev": "train_start", "epoch": epoch,
                          "train_step": int(trainer.global_step), "state": encode(state),
                          "last_file_epoch": None if last is None else last.get("epoch"),
                          "best_file": run.best_snapshot()})

            def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any,
                                   batch: Any, batch_idx: int) -> None:
                self.batches += 1

            def end_epoch(self, trainer: Any, pl_module: Any) -> None:
                epoch = int(trainer.current_epoch)
                if self.ended == epoch:
                    return
                self.ended = epoch
                run.final = plain_weights(pl_module.net.state_dict())
                ctx.emit({"ev": "train_end", "epoch": epoch,
                          "train_step": int(trainer.global_step), "batches": self.batches,
                          "optimizer_steps": int(trainer.global_step) - self.start_step,
                          "loader_len": int(trainer.num_training_batches),
                          "loader_batch_size": task.batch_size,
                          "loader_lens": run.planned(trainer), "loader_batches":
                          run.planned(trainer)})
                ctx.crash_point("train_end", epoch)

            def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
                if trainer.sanity_checking or trainer.state.fn != "fit":
                    return
                self.end_epoch(trainer, pl_module)
                ctx.crash_point("val_start", int(trainer.current_epoch))

            def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
                if trainer.sanity_checking or trainer.state.fn != "fit":
                    return
                epoch = int(trainer.current_epoch)
                logged = trainer.callback_metrics.get(MONITOR)
                run.pending = {"ev": "val", "epoch": epoch, "phase": "epoch",
                               "score": None if logged is None else float(logged),
                               "weights": encode(plain_weights(pl_module.net.state_dict()))}

            def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
                self.end_epoch(trainer, pl_module)

            def on_train_end(self, trainer: Any, pl_module: Any) -> None:
                run.flush(trainer)

            def on_test_start(self, trainer: Any, pl_module: Any) -> None:
                ctx.emit({"ev": "test", "used_best": run.tested_best,
                          "weights": encode(plain_weights(pl_module.net.state_dict()))})

        events = Events()
        self.best_cb = best_cb
        self.best_before: tuple[str, str] = self.best_state()
        strategy: Any = "auto"
        if ctx.world_size > 1:  # launched as torchrun does; Lightning joins, spawns nothing
            from lightning.pytorch.strategies import DDPStrategy

            timeout = datetime.timedelta(seconds=float(get("ddp.timeout_s")))
            strategy = DDPStrategy(timeout=timeout)
        trainer = lightning.Trainer(
            max_epochs=num_epochs, strategy=strategy, devices=ctx.world_size,
            check_val_every_n_epoch=int(get("val.every_n_epochs")),
            num_sanity_val_steps=0, accumulate_grad_batches=int(get("grad_accum_steps")),
            gradient_clip_val=get("grad_clip"), accelerator="cpu", logger=False,
            enable_progress_bar=False, enable_model_summary=False,
            enable_checkpointing=bool(get("ckpt.enable")), callbacks=[events, *callbacks],
            default_root_dir=ctx.ckpt_root, fast_dev_run=debug)
        ctx.emit({"ev": "setup", "ckpt_given": load_from is not None,
                  "train_len_seen": len(train_loader), "schedule_steps": total_steps,
                  "epoch": 0, "train_step": 0,
                  "cfg_seen": {"num_epochs": num_epochs,
                               "grad_accum_steps": get("grad_accum_steps"),
                               "ckpt.enable": get("ckpt.enable"), "save_preds.enable": None,
                               "wandb.mode": None}})
        trainer.fit(module, train_dataloaders=train_loader, val_dataloaders=val_loader,
                    ckpt_path=load_from if resume else None)
        self.flush(trainer)
        best_path = self.best_path()
        self.tested_best = best_path is not None
        if get("test.enable"):
            trainer.test(module, dataloaders=test_loader,
                         ckpt_path="best" if self.tested_best else None)
        best_model = None
        if best_path is not None:
            content, _ = load_dict(best_path)
            best_model = None if content is None else encode(_net_state(content))
        ctx.emit({"ev": "end", "epoch": int(trainer.current_epoch),
                  "train_step": int(trainer.global_step), "best_file": self.best_snapshot(),
                  "final_weights": encode(self.final), "best_model": best_model})

    def planned(self, trainer: Any) -> dict[str, int | None]:
        """How many batches Lightning will draw from each evaluation loader: its length, cut
        to the trainer's ``limit_val_batches``/``limit_test_batches`` (fast_dev_run sets them
        to 1). Lightning has no third, eval split: ``eval_loader`` is None."""
        out: dict[str, int | None] = {"eval_loader": None}
        for name, limit in (("val_loader", trainer.limit_val_batches),
                            ("test_loader", trainer.limit_test_batches)):
            n = len(self.loaders[name])
            out[name] = min(n, limit) if isinstance(limit, int) else int(n * limit)
        return out

    def best_state(self) -> tuple[str, str]:
        """ModelCheckpoint's best score and path, comparable across validations."""
        cb = self.best_cb
        if cb is None:
            return "", ""
        score = cb.best_model_score
        return ("" if score is None else repr(float(score))), str(cb.best_model_path)

    def best_path(self) -> Path | None:
        path = self.best_state()[1]
        return Path(path) if path and Path(path).is_file() else None

    def best_snapshot(self) -> dict[str, Any] | None:
        return _snapshot(self.best_path())

    def flush(self, trainer: Any) -> None:
        """Emit the pending validation once every callback has acted on it."""
        if self.pending is None:
            return
        now = self.best_state()
        improved = now != self.best_before
        self.best_before = now
        event = {**self.pending, "improved": improved, "stop": bool(trainer.should_stop),
                 "best_file": self.best_snapshot()}
        self.pending = None
        # Lightning's EarlyStopping runs before its ModelCheckpoint (checkpoint callbacks go
        # last): the nearest point after the save is after both. The validation is recorded
        # first: by then it is decided and saved (last.ckpt holds it), so a kill there must not
        # hide it from the trace
        self.ctx.emit(event)
        self.ctx.crash_point("val_after_save", int(event["epoch"]))
