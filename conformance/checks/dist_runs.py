"""Clauses of other families judged on several ranks (docs/spec/res.md, docs/spec/dbg.md,
docs/spec/ckpt.md): a resume, a debug run and a preemption on a real torch.distributed world,
every rank judged."""

from __future__ import annotations

from trainspec.conformance.checks.base import CheckContext, CheckFailed, check
from trainspec.conformance.checks.chains import combined_decisions, interrupt_and_resume
from trainspec.conformance.checks.ckpt import exit_status, exited_143
from trainspec.conformance.checks.common import weights_diff
from trainspec.conformance.checks.res import lost_state
from trainspec.conformance.run.scenario import CrashPoint, RankScores, Scenario, ScoreScript
from trainspec.conformance.run.trace import Trace

__all__: list[str] = []

_KILLED = CrashPoint(where="train_start", epoch=3)  # where every resume here is interrupted


def _rows(n: int, scores: list[float]) -> tuple[RankScores, ...]:
    return tuple(((v, 1.0),) * n for v in scores)


def _res_scenario(n: int) -> Scenario:
    return Scenario(name=f"res-dist-{n}r", world_size=n,
                    scores=ScoreScript(epochs=_rows(n, [0.3, 0.8, 0.5, 0.4, 0.35]))) \
        .with_config(**{"num_epochs": 5, "val.patience": 3, "ddp.timeout_s": 20.0})


@check("RES-1", requires={"multi_rank", "resume", "checkpoint"}, multi_rank=True,
       covers=("RES-1.1", "RES-1.3"))
def check_resume_continues_under_several_ranks(ctx: CheckContext) -> str:
    """Killed and resumed on N ranks, every rank continues at k+1."""
    n = ctx.world_size
    pair = interrupt_and_resume(ctx, "RES-1", _res_scenario(n), _KILLED)
    k = pair.ckpt_epoch
    for r in pair.resumed.ranks:
        trained = r.epochs_trained
        if trained != list(range(k + 1, k + 1 + len(trained))) or not trained:
            raise CheckFailed(f"RES-1: on {n} ranks, resumed from epoch {k}, rank {r.rank} "
                              f"trained epochs {trained}; expected {k + 1}, {k + 2}, ...")
    return f"on {n} ranks: every rank resumed at epoch {k + 1}"


@check("RES-3", requires={"multi_rank", "resume", "checkpoint"}, multi_rank=True,
       covers=("RES-3.1", "RES-3.2", "RES-3.3"))
def check_resume_decides_alike_under_several_ranks(ctx: CheckContext) -> str:
    """Killed and resumed on N ranks, every rank decides as the uninterrupted run."""
    n = ctx.world_size
    s = _res_scenario(n)
    want = [(v.epoch, v.improved, v.stop) for v in ctx.completed(s).rank0.validations]
    pair = interrupt_and_resume(ctx, "RES-3", s, _KILLED)
    for r in pair.resumed.ranks:
        seen = combined_decisions(pair, r.rank)
        if seen != want:
            raise CheckFailed(f"RES-3: on {n} ranks, killed at the start of epoch 3 and "
                              f"resumed, rank {r.rank} decided {seen}; uninterrupted: {want}")
    return f"on {n} ranks: same decisions on every rank as the uninterrupted run"


def _debug_trace(ctx: CheckContext) -> Trace:
    n = ctx.world_size
    s = Scenario(name=f"dbg-dist-{n}r", world_size=n,
                 scores=ScoreScript(epochs=_rows(n, [0.5, 0.5]))) \
        .with_config(**{"num_epochs": 2, "debug": True, "grad_accum_steps": 4,
                        "ddp.timeout_s": 20.0})
    return ctx.completed(s)


@check("DBG-1", requires={"multi_rank", "debug"}, multi_rank=True, covers=("DBG-1.1", "DBG-1.2"))
def check_debug_truncates_under_several_ranks(ctx: CheckContext) -> str:
    """Debug on N ranks: one batch per split on every rank."""
    for r in _debug_trace(ctx).ranks:
        e = r.train_epochs[0] if r.train_epochs else None
        if e is None or (e.batches, e.loader_len) != (1, 1):
            raise CheckFailed(f"DBG-1: in debug mode on {ctx.world_size} ranks, rank {r.rank} "
                              f"trained {None if e is None else e.batches} batches with len() "
                              f"{None if e is None else e.loader_len}; expected 1 and 1")
    return f"debug on {ctx.world_size} ranks: one batch and len() 1 on every rank"


