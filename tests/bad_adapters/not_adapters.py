"""Factories that do not give an adapter: not callable, or an object without the protocol."""

from __future__ import annotations

from typing import Any

from tests.bad_adapters.common import ShellAdapter
from trainspec.conformance.run.adapter import CAPABILITIES, Capability

NOT_A_FACTORY = 42


class WithoutRun:
    """Describes itself well, but has no ``run``."""

    name = "without run"

    def capabilities(self) -> frozenset[Capability]:
        return CAPABILITIES

    def environment(self) -> dict[str, str | None]:
        return {"framework": None}


def make_nothing() -> object:
    """A factory that returns a plain object: no name, no capabilities, no run."""
    return object()


class EnvironmentNotADict(ShellAdapter):
    """``environment()`` returns a list: the report's environment must be names to versions."""

    def environment(self) -> Any:
        return ["torch 2.13.0"]


class EnvironmentNotJson(ShellAdapter):
    """``environment()`` returns a set, which the worker cannot send back as JSON."""

    def environment(self) -> Any:
        return {"framework": {"lightning", "2.4.0"}}


class SourcesForUnknownClauses(ShellAdapter):
    """``framework_sources()`` names a clause the spec does not have (a typo of NAN-1)."""

    def framework_sources(self) -> dict[str, str]:
        return {"NAN1": "pkg/callbacks.py, EarlyStopping.check"}


class SourcesNotADict(ShellAdapter):
    """``framework_sources()`` returns a list of pointers with no clause IDs."""

    def framework_sources(self) -> Any:
        return ["pkg/callbacks.py"]
