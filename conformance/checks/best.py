"""BEST: best-model selection (docs/spec/best.md)."""

from __future__ import annotations

from trainspec.conformance.checks.base import CheckContext, CheckFailed, check, property_check
from trainspec.conformance.checks.common import (
    changed,
    make_scenario,
    match_decisions,
    weights_diff,
)
from trainspec.conformance.run.records import FileSnapshot, Validation
from trainspec.conformance.run.trace import RankTrace

__all__: list[str] = []


@check("BEST-1", covers=("BEST-1.1", "BEST-1.2", "BEST-1.3"))
def check_best_needs_a_strictly_better_score(ctx: CheckContext) -> str:
    """A tie is no improvement; only strictly better scores, in the configured direction."""
    cases = [
        make_scenario("best-ties-max", [0.5, 0.5, 0.4, 0.6, 0.6]),
        make_scenario("best-ties-min", [0.5, 0.5, 0.6, 0.4, 0.4], cfg={"val.minimize": True}),
    ]
    for s in cases:
        with ctx.case(s.name):
            match_decisions("BEST-1", s, ctx.completed(s), what="improved")
    return "ties and worse scores were not improvements, maximizing and minimizing"


@check("BEST-2", covers=("BEST-2.1",))
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


@check("BEST-3", requires={"checkpoint"},
       covers=("BEST-3.1", "BEST-3.2", "BEST-3.3", "BEST-3.4", "BEST-3.5", "BEST-3.6"))
def check_best_file_follows_improvements(ctx: CheckContext) -> str:
    """best.pt is written on each improvement and only then, with that epoch's weights."""
    cases = [make_scenario("best-file", [0.3, 0.5, 0.4, 0.6, 0.6]),
             # improvements at epochs 1 and 3, which ckpt.every_n_epochs=2 skips: best.pt is
             # written on every improvement, not only when the periodic save fires
             make_scenario("best-file-periodic", [0.1, 0.3, 0.2, 0.4, 0.5],
                           cfg={"ckpt.every_n_epochs": 2})]
    if ctx.can("val_first", case="the val.first case"):
        # val.first improves on nothing yet, so it writes best.pt, for epoch -1; nothing after
        cases.append(make_scenario("best-file-first", [0.1, 0.2, 0.4], first=0.5))
    writes = []
    for s in cases:
        r = None
        with ctx.case(s.name):  # the run itself; then each of its validations, a case each
            r = ctx.completed(s).rank0
        if r is not None:
            writes.append(_judge_best_writes(ctx, s.name, r))
    return f"best.pt rewritten at each of {' and '.join(map(str, writes))} improvements only " \
        "(with ckpt.every_n_epochs=2 too), with epoch (-1 at val.first), step, weights"


def _judge_best_writes(ctx: CheckContext, name: str, r: RankTrace) -> int:
    """Every validation against best.pt before and after it, each a case (a slip at one
    improvement hides none at another); the count of improvements."""
    starts = {e.epoch: e.best_file for e in r.train_epochs}
    ends = {e.epoch: e.end_step for e in r.train_epochs}
    end_file = None if r.end is None else r.end.best_file
    writes = 0
    # best.pt as it stood when epoch e began, and when the next began (or the run ended): a
    # trainer may write it during validation or later in the same epoch. val.first comes
    # before epoch 0 began, in a fresh folder: there was no best.pt before it
    for v in r.validations:
        first = v.phase == "first"
        before = None if first else starts.get(v.epoch)
        after = starts.get(0 if first else v.epoch + 1, end_file)
        at = "val.first" if first else f"epoch {v.epoch}"
        with ctx.case(f"{name}, {at}"):
            if v.improved:
                writes += 1
                want = (-1, 0) if first else (v.epoch, ends.get(v.epoch))
                _judge_best_file(at, v, before, after, want)
            elif _identity(after) != _identity(before):
                raise CheckFailed(f"BEST-3: {at} did not improve but best.pt was "
                                  f"{'written' if before is None else 'rewritten'} (now epoch "
                                  f"{None if after is None else after.epoch})")
    return writes


def _judge_best_file(at: str, v: Validation, before: FileSnapshot | None,
                     after: FileSnapshot | None, want: tuple[int, int | None]) -> None:
    """best.pt after the improvement ``at``: rewritten, with ``want`` (epoch, step) and the
    weights validated."""
    if after is None or after.error:
        raise CheckFailed(f"BEST-3: {at} improved but best.pt "
                          f"{'is missing' if after is None else 'does not load: '}"
                          f"{'' if after is None else after.error}", severity="loss")
    if _identity(after) == _identity(before):
        raise CheckFailed(f"BEST-3: {at} improved but best.pt was not rewritten",
                          severity="loss")
    epoch, step = want
    if after.epoch != epoch:
        raise CheckFailed(f"BEST-3: best.pt written for the improvement at {at} says epoch "
                          f"{after.epoch}, expected {epoch}")
    if after.step != step:
        raise CheckFailed(f"BEST-3: best.pt for {at} says train_step {after.step}, expected "
                          f"{step}")
    diff = weights_diff(v.weights, after.weights)
    if diff is not None:
        raise CheckFailed(f"BEST-3: best.pt for {at} holds other weights than the ones "
                          f"validated: {diff}")


@check("BEST-4", requires={"test_pass"}, covers=("BEST-4.1", "BEST-4.2"))
def check_test_sees_best_weights(ctx: CheckContext) -> str:
    """The test pass evaluates the best weights, or the final ones when nothing improved."""
    s = make_scenario("best-test", [0.9, 0.1, 0.2])
    with ctx.case(s.name):
        r = ctx.completed(s).rank0
        if not r.tests:
            raise CheckFailed("BEST-4: the test pass did not run")
        diff = weights_diff(r.validations[0].weights, r.tests[0].weights)
        if diff is not None:
            raise CheckFailed(f"BEST-4: the test pass saw other weights than those of epoch "
                              f"0, the best: {diff}")
    none = make_scenario("best-test-none", [float("nan")] * 3)
    with ctx.case(none.name):
        r = ctx.completed(none).rank0
        diff = weights_diff(r.final_weights, r.tests[0].weights if r.tests else None)
        if diff is not None:
            raise CheckFailed(f"BEST-4: every validation scored NaN, so no improvement could "
                              f"be recorded, yet the test pass saw other weights than the "
                              f"final ones: {diff}")
    return "test saw epoch 0's (best) weights; with no improvement, the final weights"


@check("BEST-1", covers=("BEST-1.1", "BEST-1.2", "BEST-1.3", "LOOP-2.4"))
def check_best_selection_matches_the_oracle(ctx: CheckContext) -> str:
    """Generated runs with ties: improvement flags and the best weights equal the oracle's."""
    return property_check(ctx, "improvements", "BEST-1", max_examples=ctx.max_examples // 2)
