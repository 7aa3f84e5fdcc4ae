"""A well-formed adapter shell that the broken adapters build on."""

from __future__ import annotations

from trainspec.conformance.run.adapter import CAPABILITIES, Capability, RunContext
from trainspec.conformance.run.scenario import Scenario


class ShellAdapter:
    """Declares every capability, so every selected check reaches a run; runs nothing."""

    name = "bad adapter"

    def capabilities(self) -> frozenset[Capability]:
        return CAPABILITIES

    def environment(self) -> dict[str, str | None]:
        return {"framework": None}

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        raise NotImplementedError("each bad adapter overrides run")
