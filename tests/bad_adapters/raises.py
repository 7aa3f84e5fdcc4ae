"""An adapter whose ``run`` raises in the adapter's own code."""

from __future__ import annotations

from tests.bad_adapters.common import ShellAdapter
from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.scenario import Scenario

MESSAGE = "the adapter lost its trainer"


class RaisesInRun(ShellAdapter):
    name = "raises in run"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        raise RuntimeError(f"{MESSAGE} (scenario {scenario.name})")
