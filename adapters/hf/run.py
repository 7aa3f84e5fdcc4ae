"""One run of the transformers ``Trainer``: its arguments for a scenario's keys, its hooks
reported as records, and the run itself (see ``docs/frameworks/hf.md``).

transformers is imported inside functions only: importing this module never imports it.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import TensorDataset

from trainspec.adapters.hf import files as hf_files
from trainspec.adapters.hf.task import (
    TALLY,
    Scored,
    TaskModel,
    collate,
    eval_batch_size,
    eval_holders,
    model_weights,
    pooled_tally,
    rank_batches,
    sample_tallies,
    unheld_rank,
)
from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.recording import PendingValidation, trainer_state
from trainspec.conformance.run.records import (
    Phase,
    RunEnd,
    Setup,
    TestPass,
    TrainEnd,
    TrainStart,
    Weights,
)
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.task import task_data, task_model, task_optimizer, task_schedulers
from trainspec.errors import AdapterError

__all__ = ["Run", "offline", "refuse_what_cannot_be_expressed", "training_arguments"]

MONITOR = "score"


def offline() -> None:
    """No network: the Hub is never contacted (a user's explicit setting is kept)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def training_arguments(scenario: Scenario, ckpt_root: Path,
                       remedies: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The ``TrainingArguments`` keywords for a scenario's keys (each value of the type its
    field takes; why each is set so: ``docs/frameworks/hf.md``), at the Trainer's defaults
    but for the ``remedies`` named (``REMEDIES``)."""
    get, task = scenario.get, scenario.task
    ckpt_on = bool(get("ckpt.enable"))
    limit: int | None
    if not ckpt_on:
        save_strategy, limit = "no", None
    elif get("ckpt.every_n_epochs"):
        save_strategy, limit = "epoch", None  # every checkpoint kept: no every-n-th rotation
    elif get("ckpt.save_last"):
        save_strategy, limit = "epoch", 2  # the newest and the best (1 drops the newest at end)
    else:
        save_strategy, limit = "best", 1  # a checkpoint on each improvement only
    grad_clip = get("grad_clip")
    # on several ranks, the fields HF's docs give for a distributed run (see the docs page)
    ddp: dict[str, Any] = {} if scenario.world_size == 1 else {
        "ddp_backend": get("ddp.backend") or "gloo", "ddp_timeout": get("ddp.timeout_s")}
    return {
        "output_dir": str(ckpt_root), "num_train_epochs": int(get("num_epochs")),
        "per_device_train_batch_size": task.batch_size,
        "per_device_eval_batch_size": eval_batch_size(task, scenario.world_size),
        "gradient_accumulation_steps": int(get("grad_accum_steps")),
        "max_grad_norm": 0.0 if grad_clip is None else float(grad_clip),
        "eval_strategy": "epoch", "eval_on_start": bool(get("val.first")),
        "save_strategy": save_strategy, "save_total_limit": limit,
        "load_best_model_at_end": ckpt_on, "metric_for_best_model": MONITOR,
        "greater_is_better": not get("val.minimize"),
        "restore_callback_states_from_checkpoint": "restore_callback_states" in remedies,
        "enable_jit_checkpoint": ckpt_on and "jit_checkpoint" in remedies,
        "train_sampling_strategy": "random" if task.shuffle else "sequential",
        "lr_scheduler_type": "linear" if task.scheduler else "constant",
        "seed": int(get("seed")), "use_cpu": True, "report_to": "none", "disable_tqdm": True,
        "logging_strategy": "no", "dataloader_pin_memory": False,
        "label_names": ["labels", TALLY], **ddp,
    }

def refuse_what_cannot_be_expressed(scenario: Scenario) -> None:
    """Keys this adapter cannot express (undeclared capabilities) fail loudly."""
    get = scenario.get
    cannot = {"val.every_n_epochs": get("val.every_n_epochs") != 1,
              "val.start_patience": bool(get("val.start_patience")),
              "debug": bool(get("debug"))}
    named = [k for k, bad in cannot.items() if bad]
    if named:
        raise AdapterError(f"the hf adapter cannot express {', '.join(named)} (see "
                           "trainspec.adapters.hf)")
    backend = get("ddp.backend")
    if scenario.world_size > 1 and backend not in (None, "gloo"):
        raise AdapterError(f"ddp.backend={backend!r}: the hf adapter trains on the CPU "
                           "(use_cpu=True), where accelerate takes gloo only; run the check "
                           "without --backend, or with --backend gloo")
    unheld = unheld_rank(scenario)
    if unheld is not None:
        raise AdapterError(unheld)


class _Hooks:
    """The Trainer's hooks, reported as records by the run (the body :func:`_callback_class`
    mixes into ``TrainerCallback``)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.batches = self.steps = self.start_step = 0
        self.started = False  # the epoch's state is recorded (at its first step)

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.run.start_epoch(state)
        self.batches = self.steps = 0
        self.start_step, self.started = int(state.global_step), False

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if not self.started:
            self.started = True  # the Trainer has restored a resumed run's RNG by now
            self.run.record_start(state)

    def on_substep_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.batches += 1

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.batches += 1
        self.steps += 1

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.run.end_epoch(state, kw.get("train_dataloader"), self.batches, self.steps)
        if control.should_evaluate:
            self.run.ctx.crash_point("val_start", self.run.epoch)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.run.hold(state, kw.get("metrics") or {})

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.run.settle()

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.run.settle()

    def on_predict(self, args: Any, state: Any, control: Any, metrics: Any = None,
                   **kw: Any) -> None:
        # ``metrics``: TrainerCallback.on_predict's own parameter (the test pass scores nothing)
        self.run.ctx.record(TestPass(weights=model_weights(self.run.trainer.model)))


