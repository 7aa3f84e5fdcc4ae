"""PAT: patience and early stopping (docs/spec/pat.md)."""

from __future__ import annotations

from trainspec.conformance.checks.base import CheckContext, CheckFailed, check, property_check
from trainspec.conformance.checks.common import (
    make_scenario,
    match_decisions,
    match_own_stop_rule,
    weights_diff,
)
from trainspec.conformance.run.trace import RankTrace

__all__: list[str] = []


@check("PAT-1", requires={"early_stopping"},
       covers=("PAT-1.1", "PAT-1.2", "PAT-1.3", "PAT-1.4", "LOOP-2.4", "LOOP-2.5"))
def check_patience_stops_exactly_on_time(ctx: CheckContext) -> str:
    """The run stops right after the p-th consecutive counted non-improvement."""
    cases = [
        make_scenario("pat-stop-2", [0.5, 0.4, 0.3, 0.2, 0.1], cfg={"val.patience": 2}),
        make_scenario("pat-stop-1", [0.5, 0.6, 0.6, 0.7], cfg={"val.patience": 1}),
        make_scenario("pat-stop-min", [0.5, 0.6, 0.7, 0.8, 0.9],
                      cfg={"val.patience": 3, "val.minimize": True}),
    ]
    stops = []
    for s in cases:
        with ctx.case(s.name):
            outcome = match_decisions("PAT-1", s, ctx.completed(s), what="stop")
            stops.append(str(outcome.stop_epoch))
    if ctx.can("val_first", case="a NaN at val.first with val.patience=1"):
        # the val.first validation counts too: a NaN there exhausts patience 1 before training
        s = make_scenario("pat-stop-first", [0.5, 0.6], first=float("nan"),
                          cfg={"val.patience": 1})
        with ctx.case(s.name):
            trace = ctx.completed(s)
            _judge_stop_at_first(trace.rank0)
            match_decisions("PAT-1", s, trace, what="stop")
            stops.append("none (stopped at val.first)")
    return f"stopped after epochs {', '.join(stops)}, as p consecutive non-improvements dictate"


def _judge_stop_at_first(r: RankTrace) -> None:
    """val.first scored NaN with val.patience=1: it must exhaust patience and end the run."""
    first = next((v for v in r.validations if v.phase == "first"), None)
    if first is None:
        return  # the schedule comparison that follows names the missing validation
    if not first.stop:
        raise CheckFailed("PAT-1: the val.first validation scored nan with val.patience=1 and "
                          "did not exhaust patience; it counts like any other validation, so "
                          "the run should stop before training")
    if r.epochs_trained:
        raise CheckFailed(f"PAT-1: the val.first validation exhausted patience, yet the run "
                          f"went on to train epochs {r.epochs_trained}; expected none (a stop "
                          "at val.first ends the run before training)")


@check("PAT-2", requires={"early_stopping"}, covers=("PAT-2.1",))
def check_improvement_refills_patience(ctx: CheckContext) -> str:
    """An improvement refills the counter to p.

    Judged against the trainer's own stop rule: where a run stops after a refill is compared
    with where the trainer stops without one, so a trainer that stops late is charged under
    PAT-1 alone."""
    # scores worse to the end after epoch 4: a trainer stopping late still stops in the run
    s = make_scenario("pat-refill", [0.5, 0.4, 0.6, 0.5, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2],
                      cfg={"val.patience": 2})
    outcome = match_own_stop_rule(ctx, "PAT-2", s, ctx.completed(s))
    return f"improvements at epochs 2 and 4 refilled patience; stopped after epoch " \
        f"{outcome.stop_epoch}"


@check("PAT-3", requires={"early_stopping", "start_patience"},
       covers=("PAT-3.1", "PAT-3.2"))
def check_start_patience_delays_counting(ctx: CheckContext) -> str:
    """Non-improvements below val.start_patience are not counted; improvements still are.

    An improvement during the warm-up counts for best tracking like any other (PAT-3.2)."""
    # epochs 0 and 1 improve during the warm-up: epoch 1 is the best model, epoch 2 stops
    best = make_scenario("pat-start-best", [0.5, 0.9, 0.3, 0.2],
                         cfg={"val.patience": 1, "val.start_patience": 2})
    with ctx.case(best.name):
        trace = ctx.completed(best)
        _judge_warm_up_best(trace.rank0)
        match_decisions("PAT-3", best, trace)
    s = make_scenario("pat-start", [0.5, 0.4, 0.3, 0.2, 0.1],
                      cfg={"val.patience": 1, "val.start_patience": 2})
    stop = None
    with ctx.case(s.name):
        stop = match_decisions("PAT-3", s, ctx.completed(s), what="stop").stop_epoch
    return f"with start_patience=2, patience=1 the run stopped after epoch " \
        f"{stop}; epoch 1's improvement, in the warm-up, was the best"


def _judge_warm_up_best(r: RankTrace) -> None:
    """pat-start-best: the warm-up's improvements (epochs 0 and 1) are tracked as any other."""
    warm = {v.epoch: v for v in r.validations if v.phase == "epoch" and v.epoch < 2}
    for epoch, score in ((0, 0.5), (1, 0.9)):
        v = warm.get(epoch)
        if v is not None and not v.improved:
            raise CheckFailed(f"PAT-3: the validation after epoch {epoch} scored {score} and "
                              "was not taken as an improvement; an improvement before "
                              "val.start_patience=2 still counts for best tracking")
    if 1 in warm:
        diff = weights_diff(warm[1].weights, r.best_model)
        if diff is not None:
            raise CheckFailed(f"PAT-3: best_model is not the weights of epoch 1, the best "
                              f"score, which came before val.start_patience=2: {diff}")


@check("PAT-4", covers=("PAT-4.1", "PAT-4.2", "PAT-4.3"))
def check_unset_patience_never_stops(ctx: CheckContext) -> str:
    """With val.patience unset the run never stops early, with val.first too (where the
    target has it)."""
    cases = [make_scenario("pat-unset", [0.5, 0.4, 0.3, 0.2, 0.1])]
    if ctx.can("val_first", case="the val.first case"):
        cases.append(make_scenario("pat-unset-first", [0.5, 0.4, 0.3, 0.2], first=0.9))
    for s in cases:
        with ctx.case(s.name):
            r = ctx.completed(s).rank0
            n = s.get("num_epochs")
            if r.epochs_trained != list(range(n)) or any(v.stop for v in r.validations):
                stops = [v.epoch for v in r.validations if v.stop]
                raise CheckFailed(f"PAT-4: with val.patience unset ({s.name}) the run trained "
                                  f"{r.epochs_trained} of {n} epochs and stopped after "
                                  f"{stops}; expected every epoch and no stop")
    with_first = "with and without val.first" if len(cases) > 1 else "without val.first"
    return f"no early stop with patience unset, {with_first}, scores always worse"


@check("PAT-5", covers=("PAT-5.1", "PAT-1.4", "PAT-3.4", "LOOP-2.4", "LOOP-2.5"))
def check_decisions_match_the_oracle(ctx: CheckContext) -> str:
    """Improvement flags, stop epoch and best epoch equal the oracle's, for generated runs."""
    return property_check(ctx, "decisions", "PAT-5", max_examples=ctx.max_examples)
