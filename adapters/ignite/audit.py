"""The ready audit handlers for PyTorch Ignite (``trainspec audit``).

A team calls :func:`attach_audit` on its own trainer and evaluator engines, after adding its
handlers; the handlers it attaches write the run's audit log (``docs/audit.md``) and change
nothing the run does. They configure nothing: they read the job's own best ``Checkpoint`` (one
with a ``score_function``) and ``EarlyStopping`` among the evaluator's handlers (or take them as
arguments), the trainer's ``max_epochs`` and ``epoch_length``, and fill the log's config from
them in the spec's terms. The score is what the score function returns (Ignite's handlers
maximize it: a loss comes negated, as ``Checkpoint.get_default_score_fn(..., score_sign=-1)``
does). A validation's ``improved`` is whether the Checkpoint's best kept item (the last of its
``_saved`` list, the file ``last_checkpoint`` names) changed, None without one; its ``stop`` is
``trainer.should_terminate`` once EarlyStopping ran. Handlers run in the order they were added:
after the Checkpoint and EarlyStopping on the evaluator's COMPLETED, the audit settles a
validation at once, else at the next epoch's start or at the end of the run. How to use it and
what it cannot see: ``docs/frameworks/ignite.md``.

Ignite is imported inside the functions only: importing this module never imports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from trainspec.adapters.ignite.files import model_weights
from trainspec.conformance.run.audithooks import AuditHooks, shared_run_id
from trainspec.conformance.run.auditlog import AuditConfig
from trainspec.conformance.run.files import load_dict
from trainspec.errors import UsageError

__all__ = ["IgniteAudit", "attach_audit"]

ScoreFunction = Callable[[Any], float]


def attach_audit(trainer: Any, evaluator: Any, run_dir: Path | str, *,
                 score_function: ScoreFunction | None = None, checkpoint: Any = None,
                 early_stopping: Any = None, run_id: str | None = None,
                 model: torch.nn.Module | None = None, tester: Any = None,
                 val_every_n_epochs: int | None = None,
                 resumed_from: Mapping[str, object] | None = None) -> IgniteAudit:
    """Attach the audit of one ``trainer.run`` to the engines; its log goes to ``run_dir``.

    ``checkpoint`` and ``early_stopping`` name the job's best Checkpoint and EarlyStopping when
    they are not among the evaluator's handlers; ``score_function`` the score (default: theirs).
    ``model`` is the module whose weights are digested (default: the one the Checkpoint saves).
    ``tester`` is the engine whose run after training is the test pass (the evaluator itself may
    be): the log then ends after it; None leaves the test pass unjudged.
    ``val_every_n_epochs`` is the validation interval (``Events.EPOCH_COMPLETED(every=n)`` on
    the handler running the evaluator: Ignite cannot say which handler that is); None leaves the
    schedule unjudged. ``resumed_from`` overrides the resume point read from the trainer's
    restored state (a run that starts past epoch 0).

    Raises:
        UsageError: no score (no best Checkpoint, no EarlyStopping, no ``score_function``) or
            no model to digest; the message names the argument to give.
    """
    from ignite.engine import Events
    from ignite.handlers import Checkpoint, EarlyStopping

    found = [_unwrapped(h) for h, _, _ in _handlers(evaluator, Events.COMPLETED)]
    best = checkpoint if checkpoint is not None else next(
        (h for h in found if isinstance(h, Checkpoint) and h.score_function is not None), None)
    stopper = early_stopping if early_stopping is not None else next(
        (h for h in found if isinstance(h, EarlyStopping)), None)
    score = score_function or (best.score_function if best is not None else None) or (
        stopper.score_function if stopper is not None else None)
    if score is None:
        raise UsageError("attach_audit: no score: the evaluator has no Checkpoint with a "
                         "score_function and no EarlyStopping; give score_function=")
    module = model if model is not None else _saved_module(best)
    if module is None:
        raise UsageError("attach_audit: no model to digest: give model= (the module the "
                         "trainer trains)")
    audit = IgniteAudit(trainer, evaluator, Path(run_dir), score=score, best=best,
                        stopper=stopper, model=module, tester=tester, run_id=run_id,
                        every=val_every_n_epochs, resumed_from=resumed_from)
    audit.attach()
    return audit


def _handlers(engine: Any, event: Any) -> list[tuple[Any, Any, Any]]:
    """An engine's handlers of one event, in the order Ignite runs them."""
    return list(getattr(engine, "_event_handlers", {}).get(event, []))


