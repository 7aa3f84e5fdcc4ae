"""The ready audit callback for Keras 3 on its torch backend (``trainspec audit``).

A team adds :func:`audit_callback` to the callbacks of its own ``model.fit``; the callback
writes the run's audit log (``docs/audit.md``) and changes nothing the run does. It configures
nothing: it reads the job's own ``ModelCheckpoint(save_best_only=True)`` and ``EarlyStopping``
(found in the callback list fit calls, or given), fit's epochs and ``validation_freq``, and
fills the log's config from them in the spec's terms. A validation's ``improved`` is whether
ModelCheckpoint's ``best`` changed (None without one: the job keeps no best model), its ``stop``
is ``model.stop_training`` once EarlyStopping acted. Keras calls callbacks in list order: last
in the list, the callback settles a validation at the epoch's end; anywhere else, at the next
``on_epoch_begin`` or at ``on_train_end``, once the callbacks after it acted too. How to use it
and what it cannot see: ``docs/frameworks/keras.md``.

Keras is imported inside the functions only (on its torch backend): importing this module never
imports it.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch

from trainspec.adapters.keras.files import BACKUP_WEIGHTS, WeightNames, snapshot
from trainspec.adapters.keras.run import keras_module
from trainspec.conformance.run.audithooks import AuditHooks, shared_run_id
from trainspec.conformance.run.auditlog import AuditConfig

__all__ = ["audit_callback"]

_FRAMES = 12  # how far up the stack the callback list and fit's call are looked for


def audit_callback(run_dir: Path | str, *, run_id: str | None = None,
                   monitor: str | None = None, checkpoint: Any = None,
                   early_stopping: Any = None, test_pass: bool | None = None,
                   resumed_from: Mapping[str, object] | None = None) -> Any:
    """A ``keras.callbacks.Callback`` that writes the audit log of one ``fit`` to ``run_dir``.

    ``monitor`` is the logged metric whose values are the scores (default: the one the
    ModelCheckpoint, else the EarlyStopping, monitors). ``checkpoint`` and ``early_stopping``
    name the job's ModelCheckpoint and EarlyStopping when the callback cannot find them in the
    list fit calls. ``test_pass=True`` says the job evaluates after fit with this callback
    (``model.evaluate(..., callbacks=[audit])``): the log then ends after that pass, which it
    records as the test pass; None leaves the test pass unjudged. ``resumed_from`` overrides
    the resume point read from BackupAndRestore (a fit that starts past epoch 0).
    """
    return _callback_class()(Path(run_dir), run_id=run_id, monitor=monitor,
                             checkpoint=checkpoint, early_stopping=early_stopping,
                             test_pass=test_pass, resumed_from=resumed_from)


@functools.cache
def _callback_class() -> type[_KerasAudit]:
    """:class:`_KerasAudit` with Keras's Callback mixed in after it (built on first use, so
    that importing this module does not import Keras)."""
    base = keras_module().callbacks.Callback
    return cast("type[_KerasAudit]", type("AuditCallback", (_KerasAudit, base), {
        "__doc__": "trainspec's audit of a Keras fit (see trainspec.adapters.keras.audit)."}))


def _variables(model: Any) -> list[tuple[str, list[Any]]]:
    """Each layer's name and its variables, in the order Keras saves them."""
    return [(layer.name, [*layer.trainable_weights, *layer.non_trainable_weights])
            for layer in model.layers if layer.weights]


def _names(model: Any) -> WeightNames:
    """Each layer's name and a unique key per variable (``layer/i:name``)."""
    return [(name, [f"{name}/{i}:{v.name}" for i, v in enumerate(variables)])
            for name, variables in _variables(model)]


def _weights(model: Any) -> dict[str, torch.Tensor]:
    """The model's variables under :func:`_names` (digested by the log, never stored)."""
    return {f"{name}/{i}:{v.name}": v.value.detach()
            for name, variables in _variables(model) for i, v in enumerate(variables)}


def _rank() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _caller(test: Any) -> Any:
    """The first value other than None that ``test(frame)`` gives for the frames above the
    caller, else None: Keras hands a callback neither its list nor fit's arguments, so they
    are read (never changed) in the frames of fit and of the CallbackList calling it."""
    frame = inspect.currentframe()
    try:
        for _ in range(_FRAMES):
            frame = None if frame is None else frame.f_back
            if frame is None:
                return None
            found = test(frame)
            if found is not None:
                return found
        return None
    finally:
        del frame


