"""DIST: several ranks (docs/spec/dist.md), on a real torch.distributed world (gloo on CPU).

Scores are scripted per rank as (total, count) shards: ranks disagree, one rank has nothing to
count, one reports NaN. The pooled score is what every rank must see and decide on.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Literal

from trainspec.conformance.checks.base import CheckContext, CheckFailed, check
from trainspec.conformance.checks.common import (
    describe,
    expected_outcome,
    fmt_scores,
    label,
    match_decisions,
    ranks_seeing_rank0_files,
    weights_diff,
)
from trainspec.conformance.checks.failures import NotApplicable, RunBroke
from trainspec.conformance.run.records import Validation
from trainspec.conformance.run.scenario import (
    CrashHow,
    CrashPoint,
    Scenario,
    ScoreScript,
    Task,
)
from trainspec.conformance.run.trace import RankTrace, Trace

__all__: list[str] = []

NAN = math.nan
# per epoch, (total, count) for ranks 0..3; a world of N uses the first N. Pooled and
# mean-of-rank-means disagree on which epochs improve, at 2 ranks and at 4.
SHARDS: tuple[tuple[tuple[float, float], ...], ...] = (
    ((3.0, 1.0), (1.0, 3.0), (0.0, 0.0), (2.0, 2.0)),
    ((1.2, 1.0), (4.2, 3.0), (0.0, 0.0), (3.0, 2.0)),
    ((NAN, 1.0), (1.0, 1.0), (0.0, 0.0), (1.0, 1.0)),  # NaN on rank 0 only
    ((2.0, 2.0), (1.0, 1.0), (0.0, 0.0), (1.0, 1.0)),
)
EMPTY: tuple[tuple[float, float], ...] = ((0.0, 0.0),) * 4  # no rank contributes
_ODD_COUNTS = ((0.25, 1.0), (0.0, 0.0), (0.0, 0.0), (0.75, 3.0))


def _script(rows: tuple[tuple[tuple[float, float], ...], ...], n: int) -> ScoreScript:
    return ScoreScript(epochs=tuple(tuple(row[r % len(row)] for r in range(n)) for row in rows))


def dist_scenario(name: str, n: int, rows: tuple[tuple[tuple[float, float], ...], ...] = SHARDS,
                  *, task: Task | None = None, cfg: Mapping[str, object] | None = None
                  ) -> Scenario:
    s = Scenario(name=f"{name}-{n}r", scores=_script(rows, n), world_size=n,
                 task=task or Task())
    return s.with_config(**{"num_epochs": len(rows), "val.patience": 2,
                            "ddp.timeout_s": 20.0, **(cfg or {})})


def _ended(ctx: CheckContext, s: Scenario) -> Trace:
    """The trace, raising only when a rank hung (a timeout) or the harness broke."""
    trace = ctx.run(s)
    if any(r.status in ("timeout", "lost") for r in trace.ranks):
        raise RunBroke(trace, s)
    return trace


def _aftermath(trace: Trace) -> tuple[str, str]:
    """How a split verdict ended: the first rank that did not complete, and every such rank's
    traceback or stack (a rank left alone in a collective errors or hangs)."""
    broken = [r for r in trace.ranks if r.status != "completed"]
    if not broken:
        return "", ""
    first = broken[0]
    return (f"; rank {first.rank} then {first.status}: {first.error}",
            "\n".join(r.detail for r in broken))


def _stop_epoch(r: RankTrace) -> int | None:
    return next((v.epoch for v in r.validations if v.stop), None)


@check("DIST-1", requires={"multi_rank"}, multi_rank=True,
       covers=("DIST-1.1", "DIST-1.2", "DIST-1.3"))
def check_pooled_mean_is_sum_over_counts(ctx: CheckContext) -> str:
    """Every rank sees sum(totals) / sum(counts); NaN only when no rank counted anything."""
    n = ctx.world_size
    # last, counts that do not sum to a multiple of the ranks (1 + 0 on 2 ranks, an empty
    # shard past rank 0): a count pooled as an integer mean truncates there
    # (no early stop: every row is validated)
    s = dist_scenario("dist-pool", n, (SHARDS[0], EMPTY, SHARDS[2], _ODD_COUNTS),
                      cfg={"val.patience": None})
    trace = ctx.completed(s)
    for r in trace.ranks:
        for v in r.validations:
            want = s.scores.pooled(v.epoch, n)
            # float32 pooling is as correct as float64: equal to within float32's precision
            same = math.isclose(v.score, want, rel_tol=1e-6, abs_tol=1e-9) \
                or (math.isnan(v.score) and math.isnan(want))
            if not same:
                shards = s.scores.epochs[v.epoch]
                raise CheckFailed(
                    f"DIST-1: after epoch {v.epoch} rank {r.rank} pooled {v.score:.6g} from the "
                    f"(total, count) shards {list(shards)}; expected sum/sum = {want:.6g}"
                    + (" (nothing counted: NaN)" if math.isnan(want) else ""))
    return f"on {n} ranks every rank pooled sum(total)/sum(count), NaN when no rank counted"


@check("DIST-2", requires={"multi_rank", "early_stopping"}, multi_rank=True,
       covers=("DIST-2.1", "DIST-2.2"))
def check_ranks_stop_together(ctx: CheckContext) -> str:
    """Every rank stops at the same epoch and every rank's run ends."""
    n = ctx.world_size
    # a short collective timeout: a rank left training alone errors out quickly
    s = dist_scenario("dist-stop", n, tuple(((0.5 - 0.1 * e, 1.0),) * n for e in range(5)),
                      cfg={"val.patience": 1, "ddp.timeout_s": 8.0})
    # not _ended: a rank left waiting after a verdict every rank shared is DIST-2.2's failure
    trace = ctx.run(s)
    stops = {r.rank: _stop_epoch(r) for r in trace.ranks}
    trained = {r.rank: r.epochs_trained for r in trace.ranks}
    if len(set(stops.values())) > 1 or len({tuple(t) for t in trained.values()}) > 1:
        ending, detail = _aftermath(trace)
        raise CheckFailed(f"DIST-2: the ranks stopped after epochs {stops} and trained "
                          f"{trained}; expected one verdict at one epoch{ending}", detail)
    if not trace.completed:
        _left_waiting(trace, s, stops[0])
    match_decisions("DIST-2", s, trace, what="stop")
    return f"all {n} ranks stopped after epoch {stops[0]} and ended"