def _unwrapped(handler: Any) -> Any:
    """The handler an event filter wraps (Ignite keeps it as ``_parent``), else itself."""
    parent = getattr(handler, "_parent", None)
    return parent() if callable(parent) else handler


def _saved_module(best: Any) -> torch.nn.Module | None:
    """The module a best Checkpoint saves: its only one, or the one under "model"."""
    to_save = getattr(best, "to_save", None) or {}
    modules = {k: v for k, v in to_save.items() if isinstance(v, torch.nn.Module)}
    return modules.get("model") or (next(iter(modules.values())) if len(modules) == 1 else None)


def _same(a: Callable[..., object], b: Callable[..., object]) -> bool:
    """The same score function: the same object, or the same code over equal closures (two
    ``Checkpoint.get_default_score_fn("acc")`` calls)."""
    if a is b:
        return True
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    cells = [[c.cell_contents for c in getattr(f, "__closure__", None) or ()] for f in (a, b)]
    return code_a is not None and code_a is code_b and cells[0] == cells[1]


def _rank() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class IgniteAudit:
    """The audit of one ``trainer.run``: handlers on the trainer, the evaluator and the tester."""

    def __init__(self, trainer: Any, evaluator: Any, run_dir: Path, *, score: ScoreFunction,
                 best: Any, stopper: Any, model: torch.nn.Module, tester: Any,
                 run_id: str | None, every: int | None,
                 resumed_from: Mapping[str, object] | None) -> None:
        self.trainer, self.evaluator, self.tester = trainer, evaluator, tester
        self.run_dir, self.run_id, self.resumed_from = run_dir, run_id, resumed_from
        self.score, self.best, self.model = score, best, model
        # Checkpoint maximizes its score function; EarlyStopping has a mode
        minimize = getattr(stopper, "mode", "max") == "min" if best is None else False
        self.stopper = stopper
        # an EarlyStopping on another score or in the other direction stops on what the score
        # does not show: the run's stops cannot be judged on this score
        self.is_other = stopper is not None and not (
            _same(stopper.score_function, score)
            and (getattr(stopper, "mode", "max") == "min") == minimize)
        self.config = AuditConfig(
            num_epochs=None, val_first=None, val_every_n_epochs=every, minimize=minimize,
            patience=None if stopper is None or self.is_other else int(stopper.patience),
            has_patience=None if self.is_other else stopper is not None,
            start_patience=None, test_enable=None if tester is None else True,
            ckpt_enable=None, save_last=None, ckpt_every_n_epochs=None, debug=None)
        self.hooks: AuditHooks | None = None
        self.epoch: int | None = None  # the trainer's epoch in progress (0-based)
        self.start_step = 0
        self.best_before: object = None
        self.is_trained = self.is_testing = False

    def attach(self) -> None:
        from ignite.engine import Events

        trainer, evaluator = self.trainer, self.evaluator
        trainer.add_event_handler(Events.EPOCH_STARTED, self.train_start)
        trainer.add_event_handler(Events.EPOCH_COMPLETED, self.train_end)
        trainer.add_event_handler(Events.TERMINATE, self.terminated)
        trainer.add_event_handler(Events.COMPLETED, self.completed)
        evaluator.add_event_handler(Events.STARTED, self.validation_start)
        evaluator.add_event_handler(Events.COMPLETED, self.validation_end)
        if self.tester is not None and self.tester is not evaluator:
            self.tester.add_event_handler(Events.STARTED, self.test_start)
            self.tester.add_event_handler(Events.COMPLETED, self.test_end)

    # the log

    def open(self, *, in_epoch: bool) -> AuditHooks:
        """The launch's log, made at the first event of the run: the trainer's restored state
        says where a resume starts; a validation before any epoch is val.first."""
        state = self.trainer.state
        epoch = int(state.epoch) - 1 if in_epoch else int(state.epoch)  # 0-based
        step = int(state.iteration)
        resumed = self.resumed_from
        if resumed is None and epoch > 0:
            resumed = {"epoch": epoch - 1, "train_step": step, "run_id": None, "path": None}
        config = dataclasses.replace(self.config, num_epochs=int(state.max_epochs),
                                     val_first=not in_epoch)
        rank, world = _rank()
        kind = type(self.trainer)
        self.hooks = AuditHooks(self.run_dir, run_id=shared_run_id(self.run_id),
                                trainer=f"{kind.__module__}.{kind.__qualname__}",
                                config=config, rank=rank, world_size=world,
                                resumed_from=resumed)
        length = state.epoch_length
        self.hooks.setup(epoch=epoch, train_step=step,
                         train_len=None if length is None else int(length))
        return self.hooks

    def step(self) -> int:
        return int(self.trainer.state.iteration)

    def kept(self) -> object:
        """The best Checkpoint's best kept item (a new object whenever it changes)."""
        saved = getattr(self.best, "_saved", None) or []
        return saved[-1] if saved else None

    def decided(self) -> tuple[bool | None, bool]:
        """The Checkpoint's verdict (its best kept item replaced) and the trainer's stop flag,
        read once every handler acted on the validation."""
        improved = None if self.best is None else self.kept() is not self.best_before
        return improved, bool(self.trainer.should_terminate)

    def settle(self) -> None:
        """Write the held validation, if any, with the verdicts Ignite reached."""
        if self.hooks is not None and self.hooks.is_pending:
            improved, stop = self.decided()
            self.hooks.settle(improved=improved, stop=stop)

    def is_last(self) -> bool:
        """The audit's handler runs after the Checkpoint's and EarlyStopping's on the
        evaluator's COMPLETED: their verdicts are in when it runs."""
        from ignite.engine import Events

        order = [_unwrapped(h) for h, _, _ in _handlers(self.evaluator, Events.COMPLETED)]
        mine = next((i for i, h in enumerate(order)
                     if getattr(h, "__self__", None) is self), -1)
        return all(i < mine for i, h in enumerate(order)
                   if h is not None and h in (self.best, self.stopper))

    def end(self) -> None:
        """The run's end: its step and the best weights as the Checkpoint's file holds them
        (loaded weights-only); the log is closed."""
        if self.hooks is None:
            return
        last = getattr(self.best, "last_checkpoint", None)
        content = None
        if last is not None and Path(last).is_file():
            content, _ = load_dict(Path(last))
        self.hooks.end(train_step=self.step(),
                       best_model=None if content is None else model_weights(content))

    # the trainer's events

    def train_start(self, engine: Any) -> None:
        hooks = self.hooks or self.open(in_epoch=True)
        self.settle()
        self.epoch, self.start_step = int(engine.state.epoch) - 1, self.step()
        hooks.train_start(self.epoch, train_step=self.start_step)

    def train_end(self, engine: Any = None) -> None:
        """The epoch's training ended: at its validation's start, or at its end."""
        if self.hooks is None or self.epoch is None:
            return
        step = self.step()
        self.hooks.train_end(self.epoch, train_step=step, optimizer_steps=step - self.start_step)
        self.epoch = None

    def terminated(self, engine: Any) -> None:
        if engine.should_terminate == "skip_completed":  # no COMPLETED follows
            self.completed(engine)

    def completed(self, engine: Any) -> None:
        if self.is_trained:
            return
        hooks = self.hooks or self.open(in_epoch=False)
        self.settle()
        self.is_trained = True
        hooks.final(self.model)
        if self.tester is None:
            self.end()

    # the evaluator's and the tester's events

    def validation_start(self, engine: Any) -> None:
        if self.is_trained:
            if self.tester is self.evaluator:
                self.test_start(engine)
            return
        self.hooks = self.hooks or self.open(in_epoch=False)
        self.train_end()
        self.settle()
        self.best_before = self.kept()

    def validation_end(self, engine: Any) -> None:
        if self.is_trained:
            if self.tester is self.evaluator:
                self.test_end(engine)
            return
        if self.hooks is None:
            return
        epoch = int(self.trainer.state.epoch)
        self.hooks.hold(epoch=epoch - 1 if self.hooks.has_trained else epoch,
                        score=float(self.score(engine)), weights=self.model,
                        train_step=self.step())
        if self.is_last():
            self.settle()

    def test_start(self, engine: Any) -> None:
        if self.is_trained and self.hooks is not None and not self.is_testing:
            self.is_testing = True
            self.hooks.test(self.model)

    def test_end(self, engine: Any) -> None:
        if self.is_testing:
            self.is_testing = False
            self.end()
