"""The ready audit callback for skorch: a team's real ``net.fit`` logs what skorch decided,
for ``trainspec audit``.

Add it to the net's callbacks, the run folder named::

    from trainspec.adapters.skorch.audit import audit_callback
    audit = audit_callback("runs/exp1", test_pass=True)
    net = NeuralNetClassifier(..., callbacks=[
        best, EarlyStopping(monitor="valid_loss", patience=5), ("audit", audit)])
    net.fit(X, y)
    net.load_params(checkpoint=best)   # best = Checkpoint(monitor="valid_loss_best", ...)
    audit.log_test_pass(net)           # skorch calls no callback on predict
    net.predict(X_test)                # then: trainspec audit runs/exp1

It configures nothing: it reads the net's own callbacks (``net.callbacks_``) and its history.
skorch keeps its decisions in ``net.history``: a validation ``improved`` when the best keeper
took it, which is the column its ``Checkpoint`` records (``event_cp``, its ``event_name``, True
when it saved; else the column it monitors, such as ``valid_loss_best``), or
``EarlyStopping(load_best=True)``'s best epoch without a Checkpoint. ``EarlyStopping`` stops by
raising ``KeyboardInterrupt`` from its ``on_epoch_end``, which ``partial_fit`` catches, and sets
no flag: the run stopped there when its ``misses_`` reached its ``patience`` (the very test it
raises on). So the callback may sit anywhere in the list: it notes the weights at an epoch's
first validation batch and reads the history's row when the next epoch begins, or at
``on_train_end`` (the callbacks after ``EarlyStopping`` never see the epoch it stopped on).

The score is the history's column the best Checkpoint monitors (its name without ``_best``),
else the one ``EarlyStopping`` monitors, or the one named by ``monitor=``. ``train_step`` is
the training batches the history records, as the suite's adapter counts them. skorch is
imported inside the functions only: importing this module never imports it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from trainspec.adapters.skorch.files import history_steps
from trainspec.conformance.run.audithooks import AuditHooks, shared_run_id
from trainspec.conformance.run.auditlog import AuditConfig, weights_digest

__all__ = ["audit_callback"]


def audit_callback(run_dir: Path | str, *, run_id: str | None = None,
                   monitor: str | None = None, checkpoint: Any = None,
                   early_stopping: Any = None, test_pass: bool | None = None,
                   resumed_from: Mapping[str, object] | None = None) -> Any:
    """A ``skorch.callbacks.Callback`` that logs the run to ``run_dir/trainspec-audit/``.

    ``monitor`` names the history column to judge (default: the one the best Checkpoint
    monitors, without ``_best``, else ``EarlyStopping``'s); ``checkpoint`` and
    ``early_stopping`` name the net's callbacks when they should not be looked up in
    ``net.callbacks_``. ``test_pass=True`` says the job tests after fit and calls
    ``log_test_pass(net)`` on this callback right before (skorch calls no callback on
    ``predict``): the log then ends after that call; None leaves the test pass unjudged.
    ``resumed_from`` overrides the resume point read from a history the fit started with
    (``{"epoch", "train_step", "run_id", "path"}``)."""
    return _callback_class()(run_dir, run_id=run_id, monitor=monitor, checkpoint=checkpoint,
                             early_stopping=early_stopping, test_pass=test_pass,
                             resumed_from=resumed_from)


def _rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _rows(net: Any) -> list[Any]:
    return list(net.history)


class _Audit:
    """The callback's hooks (the body :func:`_callback_class` mixes into skorch's ``Callback``).
    Its arguments are its attributes, its state ends in ``_``: skorch's ``get_params`` (and so
    ``sklearn.clone``) sees the arguments only."""

    def __init__(self, run_dir: Path | str, *, run_id: str | None = None,
                 monitor: str | None = None, checkpoint: Any = None,
                 early_stopping: Any = None, test_pass: bool | None = None,
                 resumed_from: Mapping[str, object] | None = None) -> None:
        self.run_dir, self.run_id, self.monitor = run_dir, run_id, monitor
        self.checkpoint, self.early_stopping = checkpoint, early_stopping
        self.test_pass, self.resumed_from = test_pass, resumed_from
        self.hooks_: AuditHooks | None = None
        self.tested_: AuditHooks | None = None  # a log kept open for the test pass
        self.keeper_: Any = None
        self.stopper_: Any = None
        self.loader_: Any = None
        self.score_name_: str | None = None
        self.handle_: Any = None
        self.steps_ = self.start_steps_ = 0
        self.epoch_ = -1
        self.ended_: int | None = None  # the epoch whose training end was logged
        self.logged_: int | None = None  # the epoch whose validation was logged
        self.held_: tuple[str, int] | None = None  # (weights digest, step) of a validation
        self.final_: str | None = None

    # ------------------------------------------------------------------ skorch's hooks

    def on_train_begin(self, net: Any, X: Any = None, y: Any = None,  # noqa: N803
                       **kwargs: Any) -> None:
        from skorch.callbacks import (  # type: ignore[import-untyped]
            Checkpoint,
            EarlyStopping,
            LoadInitState,
        )

        self._close_tested()  # a new fit: the last one's test pass never came

        callbacks = [cb for _, cb in getattr(net, "callbacks_", [])]
        keepers = [cb for cb in callbacks if isinstance(cb, Checkpoint)
                   and isinstance(cb.monitor, str)]
        stoppers = [cb for cb in callbacks if isinstance(cb, EarlyStopping)]
        if self.monitor is not None:  # the keeper and stopper judging the named column
            keepers = [cb for cb in keepers if cb.monitor in (self.monitor,
                                                              f"{self.monitor}_best")]
            stoppers = [cb for cb in stoppers if cb.monitor == self.monitor]
        self.stopper_ = self.early_stopping if self.early_stopping is not None \
            else next(iter(stoppers), None)
        self.keeper_ = self.checkpoint if self.checkpoint is not None \
            else next(iter(keepers), None)
        if self.keeper_ is None and getattr(self.stopper_, "load_best", False):
            self.keeper_ = self.stopper_  # its copy of the best weights is the best model
        self.loader_ = next((cb for cb in callbacks if isinstance(cb, LoadInitState)), None)
        self.score_name_ = self.monitor or next(
            (name for name in (_scored(getattr(self.keeper_, "monitor", None)),
                               getattr(self.stopper_, "monitor", None))
             if isinstance(name, str)), None)
        self.hooks_, self.ended_, self.logged_, self.held_, self.final_ = \
            None, None, None, None, None
        self.steps_ = self.start_steps_ = 0
        optimizer = getattr(net, "optimizer_", None)
        if optimizer is not None:
            self.handle_ = optimizer.register_step_post_hook(self._count_step)

    def on_epoch_begin(self, net: Any, dataset_train: Any = None, dataset_valid: Any = None,
                       **kwargs: Any) -> None:
        rows = _rows(net)
        epoch = len(rows) - 1  # skorch's own on_epoch_begin appended this epoch's row
        hooks = self.hooks_ or self._open(net, rows, dataset_train, dataset_valid)
        if len(rows) > 1:
            self._hold(rows[-2], epoch - 1)
        hooks.train_start(epoch, train_step=history_steps(rows[:-1]),
                          decided=lambda: (self._improved(rows[-2]), False))
        self.epoch_, self.start_steps_ = epoch, self.steps_

    def on_batch_begin(self, net: Any, batch: Any = None, training: Any = None,
                       **kwargs: Any) -> None:
        if not training:
            self._end_training(net)

    def on_epoch_end(self, net: Any, dataset_train: Any = None, dataset_valid: Any = None,
                     **kwargs: Any) -> None:
        self._end_training(net)  # an epoch without validation batches

    def on_train_end(self, net: Any, X: Any = None, y: Any = None,  # noqa: N803
                     **kwargs: Any) -> None:
        rows = _rows(net)
        hooks = self.hooks_ or self._open(net, rows, None, None)
        if self.handle_ is not None:
            self.handle_.remove()
            self.handle_ = None
        if rows and self.ended_ == len(rows) - 1:
            self._hold(rows[-1], len(rows) - 1)
            stopper = self.stopper_
            stop = stopper is not None and stopper.misses_ == stopper.patience
            hooks.settle(improved=self._improved(rows[-1]), stop=bool(stop))
        # a digest taken when training ended (a load_best may since have put the best back):
        # AuditHooks.final takes weights, the log a digest
        hooks.log.event("final", weights=self.final_ or _digest(net))
        hooks.end(train_step=history_steps(rows), best_model=self._best_model(net),
                  close=not self.test_pass)
        self.hooks_, self.tested_ = None, hooks if self.test_pass else None

    def log_test_pass(self, net: Any) -> None:
        """The test pass about to score the net's weights (call it right before, once the
        best weights are loaded as the job loads them); the log is then closed."""
        if self.tested_ is not None:
            self.tested_.test(net.module_)
        self._close_tested()

    def _close_tested(self) -> None:
        if self.tested_ is not None:
            self.tested_.close()
            self.tested_ = None

    # ------------------------------------------------------------------ the log

    def _open(self, net: Any, rows: Sequence[Any], train: Any, valid: Any) -> AuditHooks:
        """The launch's log, opened when its first epoch starts: every ``on_train_begin`` has
        run by then, ``LoadInitState``'s included, so the history says where the fit began."""
        start = max(len(rows) - 1, 0)
        resumed = self.resumed_from
        if resumed is None and start > 0:
            path = getattr(getattr(self.loader_, "checkpoint", None), "dirname", None)
            resumed = {"epoch": start - 1, "train_step": history_steps(rows[:start]),
                       "run_id": None, "path": str(path) if path else None}
        rank, world = _rank_and_world()
        self.hooks_ = hooks = AuditHooks(
            Path(self.run_dir), run_id=shared_run_id(self.run_id),
            trainer=f"{type(net).__module__}.{type(net).__qualname__}",
            config=self._config(net, start, valid), rank=rank, world_size=world,
            resumed_from=resumed)
        hooks.setup(epoch=start, train_step=history_steps(rows[:start]),
                    train_len=None if train is None else len(net.get_iterator(
                        train, training=True)))
        return hooks

    def _config(self, net: Any, start: int, valid: Any) -> AuditConfig:
        """The net's settings in the spec's terms: a fit trains ``max_epochs`` more epochs
        after the history it starts with, validates after each when it has validation data
        (never before training); ``EarlyStopping`` has no start patience; skorch has no
        debug mode; the files are skorch's own (ckpt_enable None); the test pass is the one
        the job says it runs (``test_pass``)."""
        name, stopper = self.score_name_, self.stopper_
        scorer = next((cb for _, cb in getattr(net, "callbacks_", [])
                       if getattr(cb, "name", None) == name
                       and hasattr(cb, "lower_is_better")), None)
        counts = stopper is not None and stopper.monitor == name
        minimize = scorer.lower_is_better if scorer is not None else \
            stopper.lower_is_better if counts else None
        return AuditConfig(
            num_epochs=start + int(net.max_epochs),
            val_first=False if valid is not None else None,
            val_every_n_epochs=1 if valid is not None else None,
            minimize=None if minimize is None else bool(minimize),
            patience=int(stopper.patience) if counts else None,
            has_patience=counts if stopper is None or counts else None,
            start_patience=None, test_enable=self.test_pass, ckpt_enable=None, save_last=None,
            ckpt_every_n_epochs=None, debug=None)

    def _count_step(self, optimizer: object, args: object, kwargs: object) -> None:
        self.steps_ += 1

    def _end_training(self, net: Any) -> None:
        """The epoch's training ended (its first validation batch, or its end): logged once,
        with the weights the validation scores."""
        if self.hooks_ is None or self.ended_ == self.epoch_:
            return
        self.ended_ = self.epoch_
        step = history_steps(_rows(net))
        self.final_ = _digest(net)
        self.held_ = (self.final_, step)
        self.hooks_.train_end(self.epoch_, train_step=step,
                              optimizer_steps=self.steps_ - self.start_steps_)

    def _hold(self, row: Mapping[str, Any], epoch: int) -> None:
        """The validation of ``epoch`` from its history row, once."""
        name = self.score_name_
        if self.hooks_ is None or self.held_ is None or self.logged_ == epoch \
                or name is None or name not in row:
            return
        self.logged_ = epoch
        weights, step = self.held_
        self.hooks_.hold(epoch=epoch, score=float(row[name]), weights=weights,
                         train_step=step, phase="epoch")

    def _improved(self, row: Mapping[str, Any]) -> bool | None:
        """Whether the best keeper took the row's validation: the column its Checkpoint
        records, or ``EarlyStopping(load_best=True)``'s best epoch."""
        keeper = self.keeper_
        if keeper is None:
            return None
        if keeper is self.stopper_:
            return bool(getattr(keeper, "best_epoch_", None) == row.get("epoch"))
        # no event column in the row: the Checkpoint never saw the epoch (EarlyStopping,
        # before it in the list, stopped the run there), so it took nothing
        column = keeper.monitor if keeper.event_name is None else keeper.event_name
        return bool(row.get(column, False))

    def _best_model(self, net: Any) -> Mapping[str, object] | None:
        """The best weights as the net keeps them: the best Checkpoint's params file (loaded
        weights-only), or EarlyStopping's copy; None before any improvement."""
        keeper = self.keeper_
        if keeper is None:
            return None
        if keeper is self.stopper_:
            copy = getattr(keeper, "best_model_weights_", None)
            return copy if isinstance(copy, Mapping) else None
        try:
            name = keeper.get_formatted_files(net).get("f_params")
        except (KeyError, IndexError):  # a history row without the keeper's column
            return None
        if not isinstance(name, str | os.PathLike) or not Path(name).is_file():
            return None
        try:
            content = torch.load(name, map_location="cpu", weights_only=True)
        except Exception:  # safetensors, or not a state dict: no weights to compare
            return None
        return content if isinstance(content, Mapping) else None


def _scored(monitor: object) -> str | None:
    """The score a Checkpoint's monitor column is the best flag of (``valid_loss_best`` ->
    ``valid_loss``)."""
    if isinstance(monitor, str) and monitor.endswith("_best"):
        return monitor.removesuffix("_best")
    return None


def _digest(net: Any) -> str:
    return weights_digest(net.module_.state_dict())


@functools.cache
def _callback_class() -> type[_Audit]:
    from skorch.callbacks import Callback

    class AuditCallback(_Audit, Callback):  # type: ignore[misc]
        """Logs a skorch run for ``trainspec audit`` (see :func:`audit_callback`)."""

    return AuditCallback
