"""Where a whole check's time goes: the check of the reference run in this process (1 worker,
2 ranks), through a harness that times every scenario it runs and every world it starts.

A check's runs are the scenarios the harness ran between its result and the previous one
(checks run one after another on 1 worker), so each scenario is billed to its check and
family. What a check spends outside its runs is judging (comparing traces, the oracle) and
building its scenarios. Scenarios that wait by design (a stalled rank, the peers of a lost
rank waiting out the collective timeout, deliberately slow writes) are listed with the wait
their scenario asks for. The report writers are then timed on the run's report.

    python -m benchmarks.bench_breakdown
"""

from __future__ import annotations

import functools
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from benchmarks.stats import Spread, interleaved, time_call
from trainspec.conformance import api, runner
from trainspec.conformance.report import json_io, junit, text
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.run.protocol import AdapterSpec, Description, PropertyOutcome
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import Trace
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import CheckResult, Report

__all__ = ["Breakdown", "FamilyCost", "RunRecord", "designed_wait", "measure"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    scenario: str
    kind: Literal["run", "property"]
    world_size: int
    seconds: float  # the run, its world already started
    world_start_s: float  # starting its world's workers first (0: the world was reused)
    wait: str  # the wait its scenario asks for by design, in words ("" when none)
    wait_s: float  # the seconds that wait must take (0 for a bound the run need not reach)


def designed_wait(scenario: Scenario, trace: Trace | None = None) -> tuple[str, float]:
    """The wait a scenario asks for by design, in words, and the seconds it must take ("", 0
    when none). A bound its run need not reach (peers of a killed rank waiting out the
    collective timeout: a broken connection may end them first) is named, counted 0."""
    crash = scenario.crash
    if crash is not None and crash.how == "stall":
        return f"rank {crash.rank} stalls {crash.stall_s:g} s", crash.stall_s
    if crash is not None and scenario.world_size > 1:
        bound = float(scenario.get("ddp.timeout_s"))
        return (f"rank {crash.rank} lost ({crash.how}): its peers may wait up to "
                f"ddp.timeout_s = {bound:g} s", 0.0)
    pause = scenario.task.slow_writes_s
    if pause:
        saves = 0 if trace is None or not trace.ranks else sum(
            1 for w in trace.ranks[0].writes if w.via == "torch.save")
        return (f"rank 0 pauses {pause:g} s before each of its {saves} checkpoint saves",
                pause * saves)
    return "", 0.0


class RecordingHarness(Harness):
    """The suite's harness, timing each scenario, each world's start and the description."""

    def __init__(self, adapter: AdapterSpec) -> None:
        super().__init__(adapter)
        self.records: list[RunRecord] = []
        self.describe_s = 0.0

    def describe(self, adapter: AdapterSpec | None = None) -> Description:
        began = time.perf_counter()
        try:
            return super().describe(adapter)
        finally:
            self.describe_s += time.perf_counter() - began

    def _start_world(self, size: int, adapter: AdapterSpec | None) -> float:
        """Seconds to start the world a run needs (0 when it is running already)."""
        if (adapter or self.adapter, size) in self.worlds:
            return 0.0
        began = time.perf_counter()
        for worker in self.world(size, adapter).workers:
            worker.wait_ready()
        return time.perf_counter() - began

    def run(self, scenario: Scenario, *, adapter: AdapterSpec | None = None,
            ckpt_root: Path | None = None, timeout_s: float | None = None) -> Trace:
        start_s = self._start_world(scenario.world_size, adapter)
        began = time.perf_counter()
        trace = super().run(scenario, adapter=adapter, ckpt_root=ckpt_root, timeout_s=timeout_s)
        wait, wait_s = designed_wait(scenario, trace)
        self.records.append(RunRecord(
            scenario=scenario.name, kind="run", world_size=scenario.world_size,
            seconds=time.perf_counter() - began, world_start_s=start_s, wait=wait,
            wait_s=wait_s))
        return trace

    def property(self, name: str, *, runner: str, max_examples: int,
                 adapter: AdapterSpec | None = None, max_runs: int = 0) -> PropertyOutcome:
        start_s = self._start_world(1, adapter)
        began = time.perf_counter()
        outcome = super().property(name, runner=runner, max_examples=max_examples,
                                   adapter=adapter, max_runs=max_runs)
        self.records.append(RunRecord(
            scenario=f"{name} ({max_examples} examples)", kind="property", world_size=1,
            seconds=time.perf_counter() - began, world_start_s=start_s, wait="", wait_s=0.0))
        return outcome


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilyCost:
    family: str
    checks: int
    check_s: float  # its checks' durations, summed
    runs: list[float]  # each scenario run's seconds (world start-up left out)
    properties: list[float]  # each property run's seconds (many generated runs each)
    world_start_s: float  # worlds started for its runs
    wait_s: float  # the designed waits of its scenarios, summed

    @property
    def judging_s(self) -> float:
        """Its checks' time outside their runs: judging, building scenarios, bookkeeping."""
        return self.check_s - sum(self.runs) - sum(self.properties) - self.world_start_s

    @property
    def median_run_s(self) -> float:
        return statistics.median(self.runs) if self.runs else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Breakdown:
    total_s: float  # the runner's whole run, in this process
    describe_s: float  # the first worker started, bound to the adapter and described
    families: list[FamilyCost]
    waits: list[tuple[str, RunRecord]]  # (check, its scenario) that waits by design
    verdict: str
    writers_s: dict[str, Spread]  # report writer -> seconds per call


def family_costs(owned: list[tuple[CheckResult, list[RunRecord]]]) -> list[FamilyCost]:
    """Each family's checks and the runs billed to them, in the registry's family order."""
    by_family: dict[str, list[tuple[CheckResult, list[RunRecord]]]] = {}
    for result, records in owned:
        by_family.setdefault(registry.family_of(result.clauses[0]), []).append((result, records))
    out = []
    for family in registry.FAMILIES:
        members = by_family.get(family, [])
        records = [r for _result, rs in members for r in rs]
        out.append(FamilyCost(
            family=family, checks=len(members),
            check_s=sum(result.duration_s for result, _rs in members),
            runs=[r.seconds for r in records if r.kind == "run"],
            properties=[r.seconds for r in records if r.kind == "property"],
            world_start_s=sum(r.world_start_s for r in records),
            wait_s=sum(r.wait_s for r in records)))
    return out


def _writers(report: Report, folder: Path) -> dict[str, Callable[[], object]]:
    return {
        "JSON (--report)": lambda: json_io.write_json(report, folder / "r.json"),
        "JUnit XML (--junit)": lambda: junit.write_junit(report, folder / "r.xml"),
        "Markdown (--markdown)": lambda: text.write_markdown(report, folder / "r.md"),
        "terminal table": lambda: text.format_table(report, color=False),
    }


def measure(*, writer_repeats: int = 20) -> Breakdown:
    plan = api.plan("reference")
    owned: list[tuple[CheckResult, list[RunRecord]]] = []
    harness = RecordingHarness(plan.target.adapter)
    with harness:

        def on_result(result: CheckResult) -> None:
            billed = sum(len(rs) for _r, rs in owned)
            owned.append((result, harness.records[billed:]))

        began = time.perf_counter()
        report = runner.run(plan, harness=harness, on_result=on_result)
        total = time.perf_counter() - began
        describe_s = harness.describe_s
    with tempfile.TemporaryDirectory(prefix="trainspec-bench-writers-") as tmp:
        writers = _writers(report, Path(tmp))
        timed = interleaved({name: functools.partial(time_call, fn)
                             for name, fn in writers.items()}, writer_repeats)
    summary = ", ".join(f"{n} {k}" for k, n in report.summary.items() if n)
    return Breakdown(
        total_s=total, describe_s=describe_s, families=family_costs(owned),
        waits=[(result.name, r) for result, rs in owned for r in rs if r.wait],
        verdict=f"{'conformant' if report.conformant else 'NOT conformant'} ({summary})",
        writers_s={name: Spread.of(v) for name, v in timed.items()})


def main() -> None:
    cost = measure()
    print(f"in-process whole check: {cost.total_s:.1f} s ({cost.verdict}); first worker "
          f"bound and described {cost.describe_s:.2f} s")
    for f in cost.families:
        print(f"  {f.family:5s} {f.checks:2d} checks {f.check_s:6.2f} s: {len(f.runs):3d} runs "
              f"{sum(f.runs):6.2f} s (median {f.median_run_s * 1e3:.0f} ms), "
              f"{len(f.properties)} property runs {sum(f.properties):5.2f} s, world start "
              f"{f.world_start_s:.2f} s, judging {f.judging_s:.2f} s, waits {f.wait_s:.1f} s")
    for check, r in cost.waits:
        print(f"  wait: {check} {r.scenario}: {r.wait}; ran {r.seconds:.2f} s")
    for name, spread in cost.writers_s.items():
        print(f"  {name}: {spread.scaled(1e3).fmt(2, ' ms')}")


if __name__ == "__main__":
    main()
