"""An adapter that prints megabytes to stdout and stderr, then trains the reference properly."""

from __future__ import annotations

import sys

from trainspec.adapters.base_trainer import BaseTrainerAdapter
from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.scenario import Scenario

MEGABYTES = 10  # on each of stdout and stderr
MARKER = "LOUD-ADAPTER-NOISE "
_LINE = (MARKER * 8)[:127] + "\n"


class LoudRun(BaseTrainerAdapter):
    """The reference trainer, drowned in output: 20 MB per run."""

    @property
    def name(self) -> str:
        return "loud reference"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        chunk = _LINE * 8192  # 1 MiB
        for _ in range(MEGABYTES):
            sys.stdout.write(chunk)
            sys.stderr.write(chunk)
        super().run(scenario, ctx)


class LoudThenRaises(LoudRun):
    """Drowns the run in output, then raises: the report must carry the error, not the noise."""

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        print(MARKER * 100_000)  # one 1.9 MB line
        raise RuntimeError("gave up after shouting " + MARKER * 50_000)