@check("DBG-4", requires={"multi_rank", "debug", "grad_accum"}, multi_rank=True,
       covers=("DBG-4.1", "DBG-4.2"))
def check_debug_steps_under_several_ranks(ctx: CheckContext) -> str:
    """Debug on N ranks with grad_accum_steps=4: every rank takes an optimizer step."""
    for r in _debug_trace(ctx).ranks:
        steps = r.train_epochs[0].optimizer_steps if r.train_epochs else None
        if not steps:
            raise CheckFailed(f"DBG-4: in debug mode on {ctx.world_size} ranks with "
                              f"grad_accum_steps=4, rank {r.rank} took no optimizer step")
    return f"debug on {ctx.world_size} ranks: an optimizer step on every rank"


@check("RES-4", requires={"multi_rank", "resume", "checkpoint"}, multi_rank=True,
       covers=("RES-4.1", "RES-4.2", "RES-4.3"))
def check_resume_is_bitwise_exact_under_several_ranks(ctx: CheckContext) -> str:
    """Killed and resumed on N ranks, every rank's RNG states where it resumes, and its final
    weights, equal the uninterrupted run's."""
    n = ctx.world_size
    s = _res_scenario(n)
    whole = ctx.completed(s)
    pair = interrupt_and_resume(ctx, "RES-4", s, _KILLED)
    for r in pair.resumed.ranks:
        w = whole.ranks[r.rank]
        final = weights_diff(w.final_weights, r.final_weights)
        lost = lost_state(w, r)
        if lost is not None or final is not None:
            raise CheckFailed(f"RES-4: on {n} ranks, killed at the start of epoch 3 and "
                              f"resumed, rank {r.rank}'s "
                              + (f"state where it resumed differed: {lost}" if lost else
                                 f"final weights differ from the uninterrupted run ({final})"))
    return f"on {n} ranks: every rank's RNG states and final weights as the uninterrupted run's"


@check("CKPT-5", requires={"multi_rank", "resume", "checkpoint"}, multi_rank=True,
       covers=("CKPT-5.5",))
def check_sigterm_to_one_rank_stops_every_rank(ctx: CheckContext) -> str:
    """SIGTERM to the last of N ranks during epoch 1 (the others get none, as when the signal
    reaches them on either side of an epoch's end): every rank stops after epoch 1 and exits
    with 143, and every rank of the resumed run goes on at epoch 2."""
    n = ctx.world_size
    # a rank left alone in a collective errs within the bound (DIST-5): a short one
    s = _res_scenario(n).replace(name=f"ckpt-sigterm-{n}r").with_config(**{"ddp.timeout_s": 8.0})
    crash = CrashPoint(where="train_end", epoch=1, how="sigterm", rank=n - 1)
    pair = interrupt_and_resume(ctx, "CKPT-5", s, crash)
    with ctx.case("every rank stops after the epoch and exits with 143"):
        for r in pair.interrupted.ranks:
            if r.epochs_trained != [0, 1] or not exited_143(r):
                raise CheckFailed(
                    f"CKPT-5: on {n} ranks, SIGTERM to rank {n - 1} during epoch 1: rank "
                    f"{r.rank} trained epochs {r.epochs_trained} and {exit_status(r)}; "
                    "expected every rank to stop after epoch 1 and exit with status 143. The "
                    "ranks must agree on a preemption as on an early stop: reduce the SIGTERM "
                    "flag over the ranks at the epoch's end (any rank's flag stops them all)")
    with ctx.case("every rank of the resumed run goes on at epoch 2"):
        k = pair.ckpt_epoch
        for r in pair.resumed.ranks:
            if r.epochs_trained[:1] != [k + 1]:
                raise CheckFailed(f"CKPT-5: on {n} ranks, resumed from the last.pt of epoch {k} "
                                  f"left after SIGTERM, rank {r.rank} trained "
                                  f"{r.epochs_trained}; expected {k + 1}, {k + 2}, ...")
    return f"on {n} ranks, SIGTERM to rank {n - 1} in epoch 1: every rank stopped after epoch " \
        f"1 with status 143, and resumed at epoch {pair.ckpt_epoch + 1}"
