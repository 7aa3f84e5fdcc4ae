"""FT: finetune (docs/spec/ft.md): a new run that starts from a checkpoint's weights."""

from __future__ import annotations

from trainspec.conformance.checks.base import CheckContext, CheckFailed, check
from trainspec.conformance.checks.chains import SourceRun, from_checkpoint, source_run, with_load
from trainspec.conformance.checks.common import (
    describe,
    item_difference,
    make_scenario,
    weights_diff,
)
from trainspec.conformance.run.scenario import Scenario, Task
from trainspec.conformance.run.trace import RankTrace, Trace, Weights

__all__: list[str] = []

NAN = float("nan")


def _source(ctx: CheckContext, clause: str) -> SourceRun:
    # ends on two non-improvements: a finetune that keeps the counter has 1 validation left
    return source_run(ctx, clause, make_scenario("ft-source", [0.9, 0.8, 0.85],
                                                 cfg={"val.patience": 3}))


def _finetune(ctx: CheckContext, clause: str, source: SourceRun, s: Scenario, *,
              resume: bool, model_only: bool = False, name: str) -> RankTrace:
    """Rank 0 of ``s`` started from the source run's last checkpoint: the trainer's own load
    always runs, and when it raises its error is the evidence."""
    run = with_load(s, source.path, resume=resume, model_only=model_only, name=name)
    how = "the ckpt.model_only=true run from" if model_only else \
        "the finetune (ckpt.resume=false) from"
    return from_checkpoint(ctx, clause, run, source.file, how).rank0


def _target(task: Task | None = None) -> Scenario:
    return make_scenario("ft", [NAN, 0.3, 0.2, 0.1, 0.05], cfg={"val.patience": 3},
                         task=task)


def _saved_weights(source: Trace) -> tuple[Weights | None, str]:
    """The weights the source run's newest last checkpoint was written with, and which file.

    Those of the end of the epoch the file names (the start of the next epoch's training, or
    the final weights after the last epoch), so that a finetune is judged against the file it
    loaded: a last checkpoint that lags behind the run is CKPT-1's matter, not a finetune's.
    """
    r = source.rank0
    last = source.newest("last")
    if last is None or last.epoch is None:
        return r.final_weights, "the source run's last checkpoint, at the run's end"
    which = f"{last.name}, epoch {last.epoch}"
    following = [e for e in r.train_epochs if e.epoch == last.epoch + 1]
    if following:
        return following[0].state.weights, which
    return r.final_weights, which


def _fresh_start(clause: str, ctx: CheckContext, how: str, s: Scenario, source: Trace,
                 r: RankTrace) -> None:
    """Epoch 0, step 0, the checkpoint's weights, and the optimizer of a run from scratch."""
    if not r.train_epochs:
        raise CheckFailed(f"{clause}: the {how} trained no epoch")
    first = r.train_epochs[0]
    with ctx.case("epoch 0, step 0"):
        if first.epoch != 0 or first.start_step != 0:
            raise CheckFailed(f"{clause}: the {how} started at epoch {first.epoch}, train_step "
                              f"{first.start_step}; expected epoch 0, step 0 (a new run)")
    with ctx.case("the checkpoint's weights"):
        saved, which = _saved_weights(source)
        diff = weights_diff(saved, first.state.weights)
        if diff is not None:
            raise CheckFailed(f"{clause}: the {how} did not start from the weights of the "
                              f"checkpoint it loaded ({which}): {diff}")
    with ctx.case("a fresh optimizer and scheduler"):
        scratch = ctx.completed(s.replace(name="ft-scratch")).rank0.train_epochs[0]
        found = item_difference(scratch.state, first.state)
        if found is not None:
            item, diff = found
            raise CheckFailed(f"{clause}: the {how} started with a restored {item} state, "
                              f"not a fresh one ({diff}); a finetune restores weights only")


@check("FT-1", requires={"finetune", "checkpoint"},
       covers=("FT-1.1", "FT-1.2", "FT-1.3", "LOOP-1.2"))
