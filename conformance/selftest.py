"""``trainspec check TARGET --self-test``: a few short runs that validate an adapter's reports
before anyone runs the whole suite; one line per problem, each naming its fix.

The runs and what is judged of them are in :mod:`trainspec.conformance.checks.selftest`. Exit
status (through the CLI): 0 when nothing is wrong, 1 when something is, 2 when the target is
not an adapter at all (as for any check).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainspec.conformance.checks.selftest import (
    Problem,
    crash_problems,
    crash_scenarios,
    merged,
    plain_problems,
    plain_scenario,
    stop_problems,
    stop_scenario,
    summary,
)
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.runner import open_context

if TYPE_CHECKING:
    from trainspec.conformance.api import Plan

__all__ = ["SELF_TEST_TIMEOUT_S", "SelfTest", "self_test"]

SELF_TEST_TIMEOUT_S = 30.0  # each run is a few epochs of the tiny task: milliseconds


@dataclass(frozen=True, slots=True, kw_only=True)
class SelfTest:
    """What the self-test found: the problems, the runs made, how long it took."""

    target: str
    problems: tuple[Problem, ...]
    runs: int
    duration_s: float

    @property
    def passed(self) -> bool:
        return not self.problems

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