def _left_waiting(trace: Trace, s: Scenario, stop: int | None) -> None:
    """The ranks shared one stop verdict, yet a rank's run did not end: it was left waiting
    in a collective another rank never entered (a rank that hung or errored before any stop
    is the harness's or the run's matter, not this sentence's)."""
    if stop is None:
        raise RunBroke(trace, s)
    bad = next(r for r in trace.ranks if r.status != "completed")
    _, detail = _aftermath(trace)
    raise CheckFailed(f"DIST-2: every rank stopped after epoch {stop}, but the run did not end "
                      f"on every rank: rank {bad.rank} {bad.status} ({bad.error}). Leave the "
                      "loop on every rank at the same point, so no rank waits in a collective "
                      "the others never enter.", detail)


@check("DIST-3", requires={"multi_rank"}, multi_rank=True, covers=("DIST-3.1", "DIST-3.2"))
def check_ranks_agree_on_best(ctx: CheckContext) -> str:
    """Every rank agrees on each improvement and the best epoch, and holds the same weights.

    Judged across ranks, not against the oracle: whether the pooled decisions are the right
    ones is DIST-1's and DIST-6's matter (and a NaN among the scores NAN's), charged there.
    """
    n = ctx.world_size
    s = dist_scenario("dist-best", n)
    trace = _ended(ctx, s)
    if not trace.completed:
        raise RunBroke(trace, s)
    seen = {r.rank: [(v.epoch, v.improved) for v in r.validations] for r in trace.ranks}
    with ctx.case("one verdict for all ranks"):
        if len({tuple(v) for v in seen.values()}) > 1:
            raise CheckFailed(f"DIST-3: the ranks' (epoch, improved) were {seen}: one verdict "
                              f"per rank instead of one for all ({describe(s)})")
    r0 = trace.rank0
    for r in trace.ranks[1:]:
        with ctx.case(f"rank {r.rank}'s best weights"):
            diff = weights_diff(r0.best_model, r.best_model)
            if diff is not None:
                raise CheckFailed(f"DIST-3: rank {r.rank} holds other best weights than rank "
                                  f"0: {diff}")
        if r.tests and r0.tests:
            diff = weights_diff(r0.tests[0].weights, r.tests[0].weights)
            if diff is not None:
                raise CheckFailed(f"DIST-3: rank {r.rank}'s test pass saw other weights than "
                                  f"rank 0's: {diff}")
    best = [label(v.epoch) for v in r0.validations if v.improved]
    return f"{n} ranks agreed on improvements at {best} and held identical best weights"


