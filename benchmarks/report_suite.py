"""The suite's sections of docs/benchmarks.md: wall time, multi-rank cost, the matrix."""

from __future__ import annotations

from benchmarks.bench_matrix import ARGS as MATRIX_ARGS
from benchmarks.bench_matrix import TARGET_S as MATRIX_TARGET_S
from benchmarks.bench_matrix import MatrixCost
from benchmarks.bench_suite import (
    ARMS,
    BASELINE,
    ONE_CLAUSE,
    ONE_CLAUSE_ARGS,
    RATIO_AIMS,
    SuiteCost,
)
from benchmarks.bench_suite import TARGETS_S as SUITE_TARGETS_S
from benchmarks.bench_world import REUSED_TARGET_S, WorldCost
from benchmarks.report_common import SECTIONS, met, ms, table, x
from benchmarks.stats import Spread

__all__ = ["WORLD_TARGET", "matrix_rows", "matrix_section", "suite_rows", "suite_section",
           "world_rows", "world_section"]

WORLD_TARGET = 5.0  # fresh launch / reused world, at least

_SUITE_ROWS = {
    "1 worker": "whole check of the reference, 1 worker",
    "-n 2": "whole check of the reference, `-n 2`",
    ONE_CLAUSE: f"one clause, `trainspec check {' '.join(ONE_CLAUSE_ARGS)}` (a subprocess)",
}


def suite_rows(s: SuiteCost) -> list[list[str]]:
    rows = []
    for arm, what in _SUITE_ROWS.items():
        wall, target = s.wall_s[arm], SUITE_TARGETS_S[arm]
        rows.append([what, wall.fmt(2 if arm == ONE_CLAUSE else 1, " s"), f"≤ {target:g} s",
                     met(wall.median <= target)])
    for arm, aim in RATIO_AIMS.items():
        ratio = s.to_baseline[arm]
        what = "whole check, 1 worker" if arm == "1 worker" else "one clause"
        rows.append([f"{what} / `python -c \"import torch\"` (same run)", x(ratio),
                     f"{'about' if arm == '1 worker' else 'under'} {aim:g}x",
                     met(ratio.median <= aim)])
    return rows


def world_rows(w: WorldCost) -> list[list[str]]:
    reused = Spread.of(w.reused_s)
    ratio = Spread.of([f / u for f, u in zip(w.fresh_s, w.reused_s, strict=True)])
    return [["one DIST scenario on the reused 2-rank world", ms(reused, 0),
             f"≤ {REUSED_TARGET_S * 1e3:.0f} ms", met(reused.median <= REUSED_TARGET_S)],
            ["multi-rank: fresh launch / reused world, one DIST scenario", x(ratio, 1),
             f"≥ {WORLD_TARGET:.0f}x", met(ratio.median >= WORLD_TARGET)]]


def matrix_rows(m: MatrixCost | None) -> list[list[str]]:
    what = f"`trainspec {' '.join(MATRIX_ARGS)}` over every installed framework"
    if m is None:
        return [[what, "not measured in this run (`--with-matrix`)",
                 f"≤ {MATRIX_TARGET_S / 60:g} min", "n/a"]]
    return [[what, f"{m.wall_s:.0f} s (1 run)", f"≤ {MATRIX_TARGET_S / 60:g} min",
             met(m.wall_s <= MATRIX_TARGET_S)]]


def suite_section(s: SuiteCost) -> list[str]:
    one = s.wall_s["1 worker"]
    startup = one.median - s.checks_total_s["1 worker"].median
    lines = [
        f"## {SECTIONS['suite']}. Suite wall time",
        "",
        "Four arms, interleaved, each a new interpreter timed from start to exit (start-up, "
        "imports and worker processes included): `python -m trainspec check --report FILE "
        f"[-n 2]` on the reference, every clause; `python -m trainspec check "
        f"{' '.join(ONE_CLAUSE_ARGS)}`; and `python -c \"import torch\"`, the floor of any "
        f"torch-based tool, measured in the same run. Verdicts: {'; '.join(sorted(s.verdicts))}.",
        "",
        *table(["arm", "wall", "report's duration_s", "sum of check durations"],
               [[arm, s.wall_s[arm].fmt(1, " s"), s.report_s[arm].fmt(1, " s"),
                 s.checks_total_s[arm].fmt(1, " s")] for arm in ARMS]
               + [[arm, s.wall_s[arm].fmt(2, " s"), "", ""] for arm in (ONE_CLAUSE, BASELINE)]),
        f"`-n 2` / 1 worker: **{x(s.ratio)}** wall. Against `import torch`: the whole check "
        f"**{x(s.to_baseline['1 worker'])}**, one clause **{x(s.to_baseline[ONE_CLAUSE])}**. "
        f"With 1 worker about {startup:.1f} s of the wall time is outside any check "
        f"(start-up, imports, worker processes, the report: section {SECTIONS['profile']} "
        "takes it apart). Under `-n 2` check durations overlap and include waiting for the "
        "shared cores, so their sum exceeds the wall time.",
        "",
        "Per clause family (sum of its checks' durations; a check listed under several "
        "clauses counted once):",
        "",
        *table(["family", *ARMS],
               [[f, *(s.family_s[f][arm].fmt(2, " s") for arm in ARMS)] for f in s.family_s]),
        "The 5 slowest checks (1 worker):",
        "",
        *table(["check", "family", "duration"],
               [[f"`{name}`", family, spread.fmt(2, " s")]
                for name, family, spread in s.slowest]),
    ]
    lines += _slowest_notes(s)
    missed = [arm for arm in _SUITE_ROWS if s.wall_s[arm].median > SUITE_TARGETS_S[arm]]
    if missed:
        lines += [f"Target missed for {', '.join(missed)}: section {SECTIONS['profile']} "
                  "says where the time goes.", ""]
    return lines


