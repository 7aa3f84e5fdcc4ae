"""Audit mode for a real transformers ``Trainer`` run: one callback, added to the Trainer a team
already has, writes the run's audit log for ``trainspec audit`` (``docs/audit.md``)::

    from trainspec.adapters.hf.audit import audit_callback

    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val,
                      callbacks=[EarlyStoppingCallback(early_stopping_patience=3),
                                 audit_callback()])
    trainer.train()                # or train(resume_from_checkpoint=True) for a resume
    trainer.predict(test_set)      # the test pass, if the job has one

The callback configures nothing and decides nothing: it reads the Trainer's own settings (its
``TrainingArguments``, its ``EarlyStoppingCallback``) into the spec's terms, and each
validation's verdicts as the Trainer reached them. The score is the metric the Trainer's
best-model bookkeeping and early stopping read (``metric_for_best_model``); ``improved`` is
whether ``state.best_metric`` moved at that evaluation, ``stop`` whether
``EarlyStoppingCallback``'s counter reached its patience. Both are read once the Trainer has acted
on the evaluation: early stopping runs in ``on_evaluate`` (before or after this callback,
whatever the order), the best metric is chosen after every ``on_evaluate``, then the checkpoint is
saved; so a validation is held at ``on_evaluate`` and settled at the next ``on_save``,
``on_step_begin``, ``on_epoch_end``, ``on_epoch_begin`` or ``on_train_end``.

A callback is handed neither the Trainer nor its other callbacks: the Trainer calling it (and
through it its ``EarlyStoppingCallback`` and the checkpoint a ``train()`` resumes from) is found
among the calling frames at ``on_train_begin``. The run's end is logged when ``train()``
returns; the log then stays open for the test pass (the first ``trainer.predict`` after it, or a
``trainer.evaluate(..., metric_key_prefix="test")``) and is closed after it, at the callback's
``close()``, or when the process exits. transformers is imported inside functions only:
importing this module never imports it.
"""

from __future__ import annotations

import atexit
import functools
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainspec.adapters.hf.files import completed_epoch
from trainspec.conformance.run.audithooks import AuditHooks, shared_run_id
from trainspec.conformance.run.auditlog import AuditConfig, folder_listing, weights_digest

__all__ = ["audit_callback"]

_FRAMES = 16  # how far up the calling frames the Trainer is looked for


def audit_callback(run_dir: Path | str | None = None, *, run_id: str | None = None,
                   monitor: str | None = None) -> _Audit:
    """A ``TrainerCallback`` that writes this rank's audit log of each ``train()`` call to
    ``run_dir/trainspec-audit/`` (default: the Trainer's ``args.output_dir``).

    ``run_id`` is the launch's id, the same on every rank (default: torchrun's or SLURM's, else
    one drawn and shared; see :func:`~trainspec.conformance.run.audithooks.shared_run_id`).
    ``monitor`` names the score to log (``"accuracy"`` or ``"eval_accuracy"``); by default the
    Trainer's ``metric_for_best_model``. Naming another metric logs its scores only: the
    Trainer's verdicts are about its own metric, so they are not logged as verdicts on it."""
    return _callback_class()(run_dir, run_id=run_id, monitor=monitor)


def _metric_key(name: str) -> str:
    """A metric as the Trainer's evaluation reports it (``eval_`` prefixed)."""
    return name if name.startswith("eval_") else f"eval_{name}"


def _digest(model: Any) -> str:
    state: Mapping[str, object] = model.state_dict()
    return weights_digest(state)


def _moved(before: float | None, after: float | None, greater: bool) -> bool:
    """Whether ``state.best_metric`` moved from ``before`` (its incumbent, -inf or +inf while
    unset): the Trainer took the evaluation as its new best."""
    incumbent = (-math.inf if greater else math.inf) if before is None else float(before)
    return after is not None and repr(float(after)) != repr(incumbent)


def _rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _calling_trainer() -> tuple[Any, object]:
    """The Trainer whose training loop is calling this callback, and the checkpoint its
    ``train()`` resumes from (read from the loop's frame; None, None when not found). A
    callback is handed neither: the Trainer's ``EarlyStoppingCallback`` is read through it."""
    from transformers import Trainer

    frame = sys._getframe(1)
    for _ in range(_FRAMES):
        owner = frame.f_locals.get("self")
        if isinstance(owner, Trainer):
            return owner, frame.f_locals.get("resume_from_checkpoint")
        if frame.f_back is None:
            break
        frame = frame.f_back
    return None, None