@check("DIST-4", requires={"multi_rank", "checkpoint"}, multi_rank=True,
       covers=("DIST-4.1", "DIST-4.2"))
def check_only_rank_zero_writes(ctx: CheckContext) -> str:
    """Only rank 0 writes files, and each is complete before any rank starts the next epoch."""
    n = ctx.world_size
    # rank 0's writes are slowed down: a rank that does not wait sees a stale last.pt
    s = dist_scenario("dist-files", n, tuple(((0.1 * e, 1.0),) * n for e in range(3)),
                      task=Task(slow_writes_s=0.3), cfg={"val.patience": None})
    trace = ctx.completed(s)
    for r in trace.ranks[1:]:
        if r.writes:
            raise CheckFailed(f"DIST-4: rank {r.rank} wrote {r.writes[0].path}; only rank 0 may "
                              "write checkpoint files")
    for r in ranks_seeing_rank0_files(ctx, trace):
        for e in r.train_epochs[1:]:
            if e.last_file_epoch != e.epoch - 1:
                raise CheckFailed(
                    f"DIST-4: rank {r.rank} started epoch {e.epoch} while last.pt still said "
                    f"epoch {e.last_file_epoch}: the file of epoch {e.epoch - 1} was not "
                    "complete (rank 0's writes took 0.3 s). Wait for the write, then barrier.")
    return f"only rank 0 wrote; with 0.3 s writes no rank of {n} started an epoch early"


@check("DIST-6", requires={"multi_rank"}, multi_rank=True, covers=("DIST-6.1",),
       imports=("torchmetrics",))
def check_ranks_decide_as_one_rank(ctx: CheckContext) -> str:
    """Decisions on N ranks equal those on 1 rank over the same global data."""
    n = ctx.world_size
    for task in (Task(), Task(metric="torchmetrics")):
        many = dist_scenario(f"dist-vs-one-{task.metric}", n, task=task)
        one_rows = tuple(((sum(t for t, _ in row[:n]), sum(c for _, c in row[:n])),)
                         for row in many.scores.epochs)
        one = Scenario(name=f"dist-one-{task.metric}", scores=ScoreScript(epochs=one_rows),
                       config=many.config, task=Task())
        with ctx.case(f"scored through {task.metric}"):
            one_trace = ctx.completed(one).rank0
            many_trace = _ended(ctx, many)
            want = [(v.epoch, v.improved, v.stop) for v in one_trace.validations]
            for r in many_trace.ranks:
                seen = [(v.epoch, v.improved, v.stop) for v in r.validations]
                if seen != want or r.status != "completed":
                    pooled = [one.scores.pooled(e, 1) for e in range(len(one_rows))]
                    raise CheckFailed(
                        f"DIST-6: scored through {task.metric}, rank {r.rank} of {n} decided "
                        f"(epoch, improved, stop) {seen}; one rank over the same data: {want} "
                        f"(global scores {fmt_scores(pooled)})")
    return f"{n} ranks decided as 1 rank over the same data, via reduce_mean and torchmetrics"


