"""``trainspec check TARGET --self-test``: a few short runs that validate an adapter's reports
before anyone runs the whole suite; one line per problem, each naming its fix.

One package, an entry point beside the CLI (it may import the checks' helpers; no layer
imports it): this module runs the scenarios; :mod:`.runs` holds them and reads their records,
:mod:`.files` the files they left, :mod:`.findings` the lines. A fact of the trainer (a file
that records no epoch, a file its own reader cannot read) is named with the checks that will
judge it and does not fail the self-test. Exit status (through the CLI): 0 when the adapter
has no problem, 1 when it has one, 2 when the target is not an adapter at all (as for any
check).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainspec.conformance.run.harness import Harness
from trainspec.conformance.runner import open_context
from trainspec.conformance.selftest.findings import Problem, merged, summary
from trainspec.conformance.selftest.runs import (
    crash_problems,
    crash_scenarios,
    plain_problems,
    plain_scenario,
    stop_problems,
    stop_scenario,
)

if TYPE_CHECKING:
    from trainspec.conformance.api import Plan

__all__ = ["SELF_TEST_TIMEOUT_S", "Problem", "SelfTest", "self_test"]

SELF_TEST_TIMEOUT_S = 30.0  # each run is a few epochs of the tiny task: milliseconds


@dataclass(frozen=True, slots=True, kw_only=True)
class SelfTest:
    """What the self-test found: the adapter's problems and the trainer's facts, the runs
    made, how long it took."""

    target: str
    problems: tuple[Problem, ...]
    runs: int
    duration_s: float

    @property
    def passed(self) -> bool:
        """No problem of the adapter's (the trainer's facts are the checks' to judge)."""
        return not any(not p.is_trainer_fact for p in self.problems)

    def lines(self, *, verbose: bool = False) -> list[str]:
        out = [p.line() for p in self.problems]
        if verbose:
            out += [f"--- {p.topic}: {p.what}\n{p.detail.rstrip()}" for p in self.problems
                    if p.detail.strip()]
        out.append(f"self-test of {self.target}: {summary(self.problems)} ({self.runs} runs, "
                   f"{self.duration_s:.1f} s)")
        if self.passed:
            out.append(f"next: trainspec check {self.target}")
        return out


def self_test(plan: Plan, *, harness: Harness | None = None) -> SelfTest:
    """Run the self-test's scenarios on ``plan``'s target, on one rank (on ``harness`` when
    one is given, left open: several targets can share its workers).

    Raises:
        AdapterError: the target is no adapter (as :func:`~trainspec.conformance.runner.run`).
    """
    started = time.monotonic()
    problems: list[Problem] = []
    runs = 0
    with contextlib.ExitStack() as stack:
        if harness is None:
            harness = stack.enter_context(Harness(
                plan.target.adapter, timeout_s=min(plan.timeout_s, SELF_TEST_TIMEOUT_S),
                backend=plan.backend))
        ctx, described = open_context(plan.target, harness, world_size=1)
        caps = described.capabilities
        plain = plain_scenario()
        problems += plain_problems(plain, ctx.runs.run(plain), caps)
        runs += 1
        if "early_stopping" in caps:
            stop = stop_scenario()
            problems += stop_problems(stop, ctx.runs.run(stop))
            runs += 1
        for s in crash_scenarios(caps):
            problems += crash_problems(s, ctx.runs.run(s))
            runs += 1
    return SelfTest(target=plan.target.label, problems=tuple(merged(problems)), runs=runs,
                    duration_s=round(time.monotonic() - started, 3))