class _KerasAudit:
    """The callback's body; :func:`_callback_class` mixes Keras's ``Callback`` in."""

    model: Any  # Keras's Callback provides model and params
    params: Any

    def __init__(self, run_dir: Path, *, run_id: str | None, monitor: str | None,
                 checkpoint: Any, early_stopping: Any, test_pass: bool | None,
                 resumed_from: Mapping[str, object] | None) -> None:
        super().__init__()
        self.run_dir, self.run_id, self.monitor = run_dir, run_id, monitor
        self.checkpoint, self.early_stopping = checkpoint, early_stopping
        self.test_pass, self.resumed_from = test_pass, resumed_from
        self.hooks: AuditHooks | None = None
        self.is_fitting = self.is_testing = False
        self.best_cb: Any = None  # the ModelCheckpoint keeping the best model on the score
        self.backup: Any = None
        self.best_before: object = None
        self.best_file: Path | None = None
        self.epoch: int | None = None  # the epoch in progress, until its training ended
        self.start_step = 0
        self.held_epoch: int | None = None  # the held validation's epoch and logs
        self.held_logs: dict[str, Any] = {}
        self.fitted: Any = None  # the model fit trains (a test pass may evaluate another)
        self.is_last = False  # no callback but Keras's History and progress bar comes after
        self.config = AuditConfig()

    # discovery

    def siblings(self) -> list[Any]:
        """The callbacks fit calls, read from the CallbackList calling this one."""
        keras = keras_module()

        def owner(frame: Any) -> Any:
            me = frame.f_locals.get("self")
            if isinstance(me, keras.callbacks.CallbackList) and any(
                    cb is self for cb in me.callbacks):
                return me
            return None

        found = _caller(owner)
        return [] if found is None else list(found.callbacks)

    def fit_arguments(self) -> dict[str, Any]:
        """fit's own arguments (``validation_freq``, ``validation_data``), from its frame."""
        model = self.model

        def fit(frame: Any) -> Any:
            if frame.f_code.co_name == "fit" and frame.f_locals.get("self") is model:
                return dict(frame.f_locals)
            return None

        return _caller(fit) or {}

    def discover(self) -> None:
        keras = keras_module()
        found = self.siblings()
        after = found[next((i for i, cb in enumerate(found) if cb is self), len(found)) + 1:]
        self.is_last = bool(found) and all(isinstance(cb, (
            keras.callbacks.History, keras.callbacks.ProgbarLogger)) for cb in after)
        checkpoints = [self.checkpoint] if self.checkpoint is not None else [
            cb for cb in found if isinstance(cb, keras.callbacks.ModelCheckpoint)
            and cb.save_best_only and cb.save_freq == "epoch"]
        stoppers = [self.early_stopping] if self.early_stopping is not None else [
            cb for cb in found if isinstance(cb, keras.callbacks.EarlyStopping)]
        backups = [cb for cb in found if isinstance(cb, keras.callbacks.BackupAndRestore)]
        periodic = [cb for cb in found if isinstance(cb, keras.callbacks.ModelCheckpoint)
                    and not cb.save_best_only]
        monitor = self.monitor or next((cb.monitor for cb in [*checkpoints, *stoppers]), None)
        self.monitor = monitor
        self.best_cb = next((cb for cb in checkpoints if cb.monitor == monitor), None)
        stopper = next((cb for cb in stoppers if cb.monitor == monitor), None)
        self.backup = backups[0] if backups else None
        keeper = self.best_cb if self.best_cb is not None else stopper
        minimize = None if keeper is None else self.minimizes(keeper)
        # an EarlyStopping on another metric or in the other direction stops on what the
        # score does not show: the run's stops cannot be judged on this score
        other = any(cb is not stopper for cb in stoppers) or (
            stopper is not None and self.minimizes(stopper) != minimize)
        args = self.fit_arguments()
        has_val = args.get("validation_data") is not None
        freq = args.get("validation_freq")
        steps = (self.params or {}).get("steps")
        every = next((1 if cb.save_freq == "epoch" else cb.save_freq // steps
                      for cb in periodic if cb.save_freq == "epoch"
                      or (steps and cb.save_freq % steps == 0)), None)
        # the caps Keras offers "purely for debugging" (keras.config; absent in older Keras)
        caps = [getattr(keras.config, cap, lambda: None)()
                for cap in ("max_epochs", "max_steps_per_epoch")]
        self.config = AuditConfig(
            num_epochs=int((self.params or {}).get("epochs", 0)), val_first=False,
            val_every_n_epochs=int(freq) if has_val and isinstance(freq, int) else None,
            minimize=minimize,
            patience=None if stopper is None or other else int(stopper.patience),
            has_patience=None if other else stopper is not None,
            start_patience=None if stopper is None else int(stopper.start_from_epoch),
            test_enable=self.test_pass, ckpt_enable=None,
            save_last=None if self.backup is None else not self.backup.delete_checkpoint,
            ckpt_every_n_epochs=every, debug=any(cap is not None for cap in caps))

    def minimizes(self, cb: Any) -> bool | None:
        """Whether a MonitorCallback minimizes its metric, as it will decide it (mode "auto"
        read on a copy: the callback itself is left as fit hands it over)."""
        if cb.mode in ("min", "max"):
            return bool(cb.mode == "min")
        probe = copy.copy(cb)
        try:
            probe._set_monitor_op()
        except ValueError:  # Keras raises the same at the first epoch's end
            return None
        return bool(probe.monitor_op is keras_module().ops.less)

    # the log

    def open(self, epoch: int) -> AuditHooks:
        """The launch's log, made when the first epoch starts: BackupAndRestore has restored
        the epoch and step by then, so a resume knows where it resumed from."""
        step = self.step()
        resumed = self.resumed_from
        if resumed is None and epoch > 0:
            path = None if self.backup is None else str(Path(self.backup.backup_dir,
                                                             BACKUP_WEIGHTS))
            resumed = {"epoch": epoch - 1, "train_step": step, "run_id": None, "path": path}
        rank, world = _rank()
        model = type(self.model)
        self.hooks = AuditHooks(self.run_dir, run_id=shared_run_id(self.run_id),
                                trainer=f"{model.__module__}.{model.__qualname__}",
                                config=self.config, rank=rank, world_size=world,
                                resumed_from=resumed)
        steps = (self.params or {}).get("steps")
        self.hooks.setup(epoch=epoch, train_step=step,
                         train_len=None if steps is None else int(steps))
        return self.hooks

    def step(self) -> int:
        return int(self.fitted.optimizer.iterations)

    def decided(self) -> tuple[bool | None, bool]:
        """ModelCheckpoint's verdict (its ``best`` replaced) and fit's stop flag, read once
        every callback acted on the validation."""
        improved = None if self.best_cb is None else self.best_cb.best is not self.best_before
        return improved, bool(self.fitted.stop_training)

    def settle(self, hooks: AuditHooks) -> None:
        """Write the held validation, if any, with the verdicts Keras reached."""
        if hooks.is_pending:
            improved, stop = self.decided()
            if improved and self.best_cb is not None:
                self.best_file = self.saved_path(self.best_cb)
            hooks.settle(improved=improved, stop=stop)

    def saved_path(self, cb: Any) -> Path | None:
        """The file ModelCheckpoint wrote for the held validation (its name may be a
        pattern filled with the 1-based epoch and the logs)."""
        try:
            return Path(cb.filepath.format(epoch=(self.held_epoch or 0) + 1,
                                           **self.held_logs))
        except (KeyError, IndexError, ValueError):
            return None

    def end_epoch(self) -> None:
        """The epoch's training ended: at its validation's start, or at its end."""
        if self.hooks is None or self.epoch is None:
            return
        step = self.step()
        self.hooks.train_end(self.epoch, train_step=step, optimizer_steps=step - self.start_step)
        self.epoch = None

    def end(self) -> None:
        """The run's end: its step and the best weights as ModelCheckpoint's file holds them
        (read with h5py, under the live model's names); the log is closed."""
        if self.hooks is None:
            return
        best = None
        path = self.best_file
        if self.best_cb is not None and path is None and "{" not in self.best_cb.filepath:
            path = Path(self.best_cb.filepath)
        if path is not None and path.is_file():
            names = _names(self.fitted)
            seen = snapshot(path, names).weights or {}
            if all(key in seen for _, keys in names for key in keys):
                best = seen  # read whole: a file it cannot map leaves BEST-2 unjudged
        self.hooks.end(train_step=self.step(), best_model=best)

    # Keras's hooks

    def on_train_begin(self, logs: object = None) -> None:
        self.fitted = self.model
        self.discover()
        self.is_fitting, self.hooks, self.best_file = True, None, None

    def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
        if not self.is_fitting:
            return
        hooks = self.hooks or self.open(epoch)
        self.settle(hooks)
        self.start_step = self.step()
        hooks.train_start(epoch, train_step=self.start_step)
        self.epoch = epoch
        self.best_before = None if self.best_cb is None else self.best_cb.best

    def on_test_begin(self, logs: object = None) -> None:
        if self.is_fitting:
            self.end_epoch()  # fit validates: the epoch's training ended
        elif self.hooks is not None and self.test_pass and not self.is_testing:
            self.is_testing = True
            self.hooks.test(_weights(self.model))

    def on_test_end(self, logs: object = None) -> None:
        if self.is_testing:
            self.is_testing = False
            self.end()

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        if not self.is_fitting or self.hooks is None:
            return
        self.end_epoch()
        value = (logs or {}).get(self.monitor) if self.monitor else None
        if value is not None:
            self.held_epoch, self.held_logs = epoch, dict(logs or {})
            self.hooks.hold(epoch=epoch, score=float(value), weights=_weights(self.model),
                            train_step=self.step())
            if self.is_last:  # every other callback acted: settled now, not at the next epoch
                self.settle(self.hooks)

    def on_train_end(self, logs: object = None) -> None:
        if not self.is_fitting:
            return
        self.is_fitting = False
        hooks = self.hooks or self.open(0)
        self.settle(hooks)
        hooks.final(_weights(self.fitted))
        if not self.test_pass:
            self.end()