def _local_scenario(n: int, group: Literal["trainer", "launch"] = "trainer") -> Scenario:
    """Scores that differ by rank, handed to the trainer unpooled: rank 0 keeps improving,
    the other ranks never do after epoch 0. ``group``: who makes the process group (the
    trainer, or the launch before the trainer is built)."""
    rows = tuple(tuple(((0.1 * (e + 1) if r == 0 else 0.5 - 0.1 * e), 1.0) for r in range(n))
                 for e in range(4))
    s = dist_scenario("dist-local", n, rows, task=Task(metric="local"),
                      cfg={"val.patience": 1, "ddp.timeout_s": 8.0})
    if group == "trainer":
        return s
    return s.replace(name=f"dist-local-{group}-group",
                     task=dataclasses.replace(s.task, group=group))


# the process group's two makers: the trainer itself, and the launch (a script that calls
# init_process_group before building the trainer, which must then use that group)
_GROUPS: tuple[tuple[Literal["trainer", "launch"], str], ...] = (
    ("trainer", "the trainer made the process group"),
           ("launch", "inside a process group made before the trainer"))


def _local_cases(ctx: CheckContext, clause: str, what: str,
                 pick: Callable[[Validation], tuple[int, bool]],
                 more: Callable[[Trace, Scenario, str], None] | None = None) -> None:
    """Judge the rank-local scores' run in each case of :data:`_GROUPS`."""
    for group, case in _GROUPS:
        with ctx.case(case):
            s = _local_scenario(ctx.world_size, group)
            # not ctx.completed: a rank left hanging after the ranks disagreed is this
            # clause's failure (its evidence is the verdicts recorded before the hang)
            trace = ctx.run(s)
            where = "" if group == "trainer" else f"{case}, "
            if group != "trainer":
                _refused(trace, case)
            _disagreement(clause, trace, s, what, pick, where)
            if more is not None:
                more(trace, s, where)


def _refused(trace: Trace, case: str) -> None:
    """Not judged: a trainer that will not be built inside a group that already exists
    (every rank raised before its first validation) has no way to run that case."""
    if all(r.status in ("raised", "exited") and not r.validations for r in trace.ranks):
        raise NotApplicable(f"{case}: the trainer does not run inside a process group made "
                            f"before it (rank 0: {trace.rank0.error[:300]})")


def _disagreement(clause: str, trace: Trace, s: Scenario, what: str,
                  pick: Callable[[Validation], tuple[int, bool]], where: str = "") -> None:
    seen = {r.rank: [pick(v) for v in r.validations] for r in trace.ranks}
    split = len({tuple(v) for v in seen.values()}) > 1
    if not split and any(r.status in ("timeout", "lost") for r in trace.ranks):
        raise RunBroke(trace, s)  # hung with no split seen
    if split or not trace.completed:
        ending, detail = _aftermath(trace)
        raise CheckFailed(f"{clause}: {where}handed rank-local scores, the ranks' (epoch, "
                          f"{what}) were {seen}: one verdict per rank instead of one for "
                          f"all{ending}", detail)


@check("DIST-2", requires={"multi_rank", "early_stopping"}, multi_rank=True,
       covers=("DIST-2.1", "DIST-2.2"))
def check_ranks_stop_together_on_rank_local_scores(ctx: CheckContext) -> str:
    """Handed scores that differ by rank (unpooled), every rank still stops alike: in a
    process group the trainer made, and in one made before it."""
    _local_cases(ctx, "DIST-2", "stop", lambda v: (v.epoch, v.stop))
    return f"handed rank-local scores, all {ctx.world_size} ranks took one stop verdict"


@check("DIST-3", requires={"multi_rank"}, multi_rank=True,
       covers=("DIST-3.1", "DIST-3.2", "DIST-3.3"))
