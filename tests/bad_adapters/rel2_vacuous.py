"""Trainers that never do what a scenario asks: they do nothing, crash, hang or quit early.

No check may pass any of them (``tests/test_vacuous.py``): a pass needs evidence that the runs
it judged carried their scenarios out. Each declares every capability, so every check reaches
its runs. The runs record at most a set-up, so a check finding "no violation" in them would
be judging nothing.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import time

from tests.bad_adapters.common import ShellAdapter
from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.records import RunEnd, Setup
from trainspec.conformance.run.scenario import Scenario


def _set_up(scenario: Scenario, ctx: RunContext) -> None:
    """What a trainer that got as far as building itself records."""
    ctx.record(Setup(epoch=0, train_step=0, train_len=6))


class DoesNothing(ShellAdapter):
    """``run`` returns at once: no set-up, no epoch, no validation, no end."""

    name = "does nothing"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        return None


class SetsUpAndEnds(ShellAdapter):
    """A set-up and an end, and nothing in between: the frame of a run with no run in it."""

    name = "sets up and ends"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        _set_up(scenario, ctx)
        ctx.record(RunEnd(train_step=0, final_weights={}, best_model=None))


class Segfaults(ShellAdapter):
    """Dies of SIGSEGV right after its set-up (no core file is written)."""

    name = "segfaults"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        _set_up(scenario, ctx)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), signal.SIGSEGV)


class Hangs(ShellAdapter):
    """Sets up, then never returns."""

    name = "hangs after set-up"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        _set_up(scenario, ctx)
        while True:
            time.sleep(0.05)


class ExitsWithStatusZero(ShellAdapter):
    """Sets up, then ends its process with status 0 (``os._exit``), as if all went well."""

    name = "os._exit(0) after set-up"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        _set_up(scenario, ctx)
        os._exit(0)


class CallsSysExit(ShellAdapter):
    """Sets up, then ``sys.exit(0)``: a clean exit code from a run that did nothing."""

    name = "sys.exit(0) after set-up"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        _set_up(scenario, ctx)
        sys.exit(0)


class SaysByeAndExits(ShellAdapter):
    """Sets up, then ``sys.exit("bye")``: the message must reach the evidence."""

    name = "sys.exit('bye') after set-up"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        _set_up(scenario, ctx)
        sys.exit("bye")
