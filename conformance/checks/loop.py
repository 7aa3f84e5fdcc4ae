"""LOOP: the epoch loop (docs/spec/loop.md)."""

from __future__ import annotations

from trainspec.conformance.checks.base import CheckContext, CheckFailed, check
from trainspec.conformance.checks.chains import interrupt_and_resume
from trainspec.conformance.checks.common import label, make_scenario, match_decisions
from trainspec.conformance.run.scenario import CrashPoint, Scenario

__all__: list[str] = []


@check("LOOP-1", covers=("LOOP-1.1", "LOOP-1.2"))
def check_loop_trains_each_epoch_once_in_order(ctx: CheckContext) -> str:
    """Epochs 0..num_epochs-1 run in order, once each, with a step counter that only grows."""
    s = make_scenario("loop-4-epochs", [0.1, 0.2, 0.3, 0.4])
    r = ctx.completed(s).rank0
    with ctx.case("epochs 0..3 once each, in order"):
        if r.epochs_trained != [0, 1, 2, 3]:
            raise CheckFailed(f"LOOP-1: with num_epochs=4 the trainer trained epochs "
                              f"{r.epochs_trained}, expected [0, 1, 2, 3]")
    with ctx.case("train_step continuous"):
        step = 0
        for e in r.train_epochs:
            if e.start_step != step:
                raise CheckFailed(f"LOOP-1: epoch {e.epoch} started at train_step "
                                  f"{e.start_step}, expected {step} (the previous epoch ended "
                                  "there)")
            step = e.end_step if e.end_step is not None else step
    return "num_epochs=4 trained epochs [0, 1, 2, 3] once each, train_step continuous"


@check("LOOP-2", covers=("LOOP-2.1", "LOOP-2.2", "LOOP-2.3", "LOOP-2.6"))
def check_loop_validates_on_schedule(ctx: CheckContext) -> str:
    """Validation follows every_n_epochs, always runs after the final epoch, and val.first:
    the default schedule (after every epoch) for every target, the other parts where the
    target declares them (val_every_n, val_first)."""
    cases = [make_scenario("loop-every-1", [0.1] * 3)]
    if ctx.can("val_every_n", case="val.every_n_epochs=2 and 3"):
        cases += [make_scenario("loop-every-2", [0.1] * 5, cfg={"val.every_n_epochs": 2}),
                  make_scenario("loop-every-3", [0.1] * 5, cfg={"val.every_n_epochs": 3})]
    if ctx.can("val_first", case="val.first"):
        cases.append(make_scenario("loop-first", [0.1, 0.2], first=0.05))
    seen = []
    for s in cases:
        with ctx.case(s.name):
            outcome = match_decisions("LOOP-2", s, ctx.completed(s), what="schedule")
            seen.append("/".join(label(d.epoch) for d in outcome.decisions))
    if any(s.name == "loop-first" for s in cases) and \
            ctx.can("resume", "checkpoint", case="no val.first again on resume"):
        # val.first belongs to the run's start: a resume continues the run, it does not restart
        s = make_scenario("loop-first-resume", [0.1, 0.2, 0.3, 0.4], first=0.05)
        with ctx.case(s.name):  # not judged when the run never reaches the crash point
            pair = interrupt_and_resume(ctx, "LOOP-2", s,
                                        CrashPoint(where="train_start", epoch=2))
            again = [v.epoch for v in pair.resumed.rank0.validations if v.phase == "first"]
            if again:
                raise CheckFailed(f"LOOP-2: resumed at epoch {pair.ckpt_epoch + 1}, the run "
                                  "validated before training again (val.first repeated); a "
                                  "resume continues the run, whose val.first validation is "
                                  "done")
            seen.append("no val.first again on resume")
    return "validated after " + "; ".join(seen)


@check("LOOP-3", requires={"eval_only"}, covers=("LOOP-3.1", "LOOP-3.2"))
def check_loop_zero_epochs_is_eval_only(ctx: CheckContext) -> str:
    """num_epochs=0 trains nothing, yet val.first and the test pass still run as configured.

    Gated per case: "trains nothing" needs only ``eval_only``; the val.first half needs
    ``val_first``, the test-pass half ``test_pass``."""
    has_first = ctx.can("val_first", case="val.first still runs at num_epochs=0")
    has_test = ctx.can("test_pass", case="the test pass still runs at num_epochs=0")
    s = make_scenario("loop-eval-only", [], first=0.5 if has_first else None,
                      cfg={"num_epochs": 0, "test.enable": has_test})
    r = ctx.completed(s).rank0
    with ctx.case("no training"):
        if r.train_epochs:
            raise CheckFailed(f"LOOP-3: num_epochs=0 trained epochs {r.epochs_trained}, "
                              "expected none (eval-only)")
        if r.end is not None and r.end.train_step != 0:
            raise CheckFailed(f"LOOP-3: num_epochs=0 ended at train_step {r.end.train_step}, "
                              "expected 0")
    seen = ["no training step"]
    if has_first:
        with ctx.case("val.first still runs"):
            if [v.phase for v in r.validations] != ["first"]:
                raise CheckFailed(f"LOOP-3: num_epochs=0 with val.first ran "
                                  f"{len(r.validations)} validation(s), expected exactly the "
                                  "val.first one")
            seen.append("val.first ran")
    if has_test:
        with ctx.case("the test pass still runs"):
            if len(r.tests) != 1:
                raise CheckFailed(f"LOOP-3: num_epochs=0 with test.enable ran the test pass "
                                  f"{len(r.tests)} time(s), expected once")
            seen.append("test ran once")
    return "num_epochs=0: " + ", ".join(seen)


@check("LOOP-4", requires={"test_pass"},
       covers=("LOOP-4.1", "LOOP-4.2", "LOOP-4.3", "LOOP-4.4"))
def check_loop_tests_once_after_the_loop(ctx: CheckContext) -> str:
    """The test pass runs once after the loop, after exhaustion or any early stop; never if off.

    An early stop at the val.first validation, before any training, counts too (LOOP-4.3)."""
    cases: dict[str, Scenario] = {
        "exhaustion": make_scenario("loop-test-exhaust", [0.1, 0.2, 0.3])}
    if ctx.can("early_stopping", case="the early-stop cases"):
        cases["early stop"] = make_scenario("loop-test-stop", [0.5, 0.4, 0.3, 0.2],
                                            cfg={"val.patience": 1})
    if "early stop" in cases and ctx.can("val_first", case="an early stop at val.first"):
        # a NaN at val.first exhausts patience 1: the loop ends before any epoch trains
        cases["an early stop at val.first"] = make_scenario(
            "loop-test-stop-first", [0.5, 0.6], first=float("nan"), cfg={"val.patience": 1})
    for why, s in cases.items():
        with ctx.case(s.name):
            r = ctx.completed(s).rank0
            if len(r.tests) != 1:
                raise CheckFailed(f"LOOP-4: after {why} the test pass ran {len(r.tests)} "
                                  "time(s), expected exactly once")
            kinds = r.kinds
            test_at = kinds.index("test")
            if any(k in ("train_start", "val") for k in kinds[test_at:]):
                raise CheckFailed(f"LOOP-4: after {why} the test pass ran before the loop "
                                  f"ended (events {kinds})")
    off = make_scenario("loop-test-off", [0.1, 0.2], cfg={"test.enable": False})
    with ctx.case(off.name):
        r = ctx.completed(off).rank0
        if r.tests:
            raise CheckFailed(f"LOOP-4: with test.enable=false the test pass ran "
                              f"{len(r.tests)} time(s), expected never")
    return f"test ran once after {', after '.join(cases)}; never with test.enable=false"
