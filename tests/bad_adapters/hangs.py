"""An adapter whose ``run`` never returns."""

from __future__ import annotations

import time

from tests.bad_adapters.common import ShellAdapter
from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.scenario import Scenario


def wait_for_a_trainer_that_never_comes() -> None:
    """The frame a timeout's stack dump must show."""
    while True:
        time.sleep(0.05)


class HangsInRun(ShellAdapter):
    name = "hangs in run"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        wait_for_a_trainer_that_never_comes()


class RankZeroWaitsAlone(ShellAdapter):
    """Rank 1 ends at once; rank 0 never does, as a rank left waiting in a collective."""

    name = "rank 0 waits alone"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        if ctx.rank == 0:
            wait_for_a_trainer_that_never_comes()