# why the slowest checks are slow, from reading them; shown only while they rank there
_SLOW_CHECK_NOTES = {
    "check_a_lost_rank_fails_every_rank_in_time":
        "waits by design: one scenario stalls a rank for 3 x ddp.timeout_s to prove its "
        f"peers error within the bound (section {SECTIONS['profile']} times it)",
    "check_pooled_mean_is_sum_over_counts":
        "the first multi-rank check: it pays the start-up of the reused 2-rank world "
        f"(section {SECTIONS['world']}), which every later DIST check is spared",
    "check_only_rank_zero_writes":
        "waits by design: rank 0 pauses before each checkpoint save, so that a rank that "
        "does not wait for it would read a stale `last.pt`",
}


def _slowest_notes(s: SuiteCost) -> list[str]:
    notes = [f"`{name}` {_SLOW_CHECK_NOTES[name]}" for name, _f, _d in s.slowest
             if name in _SLOW_CHECK_NOTES]
    return [f"Of the slowest: {'; '.join(notes)}.", ""] if notes else []


def world_section(w: WorldCost) -> list[str]:
    ratio = Spread.of([f / u for f, u in zip(w.fresh_s, w.reused_s, strict=True)])
    reused = Spread.of(w.reused_s)
    return [
        f"## {SECTIONS['world']}. Multi-rank cost",
        "",
        f"`benchmarks/bench_world.py`: one DIST scenario ({w.world_size} ranks, gloo, the "
        "reference through the probe) on the suite's reused world against the same scenario "
        "on a world started for it (`--fresh-processes`: new worker processes, forked from "
        "the warm template since workers are: no interpreter start, no import, no warm-up; "
        "a launcher per scenario pays those too, as the world's start-up below), "
        "interleaved.",
        "",
        *table(["arm", "one scenario"], [
            ["reused world", ms(reused, 0)],
            ["fresh launch", ms(Spread.of(w.fresh_s), 0)],
        ]),
        f"Reused: **{ms(reused, 0)}** (target ≤ {REUSED_TARGET_S * 1e3:.0f} ms: "
        f"{'met' if reused.median <= REUSED_TARGET_S else 'missed'}). Fresh / reused: "
        f"**{x(ratio, 1)}** (target ≥ {WORLD_TARGET:.0f}x: "
        f"{'met' if ratio.median >= WORLD_TARGET else 'missed'}). Starting the reused world "
        f"(its {w.world_size} worker processes, until ready) cost {w.startup_s:.2f} s once "
        "(1 sample); the suite pays it once per run, and every multi-rank scenario after "
        f"that costs the reused time. Section {SECTIONS['profile']} times the start-up over "
        "several worlds.",
        "",
    ]


def matrix_section(m: MatrixCost | None) -> list[str]:
    head = [f"## {SECTIONS['matrix']}. The matrix", ""]
    if m is None:
        return [*head, f"Not measured in this run: `trainspec {' '.join(MATRIX_ARGS)}` takes "
                "minutes, so `--quick` leaves it out unless `--with-matrix` is given; the full "
                "run always measures it.", ""]
    rows = [[t.name, f"{t.duration_s:.1f} s", t.verdict] for t in m.targets]
    rows += [[name, "not installed", why] for name, why in m.not_installed.items()]
    return [
        *head,
        f"`benchmarks/bench_matrix.py`: `python -m trainspec {' '.join(MATRIX_ARGS)} --out "
        "DIR` over every installed framework, as a user runs it, measured once (it takes "
        f"minutes): **{m.wall_s:.0f} s** wall (target ≤ {MATRIX_TARGET_S:.0f} s: "
        f"{'met' if m.wall_s <= MATRIX_TARGET_S else 'missed'}). Each target's own duration "
        "(from `matrix.json`), checked one after another:",
        "",
        *table(["target", "duration", "verdicts"], rows),
        f"Outside the targets' checks (start-up, imports, writing the matrix): "
        f"{m.outside_targets_s:.1f} s.",
        "",
    ]