@functools.cache
def _callback_class() -> type[_Hooks]:
    from transformers import TrainerCallback

    class Hooks(_Hooks, TrainerCallback):
        """The run's hooks as a Trainer callback."""

    return Hooks


class Run:
    """One run of a scenario: the model, the arguments, the callbacks, the Trainer; train, then
    predict on the test split."""

    def __init__(self, scenario: Scenario, ctx: RunContext,
                 remedies: frozenset[str] = frozenset()) -> None:
        self.remedies = remedies
        self.scenario, self.ctx, self.get = scenario, ctx, scenario.get
        # the evaluation in progress: "first" (eval_on_start), "epoch", or the test pass
        self.phase: Literal["first", "epoch", "test"] = "first"
        self.epoch = 0
        self.pending = PendingValidation(ctx)
        self.best_before: float | None = None  # state.best_metric when the pending one ran
        self.trainer: Any = None
        self.scheduler: Any = None  # the schedule handed to the Trainer, if any
        self.final: Weights = {}
        load_from = self.get("ckpt.load_from")
        self.load_from = None if load_from is None else str(load_from)
        self.resume = bool(self.get("ckpt.resume")) and not self.get("ckpt.model_only") \
            and load_from is not None
        # this rank's share of the batches (accelerate deals whole batches, evened out)
        task = scenario.task
        self.train_len = rank_batches(task.n_train, task.batch_size, ctx.world_size)

    def run(self) -> None:
        offline()
        import transformers

        refuse_what_cannot_be_expressed(self.scenario)
        seed = int(self.get("seed"))
        transformers.set_seed(seed)
        splits = task_data(self.scenario.task, seed)
        model = self.build_model()
        self.trainer = self.build_trainer(model, splits["train"], Scored(
            splits["val"], self.scenario.task.n_val, self.tally))
        self.ctx.record(Setup(epoch=0, train_step=0, train_len=self.train_len))
        self.fit()
        if self.get("test.enable"):
            self.test(splits["test"])
        best = hf_files.snapshot(self.best_dir())
        self.ctx.record(RunEnd(train_step=int(self.trainer.state.global_step),
                               final_weights=self.final,
                               best_model=None if best is None else best.weights,
                               best_file=best))
        end: Any = self.trainer.end  # untyped in transformers
        end()  # the documented last call of a script: destroys the process group, if any

    def build_model(self) -> TaskModel:
        """The task's model; for a finetune, with the checkpoint's weights (a fresh run)."""
        model = TaskModel(task_model(self.scenario.task))
        if self.load_from is not None and not self.resume:
            model.load_state_dict(hf_files.finetune_weights(self.load_from))
        self.final = model_weights(model)
        return model

    def build_optimizers(self, model: TaskModel) -> tuple[torch.optim.Optimizer, Any]:
        """The task's optimizer and schedule; several schedules as one ``ChainedScheduler``,
        the Trainer having a single scheduler slot (None: the Trainer's constant one)."""
        task = self.scenario.task
        optimizer = task_optimizer(task, model.net.parameters())
        total_steps = max(1, self.train_len * max(int(self.get("num_epochs")), 1))
        schedulers = task_schedulers(task, optimizer, total_steps)
        if len(schedulers) > 1:
            self.scheduler = torch.optim.lr_scheduler.ChainedScheduler(schedulers)
        else:
            self.scheduler = schedulers[0] if schedulers else None
        return optimizer, self.scheduler

    def build_trainer(self, model: TaskModel, train: TensorDataset, val: Scored) -> Any:
        from transformers import EarlyStoppingCallback, Trainer, TrainingArguments

        optimizers = self.build_optimizers(model)
        args = TrainingArguments(**training_arguments(self.scenario, self.ctx.ckpt_root,
                                                      self.remedies))
        callbacks: list[Any] = []
        patience = self.get("val.patience")
        if patience is not None:
            callbacks.append(EarlyStoppingCallback(early_stopping_patience=int(patience)))
        callbacks.append(_callback_class()(self))
        return Trainer(model=model, args=args, train_dataset=train, eval_dataset=val,
                       data_collator=collate, compute_metrics=self.compute_metrics,
                       callbacks=callbacks, optimizers=optimizers)

    def fit(self) -> None:
        self.trainer.train(resume_from_checkpoint=self.load_from if self.resume else None)
        self.settle()

    def test(self, split: TensorDataset) -> None:
        """The test pass on the weights the Trainer holds after train()."""
        self.phase = "test"
        # the test split carries the label too (the Trainer computes a loss only when every
        # label is present); the test pass scores nothing
        self.trainer.predict(Scored(split, self.scenario.task.n_test, lambda index: (0.0, 0.0)))

    def compute_metrics(self, prediction: Any) -> dict[str, float]:
        """The Trainer's evaluation metric: the pooled tallies it gathered from every rank."""
        if self.phase == "test":
            return {}
        if self.scenario.task.metric == "local":  # this rank's own score, never shared
            total, count = self.scenario.scores.pairs(self.validation(), self.ctx.rank)
            return {MONITOR: math.nan if count == 0 else total / count}
        # the tallies of every rank's samples, gathered by the Trainer (label_ids[1])
        return {MONITOR: pooled_tally(prediction.label_ids[1], self.scenario.task.metric)}

    def validation(self) -> int | None:
        """The validation in progress, as the score script names it (None: val.first)."""
        return None if self.phase == "first" else self.epoch

    def tally(self, index: int) -> tuple[float, float]:
        """Validation sample ``index``'s (total, count) in the validation in progress."""
        s, task, n = self.scenario, self.scenario.task, self.ctx.world_size
        pairs = [s.scores.pairs(self.validation(), rank) for rank in range(n)]
        holders = eval_holders(task.n_val, eval_batch_size(task, n), n)
        return sample_tallies(pairs, holders)[index]

    def start_epoch(self, state: Any) -> None:
        self.settle()
        epoch = hf_files.completed_epoch(state.epoch)
        self.epoch, self.phase = (0 if epoch is None else epoch + 1), "epoch"
        self.ctx.crash_point("train_start", self.epoch)

    def record_start(self, state: Any) -> None:
        """The epoch's state, recorded at its first step: the Trainer restores a resumed run's
        RNG inside the epoch, after on_epoch_begin."""
        trainer, last = self.trainer, self.last_dir()
        last_epoch = None
        if last is not None:
            saved, _ = hf_files.read_state(last)
            last_epoch = None if saved is None else hf_files.completed_epoch(saved.get("epoch"))
        schedulers = [] if self.scheduler is None else [trainer.lr_scheduler]
        self.ctx.record(TrainStart(
            epoch=self.epoch, train_step=int(state.global_step),
            state=trainer_state(model_weights(trainer.model), trainer.optimizer, schedulers),
            last_file_epoch=last_epoch, best_file=hf_files.snapshot(self.best_dir())))

    def end_epoch(self, state: Any, loader: Any, batches: int, steps: int) -> None:
        self.final = model_weights(self.trainer.model)
        planned = self.planned()
        self.ctx.record(TrainEnd(
            epoch=self.epoch, train_step=int(state.global_step), batches=batches,
            optimizer_steps=steps, loader_len=len(loader) if loader is not None else batches,
            loader_batch_size=getattr(loader, "batch_size", None) or getattr(
                getattr(loader, "batch_sampler", None), "batch_size", None),
            eval_lens=planned, eval_batches=planned))
        self.ctx.crash_point("train_end", self.epoch)

    def planned(self) -> dict[str, int | None]:
        """How many batches the Trainer draws from each evaluation split on this rank: its
        share of all of them, evened out with padding (it has no third, eval split)."""
        task, n = self.scenario.task, self.ctx.world_size
        size = eval_batch_size(task, n)
        return {"val_loader": rank_batches(task.n_val, size, n),
                "test_loader": rank_batches(task.n_test, size, n),
                "eval_loader": None}

    def hold(self, state: Any, metrics: dict[str, float]) -> None:
        """An evaluation's score and weights, until the Trainer has acted on it."""
        if self.phase == "test":
            return
        phase: Phase = "first" if self.phase == "first" else "epoch"
        score = metrics.get(f"eval_{MONITOR}")  # the score as the Trainer recorded it
        self.best_before = state.best_metric
        self.pending.hold(epoch=self.epoch if phase == "epoch" else 0, phase=phase,
                          score=math.nan if score is None else float(score),
                          weights=model_weights(self.trainer.model))

    def last_dir(self) -> Path | None:
        dirs = hf_files.checkpoint_dirs(self.ctx.ckpt_root)
        return dirs[-1] if dirs else None

    def best_dir(self) -> Path | None:
        """The Trainer's best checkpoint directory (its live state), if it exists."""
        best = None if self.trainer is None else self.trainer.state.best_model_checkpoint
        return Path(best) if isinstance(best, str) and best and Path(best).is_dir() else None

    def early_stopping(self) -> Any:
        """The EarlyStoppingCallback in use (a resume replaces it with a restored copy)."""
        return next((cb for cb in self.trainer.callback_handler.callbacks
                     if type(cb).__name__ == "EarlyStoppingCallback"), None)

    def settle(self) -> None:
        """Record the pending validation once the Trainer has acted on it (best metric,
        checkpoint, early stopping): ``improved`` is whether ``state.best_metric`` moved from
        its incumbent (-inf or +inf when unset), ``stop`` whether EarlyStoppingCallback's
        counter reached its patience (``should_training_stop`` alone cannot tell: the Trainer
        raises it at the last step too)."""
        if not self.pending.is_pending or self.trainer is None:
            return
        greater = bool(self.trainer.args.greater_is_better)
        before = self.best_before
        incumbent = (-math.inf if greater else math.inf) if before is None else before
        after = self.trainer.state.best_metric
        improved = after is not None and repr(float(after)) != repr(float(incumbent))
        es = self.early_stopping()
        stop = es is not None and \
            es.early_stopping_patience_counter >= es.early_stopping_patience
        self.pending.settle(improved=improved, stop=bool(stop),
                            best_file=hf_files.snapshot(self.best_dir()))
