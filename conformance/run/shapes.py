"""Helpers for the common shapes of trainers: the adapter kit's own part (``trainspec.kit``).

Whatever a trainer's shape (a class with hooks, a loop function with callbacks, a script whose
decisions are local variables), its adapter reports the same records at the same moments.
:class:`Recorder` reports them from wherever the adapter can see the trainer (a hook, a
callback, a wrapped method): the 0-based epoch, the crash points, the trainer's state and files
at each epoch's start, and validations whose verdicts are settled later; it reads the
trainer's files through a ``FileLayout`` (``run/layout.py``). :func:`observe` and
:func:`frame_locals` observe what a trainer keeps to itself.

Runs happen in forked children: patching a trainer's method or module function for one run
(:func:`observe`) changes nothing outside that run.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.layout import FileLayout
from trainspec.conformance.run.recording import trainer_state
from trainspec.conformance.run.records import (
    ConfigSeen,
    FileSnapshot,
    Phase,
    RunEnd,
    Setup,
    TestPass,
    TrainEnd,
    TrainStart,
    Validation,
    Weights,
)
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.task import plain_weights
from trainspec.errors import AdapterError

__all__ = ["Recorder", "StepCounter", "frame_locals", "observe", "scripted_score"]

Module = torch.nn.Module | Mapping[str, object]


def scripted_score(scenario: Scenario, ctx: RunContext, epoch: int | None) -> float:
    """The score the validation after 0-based ``epoch`` must report (None: ``val.first``)."""
    return scenario.scores.pooled(epoch, ctx.world_size)


class StepCounter:
    """Counts a torch optimizer's steps (``register_step_post_hook``): ``train_step`` for a
    trainer that keeps no step counter of its own."""

    def __init__(self, optimizer: torch.optim.Optimizer, start: int = 0) -> None:
        self.steps = start
        optimizer.register_step_post_hook(self._stepped)

    def _stepped(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        self.steps += 1


@dataclass(slots=True)
class _Held:
    epoch: int
    phase: Phase
    score: float
    weights: Weights
    improved: bool | Callable[[], bool] | None


class Recorder:
    """Reports one run's records from an adapter's hooks, in 0-based epochs.

    Call :meth:`setup` once the trainer is built, :meth:`train_start` / :meth:`train_end`
    around each epoch's training, :meth:`val_start` before each validation after an epoch,
    :meth:`validation` once the trainer decided, :meth:`test` in its test pass and :meth:`end`
    when it returns. Epochs are given in the trainer's numbering (``epoch_base``: 1 for a
    trainer counting from 1); every record and crash point gets the 0-based epoch.

    A verdict the trainer settles later (a stop decided after the hook that sees the score, a
    patience counter kept in a local variable) is given as None: the validation is held until
    :meth:`decide` gives it, or the next :meth:`train_start` settles ``stop=False`` (the run
    went on), or :meth:`end` settles it with its ``stop`` (a trainer that leaves its loop
    before the last epoch stopped).

    ``files`` (with ``model``, ``optimizer``, ``schedulers`` for the state at each epoch's
    start) fills ``last_file_epoch`` and ``best_file`` from the trainer's own files. A
    scheduler the trainer builds only once its ``train()`` runs is handed to
    :meth:`train_start` (``schedulers=``) when the adapter first sees it; it is kept from then
    on.
    """

    def __init__(self, scenario: Scenario, ctx: RunContext, *, epoch_base: int = 0,
                 files: FileLayout | None = None, model: torch.nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None,
                 schedulers: Sequence[object] = ()) -> None:
        self.scenario, self.ctx = scenario, ctx
        self.epoch_base, self.files = epoch_base, files
        self.model, self.optimizer, self.schedulers = model, optimizer, list(schedulers)
        self.steps = StepCounter(optimizer) if optimizer is not None else None
        self.final: Weights | None = None  # the weights when the last epoch's training ended
        self._held: _Held | None = None
        self._epoch: int | None = None  # the 0-based epoch under way

    # ---------------------------------------------------------------------- helpers

    def zero_based(self, epoch: int) -> int:
        return epoch - self.epoch_base

    @property
    def epoch(self) -> int | None:
        """The epoch under way (since the last :meth:`train_start`), in the trainer's
        numbering; None before the first."""
        return None if self._epoch is None else self._epoch + self.epoch_base

    def score(self, epoch: int | None) -> float:
        """The scripted score of the validation after the trainer's ``epoch`` (None:
        ``val.first``): the value a trainer's validation must return."""
        return scripted_score(self.scenario, self.ctx,
                              None if epoch is None else self.zero_based(epoch))

    def train_step(self, given: int | None) -> int:
        if given is not None:
            return given
        if self.steps is None:
            raise AdapterError("Recorder: give train_step, or an optimizer to count steps on")
        return self.steps.steps

    def _best(self) -> FileSnapshot | None:
        if self.files is None or self.ctx.rank != 0:
            return None
        return self.files.snapshot(self.ctx.ckpt_root, "best")

    def _weights(self, model: Module | None) -> Weights:
        chosen = model if model is not None else self.model
        if chosen is None:
            raise AdapterError("Recorder: give the model (here or to the Recorder)")
        return plain_weights(chosen.state_dict() if isinstance(chosen, torch.nn.Module)
                             else chosen)

    # ---------------------------------------------------------------------- records

    def setup(self, *, epoch: int, train_len: int, train_step: int | None = None,
              config: ConfigSeen | None = None) -> None:
        """The trainer is built; ``epoch`` is the first it will train (its numbering)."""
        step = self.train_step(train_step)
        if self.steps is not None:
            self.steps.steps = step
        self.ctx.record(Setup(epoch=self.zero_based(epoch), train_step=step,
                              train_len=train_len, config=config or ConfigSeen()))

    def train_start(self, epoch: int, *, train_step: int | None = None,
                    schedulers: Sequence[object] | None = None) -> None:
        """An epoch's training begins: settles a held validation (the run went on).

        ``schedulers``: the trainer's LR schedulers as they are now, for a trainer that builds
        them inside its ``train()``, where the adapter could not give them to the Recorder;
        they replace those given before and are captured at this and every later epoch's start
        (RES-2 compares their state).
        """
        if self._held is not None:
            self.decide(stop=False)
        if schedulers is not None:
            self.schedulers = list(schedulers)
        e = self.zero_based(epoch)
        self._epoch = e
        last = None
        if self.files is not None:
            found = self.files.snapshot(self.ctx.ckpt_root, "last")
            last = None if found is None else found.epoch
        state = trainer_state(self.model if self.model is not None else {}, self.optimizer,
                              self.schedulers)
        self.ctx.record(TrainStart(epoch=e, train_step=self.train_step(train_step),
                                   state=state, last_file_epoch=last, best_file=self._best()))
        self.ctx.crash_point("train_start", e)

    def train_end(self, epoch: int, *, batches: int, loader_len: int,
                  train_step: int | None = None, optimizer_steps: int | None = None,
                  loader_batch_size: int | None = None,
                  eval_lens: Mapping[str, int | None] | None = None,
                  eval_batches: Mapping[str, int | None] | None = None) -> None:
        """An epoch's training ended (``optimizer_steps`` defaults to ``batches``).

        ``eval_lens`` and ``eval_batches`` are what DBG-1 reads of the evaluation loaders, by
        name (``"val_loader"``, ``"test_loader"``, ``"eval_loader"``): each loader's ``len()``
        and the batches it yields (None: the trainer has no such loader; a name left out is
        not judged). ``eval_batches`` defaults to ``eval_lens``: give it when the adapter
        counts the batches a validation really draws, which may differ from ``len()``.
        """
        e = self.zero_based(epoch)
        self.final = self._weights(None) if self.model is not None else None
        lens = dict(eval_lens or {})
        self.ctx.record(TrainEnd(epoch=e, train_step=self.train_step(train_step),
                                 batches=batches, loader_len=loader_len,
                                 optimizer_steps=batches if optimizer_steps is None
                                 else optimizer_steps, loader_batch_size=loader_batch_size,
                                 eval_lens=lens, eval_batches=lens if eval_batches is None
                                 else dict(eval_batches)))
        self.ctx.crash_point("train_end", e)

    def val_start(self, epoch: int) -> None:
        """Entering the validation after ``epoch``."""
        self.ctx.crash_point("val_start", self.zero_based(epoch))

    def validation(self, epoch: int | None, *, score: float,
                   improved: bool | Callable[[], bool] | None, stop: bool | None,
                   model: Module | None = None) -> None:
        """A validation (``epoch`` None: ``val.first``). A verdict None is given later (to
        :meth:`decide`); ``improved`` may be a function, asked when the validation is
        recorded (``lambda: trainer.best_score is score``: the trainer kept this very score
        as its best)."""
        if self._held is not None:
            self.decide(stop=False)
        phase: Phase = "first" if epoch is None else "epoch"
        e = self.zero_based(epoch) if epoch is not None else (self._epoch or 0)
        self._held = _Held(epoch=e, phase=phase, score=score, weights=self._weights(model),
                           improved=improved)
        if stop is not None and improved is not None:
            self.decide(stop=stop)

    def decide(self, *, stop: bool, improved: bool | None = None) -> None:
        """Record the held validation with its verdicts, then offer ``val_after_save``."""
        held, self._held = self._held, None
        if held is None:
            return
        verdict = held.improved if improved is None else improved
        if callable(verdict):
            verdict = verdict()
        if verdict is None:
            raise AdapterError("Recorder: a validation was held without its improved verdict")
        self.ctx.record(Validation(epoch=held.epoch, phase=held.phase, score=held.score,
                                   improved=verdict, stop=stop, weights=held.weights,
                                   best_file=self._best()))
        if held.phase == "epoch":
            self.ctx.crash_point("val_after_save", held.epoch)

    def test(self, model: Module | None = None) -> None:
        self.ctx.record(TestPass(weights=self._weights(model)))

    def end(self, *, best_model: Module | None, train_step: int | None = None,
            stop: bool = False, final_weights: Module | None = None) -> None:
        """The run returned; ``stop`` settles a held validation (True: the trainer left its
        loop early). ``final_weights`` default to those at the last epoch's end."""
        if self._held is not None:
            self.decide(stop=stop)
        final = self._weights(final_weights) if final_weights is not None else self.final
        self.ctx.record(RunEnd(
            train_step=self.train_step(train_step),
            final_weights=final if final is not None else self._weights(None),
            best_model=None if best_model is None else self._weights(best_model),
            best_file=self._best()))


def observe(owner: object, name: str, *, before: Callable[..., None] | None = None,
            after: Callable[..., None] | None = None) -> None:
    """Wrap ``owner.name`` (a method of an instance, a function of a module) for this run:
    ``before(*args, **kwargs)`` runs before it, ``after(result, *args, **kwargs)`` after.

    The way to see a decision a trainer passes on (``save_checkpoint(state, is_best)``) or a
    moment it has no hook for; the run's process is a forked child, so the patch ends with it.
    """
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            before(*args, **kwargs)
        result = original(*args, **kwargs)
        if after is not None:
            after(result, *args, **kwargs)
        return result

    setattr(owner, name, wrapper)


def frame_locals(function: str) -> dict[str, object]:
    """A copy of the local variables of the innermost running call of ``function`` (a
    function's name), read from a hook it calls: how to see a decision a trainer keeps in a
    local variable (``not_improved_count``, ``is_best``)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == function:
            return dict(frame.f_locals)
        frame = frame.f_back  # type: ignore[assignment]
    raise AdapterError(f"frame_locals: no call of {function!r} is running here; call it from "
                       "a hook that function calls")

