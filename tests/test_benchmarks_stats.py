"""The benchmark helpers that compute or parse: nothing here is timed.

The statistics (medians, paired ratios, interleaving), the ``-X importtime`` reader, the
designed-wait classification and the per-family billing of the whole-check breakdown, and the
run-length rows the report keeps from one run to the next.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest

from benchmarks import importtime
from benchmarks.bench_breakdown import RunRecord, designed_wait, family_costs
from benchmarks.machine import Machine
from benchmarks.report import Results, RunLength, earlier_run_lengths, render
from benchmarks.stats import Spread, interleaved, paired_ratios
from trainspec.conformance.run.scenario import CrashPoint, Scenario, Task
from trainspec.conformance.spec.results import CheckResult

IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:       189 |        189 |   _distutils_hack
import time:       914 |       1103 | site
[1/1] passed  check_loop 0.12s
import time:       149 |        149 |       _json
import time:       300 |        448 |     json.scanner
import time:       295 |        743 |   json.decoder
import time:       200 |       1943 | json
import time:      1000 |       1000 | torch.nn
"""


def test_spread_and_paired_ratios() -> None:
    spread = Spread.of([3.0, 1.0, 2.0])
    assert (spread.median, spread.low, spread.high, spread.count) == (2.0, 1.0, 3.0, 3)
    assert spread.fmt(1, " s") == "2.0 s [1.0, 3.0]"
    assert Spread.of([2.0]).fmt(1) == "2.0 (1 run)"
    ratios = paired_ratios([2.0, 6.0], [1.0, 2.0])
    assert (ratios.low, ratios.high) == (2.0, 3.0)


def test_interleaved_rotates_the_order_of_the_arms() -> None:
    order: list[str] = []

    def arm(name: str) -> float:
        order.append(name)
        return float(len(order))

    samples = interleaved({n: functools.partial(arm, n) for n in "abc"}, 3)
    assert order == list("abcbcacab")
    assert samples["a"] == [1.0, 6.0, 8.0]


def test_importtime_reads_levels_and_skips_other_lines() -> None:
    entries = importtime.parse(IMPORTTIME.splitlines())
    assert [(e.module, e.level) for e in entries] == [
        ("_distutils_hack", 1), ("site", 0), ("_json", 3), ("json.scanner", 2),
        ("json.decoder", 1), ("json", 0), ("torch.nn", 0)]
    assert entries[5].cumulative_s == 1943e-6


def test_importtime_profile_ranks_roots_and_packages() -> None:
    prof = importtime.profile(importtime.parse(IMPORTTIME.splitlines()), top=2)
    assert prof.modules == 7
    assert prof.total_s == pytest.approx((189 + 914 + 149 + 300 + 295 + 200 + 1000) / 1e6)
    assert [name for name, _s in prof.roots] == ["json", "site"]
    assert prof.packages[0] == ("torch", 1000e-6)
    assert prof.packages[1] == ("site", 914e-6)  # json's modules: 795 us, third
    assert prof.has("torch")
    assert prof.has("json")
    assert not prof.has("hypothesis")
    assert not prof.has("tor")


def test_designed_waits_count_only_what_a_run_must_wait() -> None:
    plain = Scenario(name="plain")
    assert designed_wait(plain) == ("", 0.0)
    stall = Scenario(name="s", world_size=2, crash=CrashPoint(
        where="train_start", epoch=1, how="stall", rank=1, stall_s=4.5))
    assert designed_wait(stall)[1] == 4.5
    lost = Scenario(name="k", world_size=2, crash=CrashPoint(where="train_start", epoch=1,
                                                             how="sigkill", rank=1))
    words, seconds = designed_wait(lost.with_config(**{"ddp.timeout_s": 1.5}))
    assert seconds == 0.0
    assert "1.5 s" in words
    alone = Scenario(name="one rank", crash=CrashPoint(where="train_start", epoch=1))
    assert designed_wait(alone) == ("", 0.0)
    slow = Scenario(name="w", task=Task(slow_writes_s=0.3))
    assert designed_wait(slow)[1] == 0.0  # no trace: no saves counted


def _record(seconds: float, *, kind: str = "run", start: float = 0.0,
            wait: float = 0.0) -> RunRecord:
    return RunRecord(scenario="s", kind="property" if kind == "property" else "run",
                     world_size=1, seconds=seconds, world_start_s=start,
                     wait="w" if wait else "", wait_s=wait)


def test_family_costs_bill_runs_to_their_checks_family() -> None:
    loop = CheckResult(name="a", clauses=("LOOP-1",), outcome="passed", evidence="",
                       duration_s=1.0)
    dist = CheckResult(name="b", clauses=("DIST-5",), outcome="passed", evidence="",
                       duration_s=7.0)
    costs = {f.family: f for f in family_costs([
        (loop, [_record(0.25), _record(0.5)]),
        (dist, [_record(4.75, wait=4.5), _record(1.0, kind="property", start=1.0)])])}
    assert costs["LOOP"].checks == 1
    assert costs["LOOP"].runs == [0.25, 0.5]
    assert costs["LOOP"].judging_s == pytest.approx(0.25)
    assert costs["DIST"].properties == [1.0]
    assert costs["DIST"].world_start_s == 1.0
    assert costs["DIST"].judging_s == pytest.approx(0.25)
    assert costs["DIST"].wait_s == 4.5
    assert costs["PAT"].checks == 0
    assert costs["PAT"].median_run_s == 0.0


def _results(*, is_quick: bool, earlier: dict[str, RunLength]) -> Results:
    machine = Machine(cores=2, cpu_model="cpu", memory_gib=1.0, load_avg_1m=0.0, python="3",
                      torch="2", torch_threads=1, trainspec="0", temp_fs="ext4")
    return Results(command="python -m benchmarks" + (" --quick" if is_quick else ""),
                   is_quick=is_quick, started="2026-01-02 03:04 UTC", elapsed_s=90.0,
                   machine=machine, load_after=0.0, earlier=earlier)


def test_a_run_keeps_the_other_modes_run_length() -> None:
    full = render(_results(is_quick=False, earlier={}))
    kept = earlier_run_lengths(full)
    assert list(kept) == ["full"]
    assert kept["full"].minutes == "1.5 min"
    assert kept["full"].when == "2026-01-02 03:04 UTC"
    quick = render(_results(is_quick=True, earlier=kept))
    rows = earlier_run_lengths(quick)
    assert set(rows) == {"quick", "full"}
    assert "| full | `python -m benchmarks` | 1.5 min | 2026-01-02 03:04 UTC (an earlier run) |" \
        in quick.splitlines()
    assert rows["quick"].command == "`python -m benchmarks --quick`"
    subset = render(dataclasses.replace(_results(is_quick=True, earlier=rows), is_subset=True))
    assert earlier_run_lengths(subset) == rows  # a run of some benchmarks is no mode's length
