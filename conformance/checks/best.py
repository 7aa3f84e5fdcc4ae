"""BEST: best-model selection (docs/spec/best.md)."""

from __future__ import annotations

from trainspec.conformance.checks.base import CheckContext, CheckFailed, check, property_check
from trainspec.conformance.checks.common import (
    changed,
    make_scenario,
    match_decisions,
    weights_diff,
)
from trainspec.conformance.run.records import FileSnapshot

__all__: list[str] = []


@check("BEST-1")
def check_best_needs_a_strictly_better_score(ctx: CheckContext) -> str:
    """A tie is no improvement; only strictly better scores, in the configured direction."""
    cases = [
        make_scenario("best-ties-max", [0.5, 0.5, 0.4, 0.6, 0.6]),
        make_scenario("best-ties-min", [0.5, 0.5, 0.6, 0.4, 0.4], cfg={"val.minimize": True}),
    ]
    for s in cases:
        match_decisions("BEST-1", s, ctx.completed(s), what="improved")
    return "ties and worse scores were not improvements, maximizing and minimizing"


@check("BEST-2")
def check_best_weights_are_a_copy(ctx: CheckContext) -> str:
    """The best weights are a snapshot: training after the improvement leaves them unchanged."""
    s = make_scenario("best-copy", [0.9, 0.1, 0.2, 0.3])
    r = ctx.completed(s).rank0
    best_val = r.validations[0]
    final = r.final_weights
    if final is None or not changed(best_val.weights, final):
        raise CheckFailed("BEST-2: the scenario's training did not change the weights after "
                          "epoch 0, so the copy cannot be judged")
    diff = weights_diff(best_val.weights, r.best_model)
    if diff is not None:
        moved = "" if weights_diff(final, r.best_model) else " (they equal the final weights: " \
            "the best model aliases the live parameters)"
        raise CheckFailed(f"BEST-2: best_model at the end differs from the weights validated "
                          f"at epoch 0, the best epoch: {diff}{moved}")
    return "best_model at the end equals the epoch-0 weights, 3 epochs of training later"


def _identity(f: FileSnapshot | None) -> tuple[int, int, int | None] | None:
    return None if f is None else (f.mtime_ns, f.size, f.epoch)


@check("BEST-3", requires={"checkpoint"})
def check_best_file_follows_improvements(ctx: CheckContext) -> str:
    """best.pt is written on each improvement and only then, with that epoch's weights."""
    s = make_scenario("best-file", [0.3, 0.5, 0.4, 0.6, 0.6])
    r = ctx.completed(s).rank0
    starts = {e.epoch: e.best_file for e in r.train_epochs}
    writes = 0
    # best.pt as it stood when epoch e began, and when the next began (or the run ended): a
    # trainer may write it during validation or later in the same epoch
    for v in r.validations:
        if v.phase != "epoch":
            continue
        before = starts.get(v.epoch)
        after = starts.get(v.epoch + 1, None if r.end is None else r.end.best_file)
        changed = _identity(after) != _identity(before)
        if v.improved:
            if after is None or after.error:
                raise CheckFailed(f"BEST-3: epoch {v.epoch} improved but best.pt "
                                  f"{'is missing' if after is None else 'does not load: '}"
                                  f"{'' if after is None else after.error}")
            if not changed:
                raise CheckFailed(f"BEST-3: epoch {v.epoch} improved but best.pt was not "
                                  "rewritten")
            if after.epoch != v.epoch:
                raise CheckFailed(f"BEST-3: best.pt written for the improvement at epoch "
                                  f"{v.epoch} says epoch {after.epoch}")
            step = next((e.end_step for e in r.train_epochs if e.epoch == v.epoch), None)
            if after.step != step:
                raise CheckFailed(f"BEST-3: best.pt for epoch {v.epoch} says train_step "
                                  f"{after.step}, expected {step}")
            diff = weights_diff(v.weights, after.weights)
            if diff is not None:
                raise CheckFailed(f"BEST-3: best.pt for epoch {v.epoch} holds other weights "
                                  f"than the ones validated: {diff}")
            writes += 1
        elif changed:
            raise CheckFailed(f"BEST-3: epoch {v.epoch} did not improve but best.pt was "
                              f"{'written' if before is None else 'rewritten'} (now epoch "
                              f"{None if after is None else after.epoch})")
    return f"best.pt rewritten at each of {writes} improvements only, with epoch, step, weights"


@check("BEST-4", requires={"test_pass"})
def check_test_sees_best_weights(ctx: CheckContext) -> str:
    """The test pass evaluates the best weights, or the final ones when nothing improved."""
    s = make_scenario("best-test", [0.9, 0.1, 0.2])
    r = ctx.completed(s).rank0
    if not r.tests:
        raise CheckFailed("BEST-4: the test pass did not run")
    diff = weights_diff(r.validations[0].weights, r.tests[0].weights)
    if diff is not None:
        raise CheckFailed(f"BEST-4: the test pass saw other weights than those of epoch 0, "
                          f"the best: {diff}")
    none = make_scenario("best-test-none", [float("nan")] * 3)
    r = ctx.completed(none).rank0
    diff = weights_diff(r.final_weights, r.tests[0].weights if r.tests else None)
    if diff is not None:
        raise CheckFailed(f"BEST-4: every validation scored NaN, so no improvement could be "
                          f"recorded, yet the test pass saw other weights than the final ones: "
                          f"{diff}")
    return "test saw epoch 0's (best) weights; with no improvement, the final weights"


@check("BEST-1")
def check_best_selection_matches_the_oracle(ctx: CheckContext) -> str:
    """Generated runs with ties: improvement flags and the best weights equal the oracle's."""
    return property_check(ctx, "improvements", "BEST-1", max_examples=ctx.max_examples // 2)
