"""The kit's HookBracket: two hooks that run before and after a framework runner's own."""

from __future__ import annotations

import pytest

from tests.worked.engine_runner import PRIORITY, Hook
from trainspec.kit import AdapterError, HookBracket


class _Runner:
    """A runner's hook dispatch in miniature: hooks sorted by priority, called in order."""

    def __init__(self) -> None:
        self.hooks: list[tuple[int, Hook]] = []
        self.seen: list[str] = []

    def register(self, hook: Hook, priority: str) -> None:
        self.hooks.append((PRIORITY[priority], hook))
        self.hooks.sort(key=lambda pair: pair[0])

    def call(self, event: str, **kwargs: object) -> None:
        for _, hook in self.hooks:
            getattr(hook, event)(self, **kwargs)


class _Decides(Hook):
    def after_val_epoch(self, runner: _Runner, metrics: dict[str, float]) -> None:  # type: ignore[override]
        runner.seen.append(f"framework decides on {metrics['score']}")


def test_the_first_hook_runs_before_the_frameworks_and_the_last_after() -> None:
    runner = _Runner()
    runner.register(_Decides(), "LOW")
    first, last = HookBracket(
        before={"after_val_epoch": lambda r, metrics: r.seen.append("before")},
        after={"after_val_epoch": lambda r, metrics: r.seen.append("after")}).hooks(base=Hook)
    runner.register(first, "HIGHEST")
    runner.register(last, "LOWEST")
    runner.call("after_val_epoch", metrics={"score": 0.5})
    runner.call("before_train_epoch")  # an event the bracket does not name: the base's no-op
    assert runner.seen == ["before", "framework decides on 0.5", "after"]
    assert isinstance(first, Hook)
    assert isinstance(last, Hook)


def test_an_event_the_hook_class_lacks_is_an_adapter_error_naming_it() -> None:
    with pytest.raises(AdapterError, match="Hook has no hook named after_val_epcoh"):
        HookBracket(after={"after_val_epcoh": print}).hooks(base=Hook)
