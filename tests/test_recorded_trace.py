"""Checks judged on recorded runs: no harness, no worker process.

A check sees its target only through :class:`~trainspec.conformance.checks.base.Runs`. Here a
fake ``Runs`` records each run in this process, through the seed-shape adapter and an
in-memory run context (as a property run does next to the trainer), so a check function can be
judged on the reference trainer and on a mutant in milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trainspec.adapters.base_trainer import BaseTrainerAdapter
from trainspec.conformance.checks import CHECKS, CheckContext, run_check
from trainspec.conformance.checks.base import Runs
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.run.memory import MemoryContext
from trainspec.conformance.run.protocol import AdapterSpec, PropertyOutcome
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import Trace, parse_rank


@dataclass(slots=True, kw_only=True)
class RecordedRuns:
    """A :class:`Runs` whose runs happen in this process, one rank, recorded in memory."""

    adapter: BaseTrainerAdapter
    root: Path
    scenarios: list[str] = field(default_factory=list)  # the runs the check asked for

    def run(self, scenario: Scenario, *, ckpt_root: Path | None = None,
            timeout_s: float | None = None) -> Trace:
        self.scenarios.append(scenario.name)
        ctx = MemoryContext(ckpt_root or self.new_ckpt_root(scenario.name))
        self.adapter.run(scenario, ctx)
        rank = parse_rank(0, ctx.records, "completed", "", "")
        return Trace(scenario_name=scenario.name, ranks=(rank,))

    def new_ckpt_root(self, label: str) -> Path:
        path = self.root / f"{len(list(self.root.iterdir()))}-{label}"
        path.mkdir(parents=True)
        return path

    def property(self, name: str, *, runner: str, max_examples: int,
                 max_runs: int = 0) -> PropertyOutcome:
        raise AssertionError("the checks judged here run no property")


def context(trainer: str, root: Path) -> tuple[CheckContext, RecordedRuns]:
    adapter = BaseTrainerAdapter(trainer)
    runs = RecordedRuns(adapter=adapter, root=root)
    ctx = CheckContext(runs=runs, capabilities=adapter.capabilities(), world_size=1)
    return ctx, runs


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    root.mkdir()
    return root


@pytest.mark.parametrize("check_name", ["check_loop_trains_each_epoch_once_in_order",
                                        "check_patience_stops_exactly_on_time"])
def test_a_check_passes_the_reference_on_recorded_runs(scratch: Path, check_name: str) -> None:
    ctx, runs = context("trainspec.reference:BaseTrainer", scratch)
    result = run_check(CHECKS[check_name], ctx)
    assert result.outcome == "passed", result.evidence
    assert runs.scenarios  # the check asked the fake for its runs: no worker was involved


@pytest.mark.parametrize(("check_name", "mutant", "expect"), [
    ("check_loop_trains_each_epoch_once_in_order", "loop:SkipsTheLastEpoch",
     "LOOP-1: with num_epochs=4 the trainer trained epochs [0, 1, 2], expected [0, 1, 2, 3]"),
    ("check_patience_stops_exactly_on_time", "pat:StopsOneValidationLate", "PAT-1: "),
])
def test_a_check_fails_a_mutant_on_recorded_runs(scratch: Path, check_name: str, mutant: str,
                                                 expect: str) -> None:
    ctx, _ = context(f"tests.mutants.{mutant}", scratch)
    result = run_check(CHECKS[check_name], ctx)
    assert result.outcome == "failed", result.evidence
    assert result.evidence.startswith(expect)


def test_the_harness_and_the_recorded_runs_both_satisfy_runs(scratch: Path) -> None:
    # a static check (mypy --strict over the tests): both are what a check may be given
    recorded: Runs = RecordedRuns(adapter=BaseTrainerAdapter(), root=scratch)
    with Harness(AdapterSpec(factory="trainspec.adapters.base_trainer:BaseTrainerAdapter")) as h:
        harness: Runs = h  # no worker starts until a run asks for one
        assert harness.root.is_dir()
    assert recorded.root == scratch
