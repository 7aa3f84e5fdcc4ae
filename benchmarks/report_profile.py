"""The profile breakdown section of docs/benchmarks.md: where a check's time goes."""

from __future__ import annotations

from benchmarks.bench_breakdown import Breakdown
from benchmarks.bench_startup import IMPORT_COMMANDS, WATCHED, StartupCost
from benchmarks.bench_suite import BASELINE, SuiteCost
from benchmarks.importtime import ImportProfile
from benchmarks.report_common import SECTIONS, ms, seconds, table

__all__ = ["profile_section"]


def profile_section(startup: StartupCost | None, breakdown: Breakdown | None,
                    suite: SuiteCost | None) -> list[str]:
    lines = [
        f"## {SECTIONS['profile']}. Profile breakdown",
        "",
        "Each part measured on its own: from outside where a user's command shows it (the "
        "interpreter, `-X importtime`), otherwise by an in-process call of the suite's own "
        "code: `benchmarks/bench_startup.py` starts workers through the suite's "
        "`WorkerProcess` and worlds through its `Harness`; `benchmarks/bench_breakdown.py` "
        "runs the whole check of the reference (1 worker, 2 ranks) through `runner.run` with a "
        "harness that times every scenario and every world it starts, then times the report "
        "writers on its report.",
        "",
    ]
    if startup is not None:
        lines += _startup(startup, suite)
        lines += _imports(startup)
    if breakdown is not None:
        lines += _families(breakdown)
        lines += _waits(breakdown)
        lines += _writers(breakdown)
    if startup is not None and breakdown is not None and suite is not None:
        lines += _budget(startup, breakdown, suite)
    return lines


def _startup(s: StartupCost, suite: SuiteCost | None) -> list[str]:
    world = (s.world_ready_s.median + s.world_first_run_s.median
             - s.world_next_run_s.median)
    rows = [["interpreter: `python -c pass`", ms(s.interpreter_s, 0), "subprocess"]]
    if suite is not None:
        rows.append(["`python -c \"import torch\"`", ms(suite.wall_s[BASELINE], 0),
                     f"subprocess (section {SECTIONS['suite']})"])
    rows += [
        ["a worker, until ready (torch imported, warm-up: the first optimizer step)",
         ms(s.worker_start_s, 0), "`WorkerProcess` until its ready line"],
        ["then bound to the reference's adapter and described", ms(s.worker_bind_s, 0),
         "bind + describe request"],
        ["a 2-rank world (gloo): its workers ready", ms(s.world_ready_s, 0),
         "`Harness.world(2)`, both started at once"],
        ["its first DIST scenario", ms(s.world_first_run_s, 0),
         "pays the process group's first connection"],
        ["the same scenario again", ms(s.world_next_run_s, 0), "the reused world"],
        ["**world start-up**: ready + first scenario - next one", f"{world * 1e3:.0f} ms",
         "from the medians"],
    ]
    return ["### Start-up", "", *table(["part", "time", "how"], rows)]


def _imports(s: StartupCost) -> list[str]:
    lines = ["### Imports per process", "",
             "`python -X importtime` (its own bookkeeping inflates the times a little): the "
             f"main process of `trainspec {' '.join(IMPORT_COMMANDS['one clause'])}`"
             + (" and of the whole check" if "main process, whole check" in s.imports else "")
             + ", and a worker (the same environment switch, `PYTHONPROFILEIMPORTTIME`, set "
             "for a `WorkerProcess`: its imports until ready and bound). A root import is one "
             "the process made itself, with all it pulled in; by package, each module's own "
             "time summed under its top-level package.", ""]
    summary = [[process, str(p.modules), f"{p.total_s:.2f} s",
                *("yes" if p.has(w) else "no" for w in WATCHED)]
               for process, p in s.imports.items()]
    lines += table(["process", "modules", "import time", *(f"imports {w}" for w in WATCHED)],
                   summary)
    for process, p in s.imports.items():
        lines += [f"{process}, the largest imports:", "", *_import_rows(p)]
    return lines


def _import_rows(p: ImportProfile) -> list[str]:
    rows = []
    for i in range(max(len(p.roots), len(p.packages))):
        root = p.roots[i] if i < len(p.roots) else ("", 0.0)
        package = p.packages[i] if i < len(p.packages) else ("", 0.0)
        rows.append([f"`{root[0]}`" if root[0] else "", f"{root[1] * 1e3:.0f} ms",
                     f"`{package[0]}`" if package[0] else "", f"{package[1] * 1e3:.0f} ms"])
    return table(["root import", "cumulative", "package", "own time"], rows)


