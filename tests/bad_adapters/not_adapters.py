"""Factories that do not give an adapter: not callable, or an object without the protocol."""

from __future__ import annotations

from trainspec.conformance.adapter import CAPABILITIES, Capability

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