def check_finetune_starts_a_new_run(ctx: CheckContext) -> str:
    """ckpt.resume=false loads the weights and starts at epoch 0, step 0, fresh optimizer."""
    source = _source(ctx, "FT-1")
    s = _target()
    r = _finetune(ctx, "FT-1", source, s, resume=False, name="ft-1")
    _fresh_start("FT-1", ctx, "finetune (ckpt.resume=false)", s, source.trace, r)
    return "epoch 0, step 0, the checkpoint's weights, optimizer and scheduler as from scratch"


@check("FT-2", requires={"finetune", "resume", "checkpoint"}, covers=("FT-2.1",))
def check_model_only_restores_weights_only(ctx: CheckContext) -> str:
    """ckpt.model_only=true restores the weights and nothing else, even with ckpt.resume."""
    source = _source(ctx, "FT-2")
    s = _target()
    r = _finetune(ctx, "FT-2", source, s, resume=True, model_only=True, name="ft-2")
    _fresh_start("FT-2", ctx, "ckpt.model_only=true run (with ckpt.resume=true)", s,
                 source.trace, r)
    return "with resume=true and model_only=true: epoch 0, step 0, fresh optimizer/scheduler"


@check("FT-3", requires={"finetune", "checkpoint"}, covers=("FT-3.1",))
def check_finetune_accepts_a_new_optimizer(ctx: CheckContext) -> str:
    """A finetune runs without error when optimizer or scheduler no longer match the
    checkpoint's: another class, or the same class with other parameter groups.

    Judged on "runs without error" alone: where the finetune starts and what it restores are
    FT-1's and FT-2's matter, charged there once.
    """
    source = _source(ctx, "FT-3")
    cases = {"SGD with two param groups and an extra scheduler":
             Task(optimizer="sgd", extra_param_group=True, extra_scheduler=True),
             "Adam (the checkpoint's class) with two param groups":
             Task(optimizer="adam", extra_param_group=True)}
    for i, (what, task) in enumerate(cases.items()):
        with ctx.case(what):
            # ckpt.resume=false: the model_only route to a finetune is FT-2's matter
            _finetune(ctx, "FT-3", source, _target(task), resume=False, name=f"ft-3-{i}")
    return f"finetuned from a one-group Adam checkpoint with {'; with '.join(cases)}"


@check("FT-4", requires={"finetune", "checkpoint", "early_stopping"}, covers=("FT-4.1", "FT-4.2"))
def check_finetune_tracks_best_afresh(ctx: CheckContext) -> str:
    """A finetune's best tracking and patience start fresh, not from the checkpoint's: it
    decides exactly as the same scores do in a run from scratch.

    Judged against the trainer's own run from scratch, not the oracle, so how the trainer
    treats a NaN score or counts patience stays NAN's and PAT's matter, charged there once.
    Two score scripts: finite scores all below the checkpoint's best 0.9 (a kept incumbent
    refuses them), and a NaN first (a kept counter, at 2 of 3, runs out at once).
    """
    source = _source(ctx, "FT-4")

    def decisions(r: RankTrace) -> list[tuple[int, bool, bool]]:
        return [(v.epoch, v.improved, v.stop) for v in r.validations]

    for i, scores in enumerate(([0.3, 0.2, 0.1, 0.05, 0.04], [NAN, 0.3, 0.2, 0.1, 0.05])):
        target = make_scenario("ft", scores, cfg={"val.patience": 3})
        with ctx.case(["scores all below the checkpoint's best", "a NaN first"][i]):
            finetune = _finetune(ctx, "FT-4", source, target, resume=False, name="ft-4")
            scratch = ctx.completed(target.replace(name="ft-scratch")).rank0
            got, fresh = decisions(finetune), decisions(scratch)
            if got != fresh:
                raise CheckFailed(
                    f"FT-4: the finetune decided (epoch, improved, stop) {got}; the same scores "
                    f"from scratch {fresh} ({describe(target)}; the checkpoint's run had best "
                    "0.9 and ended on 2 non-improvements). A finetune starts the best score, its "
                    "epoch and the patience counter fresh")
    return "decided as runs from scratch do, not from the checkpoint's best 0.9 and its " \
        "patience counter at 2 of 3"