def _stoppers(trainer: Any) -> list[Any]:
    """The Trainer's ``EarlyStoppingCallback``s (a resume may have replaced them by restored
    copies before ``on_train_begin``)."""
    if trainer is None:
        return []
    from transformers import EarlyStoppingCallback

    return [cb for cb in trainer.callback_handler.callbacks
            if isinstance(cb, EarlyStoppingCallback)]


def _saved_patience(state: Any) -> int | None:
    """The patience of the ``EarlyStoppingCallback`` the Trainer's state lists (each stateful
    callback's arguments), for when the Trainer itself could not be reached."""
    saved = (getattr(state, "stateful_callbacks", None) or {}).get("EarlyStoppingCallback")
    first = saved[0] if isinstance(saved, list) and saved else saved
    patience = first.get("args", {}).get("early_stopping_patience") \
        if isinstance(first, dict) else None
    return patience if isinstance(patience, int) else None


class _Audit:
    """The audit's hooks (the body :func:`_callback_class` mixes into ``TrainerCallback``)."""

    def __init__(self, run_dir: Path | str | None = None, *, run_id: str | None = None,
                 monitor: str | None = None) -> None:
        self._run_dir, self._run_id, self._monitor = run_dir, run_id, monitor
        self.hooks: AuditHooks | None = None
        self._key = "eval_loss"  # the metric logged as the score
        self._judges = False  # the score is the one the Trainer's verdicts are about
        self._stoppers: list[Any] = []
        self._epoch = self._steps = 0
        self._best_before: float | None = None  # state.best_metric at the held evaluation
        self._last_val: tuple[int, str] | None = None  # (step, weights digest)
        self._final: str | None = None  # digest of the weights training ended with
        self._in_train = self._is_open = self._exit_hook = False

    # ----------------------------------------------------------------- Trainer events

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.close()  # a previous train() call's log, still open for a test pass
        trainer, resume_path = _calling_trainer()
        self._stoppers = _stoppers(trainer)
        named = args.metric_for_best_model
        self._key = _metric_key(self._monitor or named or "loss")
        self._judges = named is not None and self._key == _metric_key(named)
        step = int(state.global_step)
        done = completed_epoch(state.epoch)
        self._epoch = 0 if done is None else done + 1
        resumed = None if step == 0 else {  # a resumed train(): its state was loaded
            "epoch": done, "train_step": step, "run_id": None,
            "path": None if resume_path is None else str(resume_path)}
        rank, world_size = _rank_world()
        name = "transformers.Trainer" if trainer is None else \
            f"{type(trainer).__module__}.{type(trainer).__qualname__}"
        self.hooks = AuditHooks(
            Path(self._run_dir if self._run_dir is not None else args.output_dir),
            run_id=shared_run_id(self._run_id),
            trainer=name,
            config=self._config(args, state), rank=rank, world_size=world_size,
            resumed_from=resumed)
        loader: Any = kw.get("train_dataloader")
        self.hooks.setup(epoch=self._epoch, train_step=step,
                         train_len=len(loader) if hasattr(loader, "__len__") else None)
        self._last_val = self._final = None
        self._in_train = True

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.hooks is None:
            return
        done = completed_epoch(state.epoch)
        self._epoch, self._steps = (0 if done is None else done + 1), 0
        self.hooks.train_start(self._epoch, train_step=int(state.global_step),
                               decided=lambda: self._decided(args, state, control))

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._settle(args, state, control)  # an evaluation at the previous step

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._steps += 1  # called once per optimizer step

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.hooks is None:
            return
        self._settle(args, state, control)
        self.hooks.train_end(self._epoch, train_step=int(state.global_step),
                             optimizer_steps=self._steps)
        if control.should_training_stop and kw.get("model") is not None:
            self._final = _digest(kw["model"])  # the last epoch: these weights end training

    def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        metrics, model = kw.get("metrics") or {}, kw.get("model")
        if self.hooks is None or model is None:
            return
        if not self._in_train:  # trainer.evaluate(test_set, metric_key_prefix="test")
            if self._is_open and any(str(k).startswith("test_") for k in metrics):
                self._test(model)
            return
        if self._key not in metrics:  # another eval dataset of several
            return
        self._settle(args, state, control)
        digest = _digest(model)  # now: a later callback may load other weights
        self._best_before = state.best_metric
        self._last_val = (int(state.global_step), digest)
        self.hooks.hold(epoch=self._epoch, score=float(metrics[self._key]), weights=digest,
                        train_step=int(state.global_step))

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._settle(args, state, control)  # the best metric, early stopping and save done

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        hooks, model = self.hooks, kw.get("model")
        if hooks is None or not self._in_train:
            return
        self._settle(args, state, control)
        step = int(state.global_step)
        if self._final is None and self._last_val is not None and self._last_val[0] == step:
            self._final = self._last_val[1]  # the weights of the last validation: no step since
        if self._final is not None:
            hooks.log.event("final", weights=self._final)
        # load_best_model_at_end has loaded the best checkpoint by now: the model holds it
        kept = args.load_best_model_at_end and state.best_model_checkpoint is not None
        hooks.log.event("end", train_step=step, final_weights=self._final,
                        best_model=_digest(model) if kept and model is not None else None,
                        files=folder_listing(hooks.run_dir))
        self._in_train, self._is_open = False, True  # open for the test pass
        if not self._exit_hook:
            self._exit_hook = True
            atexit.register(self.close)

    def on_predict(self, args: Any, state: Any, control: Any, metrics: Any = None,
                   **kw: Any) -> None:
        # ``metrics``: TrainerCallback.on_predict's own parameter (the test's, not logged)
        model = kw.get("model")
        if self._is_open and model is not None:
            self._test(model)

    # ----------------------------------------------------------------- the log

    def close(self) -> None:
        """Close the log of the last ``train()`` call now (it is closed after the test pass,
        else when the process exits). Nothing when training has not returned."""
        if self.hooks is not None and self._is_open:
            self._is_open = False
            self.hooks.log.close()

    def _test(self, model: Any) -> None:
        """The test pass after training: its weights, then the log is closed."""
        assert self.hooks is not None
        self.hooks.log.event("test", weights=_digest(model))
        self.close()

    def _settle(self, args: Any, state: Any, control: Any) -> None:
        if self.hooks is not None and self.hooks.is_pending:
            improved, stop = self._decided(args, state, control)
            self.hooks.settle(improved=improved, stop=stop)

    def _decided(self, args: Any, state: Any, control: Any) -> tuple[bool | None, bool]:
        """The held evaluation's verdicts as the Trainer reached them. ``stop``: an
        ``EarlyStoppingCallback`` counter at its patience (the exact condition on which it sets
        ``should_training_stop``), or the flag raised before the last step by another callback;
        at the last step the flag alone cannot tell, the Trainer raising it there itself."""
        improved = _moved(self._best_before, state.best_metric, bool(args.greater_is_better)) \
            if self._judges else None
        stop = any(cb.early_stopping_patience_counter >= cb.early_stopping_patience
                   for cb in self._stoppers)
        early = bool(control.should_training_stop) and state.global_step < state.max_steps
        return improved, stop or early

    def _config(self, args: Any, state: Any) -> AuditConfig:
        """The Trainer's settings in the spec's terms (None where it has no such setting)."""
        patience = self._stoppers[0].early_stopping_patience if self._stoppers \
            else _saved_patience(state)
        strategy = getattr(args.eval_strategy, "value", args.eval_strategy)
        return AuditConfig(
            num_epochs=int(state.num_train_epochs), val_first=bool(args.eval_on_start),
            # eval_strategy="steps" (or an eval_delay) validates on no per-epoch schedule
            val_every_n_epochs=1 if strategy == "epoch" and not args.eval_delay else None,
            minimize=(not args.greater_is_better) if self._judges else None,
            patience=patience, has_patience=patience is not None,
            # the checkpoint directories are the Trainer's own layout, which the audit's file
            # judging does not read; the Trainer has no test switch nor fast-dev-run mode
            start_patience=None, test_enable=None, ckpt_enable=None, save_last=None,
            ckpt_every_n_epochs=None, debug=None)


@functools.cache
def _callback_class() -> type[_Audit]:
    from transformers import TrainerCallback

    class AuditCallback(_Audit, TrainerCallback):
        """Writes the run's audit log for ``trainspec audit`` (see
        ``trainspec.adapters.hf.audit``)."""

    return AuditCallback
