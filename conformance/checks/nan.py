"""NAN: non-finite scores (docs/spec/nan.md)."""

from __future__ import annotations

from trainspec.conformance.checks.base import CheckContext, CheckFailed, check, property_check
from trainspec.conformance.checks.common import (
    make_scenario,
    match_decisions,
    match_own_stop_rule,
    weights_diff,
)

__all__: list[str] = []

NAN, INF = float("nan"), float("inf")


@check("NAN-1", covers=("NAN-1.1",))
def check_nonfinite_scores_never_improve(ctx: CheckContext) -> str:
    """NaN, +inf and -inf are never improvements, maximizing or minimizing."""
    cases = [
        make_scenario("nan-never-max", [0.5, NAN, INF, -INF, 0.4]),
        make_scenario("nan-never-min", [0.5, NAN, -INF, INF, 0.6], cfg={"val.minimize": True}),
    ]
    for s in cases:
        with ctx.case(s.name):
            trace = ctx.completed(s)
            match_decisions("NAN-1", s, trace, what="improved")
            r = trace.rank0
            diff = weights_diff(r.validations[0].weights, r.best_model)
            if diff is not None:
                raise CheckFailed(f"NAN-1: after non-finite scores best_model is no longer "
                                  f"epoch 0's weights ({s.name}): {diff}")
    return "nan, inf and -inf were never improvements in either direction; best stayed epoch 0"


@check("NAN-2", covers=("NAN-2.1",))
def check_leading_nonfinite_scores_leave_best_clean(ctx: CheckContext) -> str:
    """Non-finite scores before the first finite one do not poison the incumbent."""
    cases = [
        make_scenario("nan-first-max", [NAN, INF, 0.1, 0.05]),
        make_scenario("nan-first-min", [NAN, -INF, 5.0, 6.0], cfg={"val.minimize": True}),
    ]
    for s in cases:
        with ctx.case(s.name):
            trace = ctx.completed(s)
            match_decisions("NAN-2", s, trace, what="improved")
            r = trace.rank0
            diff = weights_diff(r.validations[2].weights, r.best_model)
            if diff is not None:
                raise CheckFailed(f"NAN-2: best_model is not the weights of epoch 2, the first "
                                  f"finite score ({s.name}): {diff}")
    return "the first finite score (epoch 2) improved after leading nan/inf, both directions"


@check("NAN-3", requires={"early_stopping"}, covers=("NAN-3.1", "NAN-3.2", "NAN-3.3", "NAN-3.4"))
def check_nonfinite_score_counts_once_for_patience(ctx: CheckContext) -> str:
    """A non-finite score is one non-improving validation: no crash, refill or instant stop.

    Stops are judged against the trainer's own stop rule (a trainer that stops late is
    PAT-1's matter)."""
    cases = [
        make_scenario("nan-patience-3", [0.5, NAN, NAN, 0.4, 0.3, 0.2],
                      cfg={"val.patience": 3}),
        make_scenario("nan-patience-refill", [0.5, NAN, 0.6, NAN, 0.1, 0.05],
                      cfg={"val.patience": 2}),
        make_scenario("nan-patience-inf", [0.5, -INF, INF, 0.7, 0.1],
                      cfg={"val.patience": 2, "val.minimize": False}),
    ]
    stops = []
    for s in cases:
        with ctx.case(s.name):
            trace = ctx.completed(s)
            stops.append(str(match_own_stop_rule(ctx, "NAN-3", s, trace).stop_epoch))
    return f"non-finite scores counted once each; stops after epochs {', '.join(stops)}, as " \
        "the oracle says"


@check("NAN-1", "NAN-2", covers=("NAN-1.1", "NAN-2.1"))
def check_nonfinite_runs_match_the_oracle(ctx: CheckContext) -> str:
    """Generated runs opening with NaN/inf: improvements and best weights equal the oracle's."""
    return property_check(ctx, "nonfinite", "NAN-2", max_examples=ctx.max_examples // 2)