def check_ranks_agree_on_best_on_rank_local_scores(ctx: CheckContext) -> str:
    """Handed scores that differ by rank (unpooled), every rank agrees on the best: in a
    process group the trainer made, and in one made before it."""

    def rank0_decides(trace: Trace, s: Scenario, where: str) -> None:
        # one verdict for all is not enough: it must be the one rank 0's score calls for
        alone = s.replace(world_size=1)  # the oracle on rank 0's (total, count) alone
        mine = [s.scores.pooled(e, 1) for e in range(len(s.scores.epochs))]
        want = [(d.epoch, d.improved) for d in expected_outcome(alone).decisions]
        seen = [(v.epoch, v.improved) for v in trace.rank0.validations]
        if seen and seen != want:  # none at all: the runs did not carry the scenario out
            raise CheckFailed(f"DIST-3: {where}handed rank-local scores, the ranks took "
                              f"(epoch, improved) {seen}; rank 0's scores {fmt_scores(mine)} "
                              f"call for {want}: the score compared must be rank 0's, "
                              "broadcast to every rank")
        same_weights(trace, where)

    def same_weights(trace: Trace, where: str = "") -> None:
        r0 = trace.rank0
        for r in trace.ranks[1:]:
            diff = weights_diff(r0.best_model, r.best_model)
            if diff is not None:
                raise CheckFailed(f"DIST-3: {where}handed rank-local scores, rank {r.rank} "
                                  f"kept other best weights than rank 0: {diff}")

    _local_cases(ctx, "DIST-3", "improved", lambda v: (v.epoch, v.improved), rank0_decides)
    return f"handed rank-local scores, all {ctx.world_size} ranks agreed on each improvement"


@check("DIST-5", requires={"multi_rank"}, multi_rank=True, covers=("DIST-5.1",))
def check_a_lost_rank_fails_every_rank_in_time(ctx: CheckContext) -> str:
    """A rank that dies or stalls surfaces as an error on every other rank within the bound."""
    n = ctx.world_size
    bounds = []
    for how in ("sigkill", "stall"):
        with ctx.case(f"a rank lost by {how}"):
            trace, began, timeout_s = _lose_a_rank(ctx, how)
            bounds.append(timeout_s)
            for r in trace.ranks[: n - 1]:
                ended = r.ended_at
                if r.status == "completed" or ended is None:
                    raise CheckFailed(
                        f"DIST-5: rank {n - 1} {'died' if how == 'sigkill' else 'stalled'} at "
                        f"epoch 1 and rank {r.rank} {r.status} without an error "
                        f"(ddp.timeout_s={timeout_s})", r.detail)
                if ended - began > timeout_s + 2.0:
                    raise CheckFailed(
                        f"DIST-5: rank {n - 1} {'died' if how == 'sigkill' else 'stalled'} at "
                        f"epoch 1 and rank {r.rank} errored only {ended - began:.1f} s later; "
                        f"ddp.timeout_s={timeout_s} bounds every collective. Pass the timeout to "
                        "init_process_group.")
    return f"a dead and a stalled rank each failed the other {n - 1} rank(s) within " \
        f"ddp.timeout_s ({', '.join(f'{b} s' for b in bounds)})"


def _lose_a_rank(ctx: CheckContext, how: CrashHow) -> tuple[Trace, float, float]:
    """The last rank dies or stalls at epoch 1; the trace, when that began, and the bound used.

    A short bound keeps the check fast; should a loaded machine make even the rendezvous miss
    it, the scenario is staged once more with a longer one. A stall outlasts the window the
    other ranks must error in (the bound and 2 s) by 1.5 s at least, so a rank that only
    errors once the stalled rank gives up is seen as late; it ends early once every other
    rank has ended (the harness's stall), so a stall costs what the bound costs.
    """
    n = ctx.world_size
    for timeout_s in (1.0, 4.0):
        stall_s = max(3 * timeout_s, timeout_s + 3.5) if how == "stall" else 0.0
        crash = CrashPoint(where="train_start", epoch=1, how=how, rank=n - 1, stall_s=stall_s)
        s = dist_scenario(f"dist-lost-{how}", n, tuple(((0.5, 1.0),) * n for _ in range(3)),
                          cfg={"ddp.timeout_s": timeout_s, "val.patience": None}) \
            .replace(crash=crash)
        trace = ctx.runs.run(s, timeout_s=stall_s + 15.0)
        crashes = trace.ranks[n - 1].crashes
        if crashes:
            return trace, crashes[0].t, timeout_s
    if trace.completed:
        raise NotApplicable(f"rank {n - 1} never reached epoch 1, so it could not be lost "
                            f"there; the run trained {trace.ranks[n - 1].epochs_trained}")
    raise RunBroke(trace, s)