def _families(b: Breakdown) -> list[str]:
    rows = []
    for f in b.families:
        rows.append([
            f.family, str(f.checks), f"{f.check_s:.2f} s",
            f"{len(f.runs)} ({sum(f.runs):.2f} s)", f"{f.median_run_s * 1e3:.0f} ms",
            f"{len(f.properties)} ({sum(f.properties):.2f} s)" if f.properties else "",
            f"{f.world_start_s:.2f} s" if f.world_start_s else "",
            f"{f.judging_s:.2f} s", f"{f.wait_s:.2f} s" if f.wait_s else ""])
    total_runs = sum(len(f.runs) for f in b.families)
    return [
        "### Per-scenario cost by family", "",
        f"The in-process whole check took {b.total_s:.1f} s ({b.verdict}), 1 sample; before "
        f"any check, the first worker was started, bound and described in "
        f"{b.describe_s:.2f} s. {total_runs} scenario runs; a property run is one child "
        "judging many generated runs. A world started for a run is billed to the family "
        "that first needed it, outside the run's own time; outside runs is what a check "
        "does itself (building scenarios, judging traces, the oracle).", "",
        *table(["family", "checks", "check time", "scenario runs", "median run",
                "property runs", "world start", "outside runs", "designed waits"], rows)]


def _waits(b: Breakdown) -> list[str]:
    if not b.waits:
        return ["### Waits by design", "", "No scenario of this run waits by design.", ""]
    rows = [[f"`{check}`", f"`{r.scenario}`", r.wait, f"{r.wait_s:.2f} s",
             f"{r.seconds:.2f} s"] for check, r in b.waits]
    return ["### Waits by design", "",
            "Scenarios whose config asks for a wait (from the scenario itself: a stalled "
            "rank, a lost rank's peers and their collective timeout, paused writes), with "
            "the wait the run must take and what it took:", "",
            *table(["check", "scenario", "waits for", "must take", "the run took"], rows)]


def _writers(b: Breakdown) -> list[str]:
    rows = [[name, ms(spread, 2)] for name, spread in b.writers_s.items()]
    return ["### Report writing", "",
            "Each writer on the in-process run's report (42 clauses), per call, interleaved:",
            "", *table(["writer", "per call"], rows)]


def _budget(s: StartupCost, b: Breakdown, suite: SuiteCost) -> list[str]:
    """The parts against the totals they belong to, each total from the same run as its
    parts: the runner's (the in-process run) and what lies outside it (section 1's runs)."""
    inside = [
        ("first worker started, bound, described", b.describe_s),
        ("2-rank world started", sum(f.world_start_s for f in b.families)),
        (f"scenario runs (of which designed waits {sum(f.wait_s for f in b.families):.1f} s)",
         sum(sum(f.runs) for f in b.families)),
        ("property runs", sum(sum(f.properties) for f in b.families)),
        ("checks outside their runs", sum(f.judging_s for f in b.families)),
    ]
    imports = s.imports.get("main process, whole check") or s.imports["main process, one clause"]
    outside = [
        ("interpreter start-up", s.interpreter_s.median),
        ("main-process imports (`-X importtime`)", imports.total_s),
        ("report writing (JSON + terminal table)",
         b.writers_s["JSON (--report)"].median + b.writers_s["terminal table"].median),
    ]
    return [
        "### Where the whole check's wall time goes (1 worker)", "",
        f"Inside the runner: the in-process run ({b.total_s:.1f} s, `runner.run` from start "
        "to end), its parts from that same run:", "",
        *_shares(inside, b.total_s, "harness set-up and close, scheduling"),
        f"Outside the runner: section {SECTIONS['suite']}'s 1-worker runs, wall time minus "
        "the report's own duration_s, run by run: "
        f"{suite.outside_runner_s['1 worker'].fmt(2, ' s')}; its parts measured apart:", "",
        *_shares(outside, suite.outside_runner_s["1 worker"].median,
                 "the plan, the interpreter's exit, noise between runs"),
    ]


def _shares(parts: list[tuple[str, float]], total: float, rest: str) -> list[str]:
    summed = sum(value for _what, value in parts)
    rows = [[what, seconds(value), f"{value / total:.0%}"] for what, value in parts]
    rows += [["**sum of the parts**", seconds(summed), f"{summed / total:.0%}"],
             [f"not attributed ({rest})", seconds(total - summed),
              f"{(total - summed) / total:.0%}"],
             ["**total**", seconds(total), "100%"]]
    return table(["part", "time", "share"], rows)
