"""The ready audit callback for Poutyne: a team's real ``Model.fit`` or ``ModelBundle.train``
logs what Poutyne decided, for ``trainspec audit``.

Add it to the callbacks of the real job, the run folder named::

    from trainspec.adapters.poutyne.audit import audit_callback
    audit = audit_callback("runs/exp1", test_pass=True)
    model.fit_generator(train_loader, valid_loader, epochs=30,
                        callbacks=[checkpoint, early_stopping, audit])
    model.evaluate_generator(test_loader, callbacks=[audit])  # then: trainspec audit runs/exp1

It configures nothing: it reads the job's own callbacks. Poutyne hands a callback its Model and
``params``, not the other callbacks, so it finds them in the ``CallbackList`` that calls it (a
frame up from ``on_train_begin``), or takes them as arguments (``checkpoint=``,
``early_stopping=``). The best keeper is a ``ModelCheckpoint(save_best_only=True)`` or
``BestModelRestore`` (ModelBundle's own, too); a validation ``improved`` when it took a new
``current_best`` (the object it holds is replaced on each improvement, as the suite's adapter
reads it); ``stop`` is ``model.stop_training`` once ``EarlyStopping`` has acted. Since the
callback may come before them in the list, a validation is held at ``on_epoch_end`` and
settled at the next ``on_epoch_begin`` or at ``on_train_end``. The score is the logged metric
the best keeper (else ``EarlyStopping``) monitors, or the one named by ``monitor=``.

Poutyne keeps no step count: ``train_step`` is the optimizer steps this process took (a hook
on the optimizer, removed when training ends), as in the suite's adapter. Poutyne is imported
inside the functions only: importing this module never imports it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from trainspec.conformance.run.audithooks import AuditHooks, shared_run_id
from trainspec.conformance.run.auditlog import AuditConfig, weights_digest

__all__ = ["audit_callback"]

_FRAMES = 16  # how far up from on_train_begin the CallbackList and the loop are looked for


def audit_callback(run_dir: Path | str, *, run_id: str | None = None,
                   monitor: str | None = None, checkpoint: Any = None,
                   early_stopping: Any = None, test_pass: bool | None = None,
                   resumed_from: Mapping[str, object] | None = None) -> Any:
    """A ``poutyne.Callback`` that logs the run to ``run_dir/trainspec-audit/``.

    ``monitor`` names the logged metric to judge (default: the one the best keeper or
    ``EarlyStopping`` monitors); ``checkpoint`` and ``early_stopping`` name the job's callbacks
    when they should not be looked up. ``test_pass=True`` says the job tests after fit with
    this callback (``evaluate_generator(..., callbacks=[audit])`` or ``ModelBundle.test``): the
    log then ends after that pass, which it records as the test pass; None leaves the test pass
    unjudged. ``resumed_from`` overrides the resume point the callback infers from an
    ``initial_epoch`` above 1 (``{"epoch", "train_step", "run_id", "path"}``)."""
    return _callback_class()(run_dir, run_id=run_id, monitor=monitor, checkpoint=checkpoint,
                             early_stopping=early_stopping, test_pass=test_pass,
                             resumed_from=resumed_from)


def _poutyne() -> Any:
    import poutyne  # type: ignore[import-untyped]

    return poutyne


def _rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _discover(me: object) -> tuple[list[Any], Any, Any]:
    """(the callbacks of the CallbackList calling ``me``, the EpochIterator, the ModelBundle)
    found in the frames above; empty or None where a frame was not found."""
    pt = _poutyne()
    callbacks: list[Any] = []
    iterator = bundle = None
    frame = inspect.currentframe()
    try:
        for _ in range(_FRAMES):
            if frame is None:
                break
            owner = frame.f_locals.get("self")
            listed = getattr(owner, "callbacks", None)
            if not callbacks and isinstance(listed, list) and any(c is me for c in listed):
                callbacks = list(listed)
            if iterator is None and hasattr(owner, "initial_epoch") \
                    and hasattr(owner, "epochs"):
                iterator = owner
            if bundle is None and isinstance(owner, pt.ModelBundle):
                bundle = owner
            frame = frame.f_back
    finally:
        del frame
    return callbacks, iterator, bundle


def _is_best_keeper(cb: Any) -> bool:
    pt = _poutyne()
    return isinstance(cb, pt.BestModelRestore) or (
        isinstance(cb, pt.ModelCheckpoint) and bool(cb.save_best_only))


class _Audit:
    """The callback's hooks (the body :func:`_callback_class` mixes into Poutyne's
    ``Callback``, which provides ``model`` and ``params``)."""

    model: Any
    params: Any

    def __init__(self, run_dir: Path | str, *, run_id: str | None, monitor: str | None,
                 checkpoint: Any, early_stopping: Any, test_pass: bool | None,
                 resumed_from: Mapping[str, object] | None) -> None:
        super().__init__()
        self.run_dir, self.run_id, self.monitor = Path(run_dir), run_id, monitor
        self.given = (checkpoint, early_stopping)
        self.test_pass, self.resumed_from = test_pass, resumed_from
        self.hooks: AuditHooks | None = None
        self.tested: AuditHooks | None = None  # a log kept open for the test pass after fit
        self.best_cb: Any = None
        self.stopper: Any = None
        self.score_name: str | None = None
        self.iterator: Any = None
        self.bundle: Any = None
        self.handle: Any = None
        self.steps = self.start_steps = 0
        self.epoch = -1
        self.ended: int | None = None  # the epoch whose training end was logged
        self.held: str | None = None  # the digest of the weights the epoch validated
        self.final: str | None = None
        self.best_before: object = None

    # ------------------------------------------------------------------ Poutyne's hooks

    def on_train_begin(self, logs: Mapping[str, Any]) -> None:
        self._close_tested()  # a new fit: the last one's test pass never came
        callbacks, self.iterator, self.bundle = _discover(self)
        given_cp, given_es = self.given
        pt = _poutyne()
        keepers = [cb for cb in callbacks if _is_best_keeper(cb)]
        stoppers = [cb for cb in callbacks if isinstance(cb, pt.EarlyStopping)]
        if self.monitor is not None:  # the keeper and stopper judging the named metric
            keepers = [cb for cb in keepers if cb.monitor == self.monitor]
            stoppers = [cb for cb in stoppers if cb.monitor == self.monitor]
        self.best_cb = given_cp if given_cp is not None else next(iter(keepers), None)
        self.stopper = given_es if given_es is not None else next(iter(stoppers), None)
        self.score_name = self.monitor or next(
            (cb.monitor for cb in (self.best_cb, self.stopper) if cb is not None), None)
        self.steps = self.start_steps = 0
        self.hooks, self.ended, self.held, self.final = None, None, None, None
        self.handle = self.model.optimizer.register_step_post_hook(self._count_step)

    def on_epoch_begin(self, epoch_number: int, logs: Mapping[str, Any]) -> None:
        hooks = self._open(epoch_number)
        self.epoch = epoch_number - 1  # Poutyne counts epochs from 1
        hooks.train_start(self.epoch, train_step=self.steps, decided=self._decided)
        self.start_steps, self.best_before = self.steps, self._best_value()

    def on_valid_begin(self, logs: Mapping[str, Any]) -> None:
        self._end_training()

    def on_epoch_end(self, epoch_number: int, logs: Mapping[str, Any]) -> None:
        self._end_training()
        if self.hooks is None or self.score_name is None or self.score_name not in logs:
            return
        self.hooks.hold(epoch=epoch_number - 1, score=float(logs[self.score_name]),
                        weights=self.held or self._digest(), train_step=self.steps,
                        phase="epoch")

    def on_train_end(self, logs: Mapping[str, Any]) -> None:
        start = getattr(self.iterator, "initial_epoch", None)
        hooks = self._open(int(start) if start is not None else
                           int((self.params or {}).get("epochs", 0)) + 1)
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
        if hooks.is_pending:  # the last validation, once every callback acted on it
            improved, stop = self._decided()
            hooks.settle(improved=improved, stop=stop)
        # the weights training ended with, as a digest taken then (restore_best may since
        # have put the best ones back): AuditHooks.final takes weights, the log a digest
        hooks.log.event("final", weights=self.final or self._digest())
        hooks.end(train_step=self.steps, best_model=self._best_model(),
                  close=not self.test_pass)
        self.hooks, self.tested = None, hooks if self.test_pass else None

    def on_test_begin(self, logs: Mapping[str, Any]) -> None:
        """A test pass after fit (fit itself validates through on_valid_*): the weights it
        scores."""
        if self.tested is not None:
            self.tested.test(self.model.network)

    def on_test_end(self, logs: Mapping[str, Any]) -> None:
        self._close_tested()

    def _close_tested(self) -> None:
        if self.tested is not None:
            self.tested.close()
            self.tested = None

    # ------------------------------------------------------------------ the log

    def _open(self, first_epoch: int) -> AuditHooks:
        """The launch's log, opened when its first epoch starts (``first_epoch`` one-based):
        every ``on_train_begin`` has run by then, ModelBundle's resume included."""
        if self.hooks is not None:
            return self.hooks
        resumed = self.resumed_from
        if resumed is None and first_epoch > 1:
            path = getattr(self.bundle, "directory", None)
            resumed = {"epoch": first_epoch - 2, "train_step": None, "run_id": None,
                       "path": None if path is None else str(path)}
        rank, world = _rank_and_world()
        model = self.model
        self.hooks = AuditHooks(
            self.run_dir, run_id=shared_run_id(self.run_id),
            trainer=f"{type(model).__module__}.{type(model).__qualname__}",
            config=self._config(), rank=rank, world_size=world, resumed_from=resumed)
        steps = (self.params or {}).get("steps")
        self.hooks.setup(epoch=first_epoch - 1, train_step=self.steps,
                         train_len=None if steps is None else int(steps))
        return self.hooks

    def _config(self) -> AuditConfig:
        """The job's settings in the spec's terms: fit validates after every epoch when it
        has validation data (and never before training); ``EarlyStopping`` has no start
        patience; Poutyne has no debug mode; the files are Poutyne's own (ckpt_enable None);
        the test pass is the one the job says it runs (``test_pass``)."""
        params = self.params or {}
        validates = "valid_steps" in params
        judged = next((cb for cb in (self.best_cb, self.stopper)
                       if cb is not None and cb.monitor == self.score_name), None)
        minimize = None if judged is None else bool(judged.monitor_op(0.0, 1.0))  # x < y: min
        stopper = self.stopper
        counts = stopper is not None and stopper.monitor == self.score_name
        return AuditConfig(
            num_epochs=None if "epochs" not in params else int(params["epochs"]),
            val_first=False if validates else None,
            val_every_n_epochs=1 if validates else None, minimize=minimize,
            patience=int(stopper.patience) if counts else None,
            has_patience=counts if stopper is None or counts else None,
            start_patience=None, test_enable=self.test_pass, ckpt_enable=None, save_last=None,
            ckpt_every_n_epochs=None, debug=None)

    def _count_step(self, optimizer: object, args: object, kwargs: object) -> None:
        self.steps += 1

    def _digest(self) -> str:
        return weights_digest(self.model.network.state_dict())

    def _end_training(self) -> None:
        """The epoch's training ended (any last accumulated step taken): logged once."""
        if self.hooks is None or self.ended == self.epoch:
            return
        self.ended = self.epoch
        self.held = self.final = self._digest()
        self.hooks.train_end(self.epoch, train_step=self.steps,
                             optimizer_steps=self.steps - self.start_steps)

    def _best_value(self) -> object:
        return None if self.best_cb is None else self.best_cb.current_best

    def _decided(self) -> tuple[bool | None, bool]:
        """The held validation's verdicts, read once every callback acted on it."""
        improved = None if self.best_cb is None else self._best_value() is not self.best_before
        return improved, bool(getattr(self.model, "stop_training", False))

    def _best_model(self) -> Mapping[str, object] | None:
        """The best weights as the job keeps them: the best ModelCheckpoint's file (loaded
        weights-only), or BestModelRestore's copy; None before any improvement."""
        cb = self.best_cb
        if cb is None:
            return None
        copy = getattr(cb, "best_weights", None)
        if isinstance(copy, Mapping):
            return copy
        name = getattr(cb, "best_filename", None)
        if name is None or not Path(name).is_file():
            return None
        try:
            content = torch.load(name, map_location="cpu", weights_only=True)
        except Exception:  # not a state dict saved with torch.save: no weights to compare
            return None
        return content if isinstance(content, Mapping) else None


@functools.cache
def _callback_class() -> type[_Audit]:
    from poutyne import Callback

    class AuditCallback(_Audit, Callback):  # type: ignore[misc]
        """Logs a Poutyne run for ``trainspec audit`` (see :func:`audit_callback`)."""

    return AuditCallback
