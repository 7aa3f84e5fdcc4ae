"""Adapters whose ``capabilities()`` breaks the protocol: unknown names, wrong types."""

from __future__ import annotations

from typing import Any

from tests.bad_adapters.common import ShellAdapter


class UnknownCapabilities(ShellAdapter):
    """Declares a name the suite does not know (a typo of ``early_stopping``)."""

    def capabilities(self) -> Any:
        return frozenset({"checkpoint", "early_stoping"})


class CapabilitiesNotASet(ShellAdapter):
    """Returns a number instead of a set of names."""

    def capabilities(self) -> Any:
        return 42


class CapabilitiesOfMixedTypes(ShellAdapter):
    """Returns a set holding a name and a number."""

    def capabilities(self) -> Any:
        return {"checkpoint", 7}


class CapabilitiesAsOneString(ShellAdapter):
    """Returns one name as a bare string, which iterates as its letters."""

    def capabilities(self) -> Any:
        return "checkpoint"
