"""DBG: debug mode (docs/spec/dbg.md): one batch per split, one epoch, nothing written."""

from __future__ import annotations

from trainspec.conformance.checks.base import CheckContext, CheckFailed, NotApplicable, check
from trainspec.conformance.checks.common import make_scenario
from trainspec.conformance.run.scenario import Scenario, Task
from trainspec.conformance.run.trace import RankTrace

__all__: list[str] = []

TASK = Task()  # 24 train samples in batches of 4: six batches, two each for val and test
FULL_TRAIN_LEN = -(-TASK.n_train // TASK.batch_size)


def debug_scenario(name: str, num_epochs: int = 3, **cfg: object) -> Scenario:
    return make_scenario(name, [0.5] * max(num_epochs, 1),
                         cfg={"debug": True, "num_epochs": num_epochs, **cfg})


def _run(ctx: CheckContext, s: Scenario) -> RankTrace:
    return ctx.completed(s).rank0


@check("DBG-1", requires={"debug"}, covers=("DBG-1.1", "DBG-1.2", "DBG-1.3", "DBG-1.4"))
def check_debug_caps_every_split_at_one_batch(ctx: CheckContext) -> str:
    """Every split yields at most one batch, len() says so, empty stays empty, attrs pass."""
    r = _run(ctx, debug_scenario("dbg-loaders"))
    if not r.train_epochs or r.train_epochs[0].batches is None:
        raise CheckFailed("DBG-1: the debug run trained no complete epoch")
    epoch = r.train_epochs[0]
    end = epoch.end
    if end is None:
        raise CheckFailed("DBG-1: the debug run trained no complete epoch")
    with ctx.case("train_loader"):
        if epoch.batches != 1 or epoch.loader_len != 1:
            raise CheckFailed(f"DBG-1: in debug mode the train split yielded {epoch.batches} "
                              f"batches with len() {epoch.loader_len}; expected 1 and 1")
    expected = {"val_loader": 1, "test_loader": 1, "eval_loader": 0}
    for name, want in expected.items():
        got_len, got_batches = end.eval_lens.get(name), end.eval_batches.get(name)
        if got_len is None and got_batches is None:
            continue  # the trainer has no such split
        with ctx.case(name):
            if (got_len, got_batches) != (want, want):
                raise CheckFailed(f"DBG-1: in debug mode {name} has len() {got_len} and "
                                  f"yielded {got_batches} batches; expected {want} and {want}"
                                  + (" (an empty split stays empty)" if want == 0 else ""))
    with ctx.case("loader attributes pass through"):
        if end.loader_batch_size != TASK.batch_size:
            raise CheckFailed(f"DBG-1: the truncated train loader's batch_size reads "
                              f"{end.loader_batch_size!r}, expected {TASK.batch_size}: "
                              "other loader attributes must pass through")
    return "train, val, test: one batch and len() 1; the empty split: 0 and 0; batch_size " \
        "passes through"


@check("DBG-2", requires={"debug", "eval_only"}, covers=("DBG-2.1", "DBG-2.2", "DBG-2.3"))
def check_debug_caps_epochs_at_one(ctx: CheckContext) -> str:
    """Debug trains one epoch; num_epochs=0 stays eval-only; the caller's config is intact."""
    with ctx.case("dbg-epochs"):
        r = _run(ctx, debug_scenario("dbg-epochs", num_epochs=3))
        if r.epochs_trained != [0]:
            raise CheckFailed(f"DBG-2: debug mode with num_epochs=3 trained epochs "
                              f"{r.epochs_trained}, expected [0]")
    with ctx.case("the caller's config intact"):
        r = _run(ctx, debug_scenario("dbg-epochs", num_epochs=3))
        user = None if r.end is None or r.end.user_config is None else \
            r.end.user_config.num_epochs
        if user is not None and user != 3:
            raise CheckFailed(f"DBG-2: after the debug run the user's config says "
                              f"num_epochs={user}; it was 3. Derive the debug settings in a "
                              "copy of the config (an effective config for the run); never "
                              "write to the caller's.")
    with ctx.case("dbg-zero"):
        r = _run(ctx, debug_scenario("dbg-zero", num_epochs=0))
        if r.epochs_trained:
            raise CheckFailed(f"DBG-2: debug mode with num_epochs=0 trained epochs "
                              f"{r.epochs_trained}; 0 must stay 0 (eval-only)")
    return "num_epochs=3 trained [0], the caller's config left at 3; num_epochs=0 trained " \
        "nothing"


@check("DBG-3", requires={"debug", "checkpoint"}, covers=("DBG-3.1", "DBG-3.2"))
def check_debug_writes_nothing(ctx: CheckContext) -> str:
    """Debug writes no checkpoint file and turns external logging off."""
    trace = ctx.completed(debug_scenario("dbg-files", num_epochs=2,
                                         **{"ckpt.every_n_epochs": 1}))
    with ctx.case("no checkpoint file or write"):
        if trace.files:
            names = sorted(f.relpath for f in trace.files)[:6]
            raise CheckFailed(f"DBG-3: debug mode left {len(trace.files)} file(s) in "
                              f"ckpt.dir: {names}; expected none")
        for r in trace.ranks:
            if r.writes:
                raise CheckFailed(f"DBG-3: debug mode wrote to {r.writes[0].path} (since "
                                  "removed); expected no checkpoint write at all")
    with ctx.case("no external logging"):
        for r in trace.ranks:
            mode = None if r.setup is None else r.setup.config.wandb_mode
            if mode is not None and mode != "disabled":
                raise CheckFailed(f"DBG-3: debug mode left wandb.mode={mode!r}; expected "
                                  "'disabled' (no external logging sink)")
    return "no file in ckpt.dir and no write, with ckpt.enable and every_n_epochs=1 asked for"


@check("DBG-4", requires={"debug", "grad_accum"}, covers=("DBG-4.1", "DBG-4.2"))
def check_debug_still_steps_the_optimizer(ctx: CheckContext) -> str:
    """A debug epoch performs an optimizer step even with grad_accum_steps > 1."""
    r = _run(ctx, debug_scenario("dbg-accum", num_epochs=1, grad_accum_steps=4))
    steps = r.train_epochs[0].optimizer_steps if r.train_epochs else None
    if not steps:
        raise CheckFailed(f"DBG-4: a debug epoch with grad_accum_steps=4 took {steps} "
                          "optimizer steps; expected 1 (debug forces accumulation to 1)")
    return f"grad_accum_steps=4 in debug: {steps} optimizer step(s) in the one-batch epoch"


@check("DBG-5", requires={"debug"}, covers=("DBG-5.1", "DBG-5.2"))
def check_debug_sizes_schedules_from_full_length(ctx: CheckContext) -> str:
    """Setup sees the full train length, so an LR schedule keeps its real size."""
    r = _run(ctx, debug_scenario("dbg-schedule"))
    seen = None if r.setup is None else r.setup.train_len
    if seen != FULL_TRAIN_LEN:
        raise CheckFailed(f"DBG-5: in debug mode setup saw len(train_loader) = {seen}, "
                          f"expected the full {FULL_TRAIN_LEN}: truncate after setup, so a "
                          "schedule sized there is unaffected")
    return f"setup saw len(train_loader) = {FULL_TRAIN_LEN}, the full length"


@check("DBG-6", requires={"debug"}, covers=("DBG-6.1",))
def check_debug_disables_prediction_dumps(ctx: CheckContext) -> str:
    """Debug turns prediction dumps off (a truncated dump would be scored as a whole one)."""
    r = _run(ctx, debug_scenario("dbg-preds", **{"save_preds.enable": True}))
    seen = None if r.setup is None else r.setup.config.save_preds_enable
    if seen is None:
        raise NotApplicable("the trainer's config has no save_preds.enable: it has no "
                            "prediction dumps for debug mode to turn off")
    if seen is not False:
        raise CheckFailed(f"DBG-6: with save_preds.enable=true, debug mode left "
                          f"save_preds.enable={seen!r} in the config the trainer sees; "
                          "expected false")
    return "save_preds.enable=true became false in debug mode"
