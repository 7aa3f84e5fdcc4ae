"""The kit's helper for trainers that are framework runners: hooks around the framework's own.

A runner (a train loop object that calls hooks registered with priorities, a message hub, a
checkpoint hook and an early-stopping hook of its own) decides inside its hooks: its checkpoint
hook writes in ``after_train_epoch``, its early-stopping hook sets the stop in
``after_val_epoch``. An adapter must see each event twice: *before* every hook of the framework
(the epoch's start, before a checkpoint is written; a crash point before the write) and *after*
every one (the decision the early-stopping hook just took, the best file the checkpoint hook
just wrote). :class:`HookBracket` builds those two hooks from plain functions::

    bracket = kit.HookBracket(
        before={"before_train_epoch": lambda runner: rec.train_start(runner.epoch)},
        after={"after_val_epoch": lambda runner, metrics: rec.decide(
            stop=runner.train_loop.stop_training)})
    first, last = bracket.hooks(base=Hook)        # instances of the framework's Hook class
    runner.register_hook(first, priority="HIGHEST")
    runner.register_hook(last, priority="LOWEST")

Every event not named is the base class's own (a no-op in such frameworks), so the two hooks
change nothing else of the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from trainspec.errors import AdapterError

__all__ = ["HookBracket"]

Event = Callable[..., object]
H = TypeVar("H")


@dataclass(frozen=True, slots=True, kw_only=True)
class HookBracket:
    """Two hooks around a framework's own: ``before`` maps event names (the framework's hook
    method names, such as ``before_train_epoch``) to what runs before every other hook of that
    event, ``after`` to what runs after every other hook. Each function gets the arguments the
    framework passes to its hooks."""

    before: Mapping[str, Event] = field(default_factory=dict)
    after: Mapping[str, Event] = field(default_factory=dict)

    def hooks(self, base: type[H], **attributes: Any) -> tuple[H, H]:
        """The first and the last hook: instances of subclasses of ``base`` (the framework's
        hook class), whose named events call the bracket's functions. ``attributes`` are set
        on both classes (a framework may read, say, ``priority`` off the hook itself).

        Raises:
            AdapterError: an event name is not a method of ``base`` (a typo would silently
                never run); ``base=object`` takes any name.
        """
        for events in (self.before, self.after):
            unknown = sorted(e for e in events if base is not object and not hasattr(base, e))
            if unknown:
                raise AdapterError(f"HookBracket: {base.__name__} has no hook named "
                                   f"{', '.join(unknown)}; expected one of its methods, such "
                                   f"as {_some_events(base)}. Fix the event name.")
        return (_hook(base, "TrainspecFirstHook", self.before, attributes),
                _hook(base, "TrainspecLastHook", self.after, attributes))


def _hook(base: type[H], name: str, events: Mapping[str, Event],
          attributes: Mapping[str, Any]) -> H:
    def method(function: Event) -> Callable[..., object]:
        def call(self: object, *args: Any, **kwargs: Any) -> object:
            return function(*args, **kwargs)

        return call

    namespace: dict[str, Any] = {event: method(f) for event, f in events.items()}
    namespace.update(attributes)
    made: H = type(name, (base,), namespace)()
    return made


def _some_events(base: type) -> str:
    names = [n for n in dir(base) if n.startswith(("before_", "after_"))]
    return ", ".join(names[:6]) or "before_train_epoch"
