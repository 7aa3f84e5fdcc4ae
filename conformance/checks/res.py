"""RES: resume (docs/spec/res.md).

Each check interrupts a run for real (the process that trains is killed with SIGKILL) at several
points, resumes from the newest ``last.pt``, and compares with the same run left alone: first
the exact state at the resume point (epoch, step, each registered item, RNG), then the decisions,
the best weights and ``best.pt``, then the final weights.
"""

from __future__ import annotations

import math
import re

from trainspec.conformance.checks.base import CheckContext, CheckFailed, check
from trainspec.conformance.checks.chains import (
    ResumePair,
    SourceRun,
    combined_decisions,
    from_checkpoint,
    interrupt_and_resume,
    reachable_pairs,
    source_run,
    with_load,
)
from trainspec.conformance.checks.common import item_difference, make_scenario, weights_diff
from trainspec.conformance.run.records import ItemsOnRaise, StatePart
from trainspec.conformance.run.scenario import CrashPoint, Scenario, Task
from trainspec.conformance.run.trace import RankTrace, TrainEpoch, first_difference

__all__: list[str] = []

_PARTS: tuple[StatePart, ...] = ("weights", "optimizer", "scheduler", "rng")

# the best epoch (1) lies before every interruption and later scores are worse: a trainer that
# forgets its incumbent takes a worse epoch as best after the resume; patience 3 stops after 4
RES_SCORES = [0.3, 0.8, 0.5, 0.4, 0.35, 0.3]
CRASHES = (
    CrashPoint(where="val_start", epoch=2),  # between epoch 2's training (and, in the seed's
    # order, its last.pt) and its validation
    CrashPoint(where="train_start", epoch=3),  # right after epoch 2's files
    CrashPoint(where="val_after_save", epoch=3),  # after best selection, before patience
    CrashPoint(where="train_end", epoch=2),  # mid-epoch: nothing of epoch 2 saved yet
    CrashPoint(where="val_after_save", epoch=1),  # an improving epoch: best.pt is newer than
    # the checkpoint the run resumes from
)


def res_scenario() -> Scenario:
    return make_scenario("res", RES_SCORES, cfg={"val.patience": 3})


def _pairs(ctx: CheckContext, clause: str,
           crashes: tuple[CrashPoint, ...] = CRASHES) -> list[tuple[CrashPoint, ResumePair]]:
    return reachable_pairs(ctx, clause, res_scenario(), crashes)


def _at(c: CrashPoint) -> str:
    return f"killed at {c.where} of epoch {c.epoch}"


def _epoch(r: RankTrace, epoch: int) -> TrainEpoch | None:
    return next((e for e in r.train_epochs if e.epoch == epoch), None)


@check("RES-1", requires={"resume", "checkpoint"},
       covers=("RES-1.1", "RES-1.2", "RES-1.3", "LOOP-1.3"))
def check_resume_continues_at_the_next_epoch(ctx: CheckContext) -> str:
    """A resume from epoch k's checkpoint trains k+1.. with the saved step; none repeated.

    Where the resumed run stops is RES-3's matter (patience, best tracking): here only where
    it starts and that it goes on one epoch at a time.
    """
    for crash, pair in _pairs(ctx, "RES-1"):
        with ctx.case(_at(crash)):
            r = pair.resumed.rank0
            trained = r.epochs_trained
            name = pair.checkpoint.name
            if pair.unread is not None:  # the trainer's resume ran: judged on what it trained
                ctx.notes.append(f"the epoch and step resumed from when {_at(crash)}: "
                                 f"{pair.unread}")
                if not trained:
                    raise CheckFailed(f"RES-1: {_at(crash)} and resumed from {name}, the run "
                                      "trained no epoch")
                if trained != list(range(trained[0], trained[0] + len(trained))):
                    raise CheckFailed(f"RES-1: {_at(crash)} and resumed from {name}, the run "
                                      f"trained epochs {trained}; expected one epoch after "
                                      "another (no epoch repeated or skipped)")
                continue
            k = pair.checkpoint.epoch
            step = pair.checkpoint.step
            if k is None or not isinstance(step, int):
                raise CheckFailed(f"RES-1: the {name} left when {_at(crash)} has no integer epoch "
                                  f"and train_step (found epoch={k!r}, train_step={step!r})")
            reached = next((e.end_step for e in pair.interrupted.rank0.train_epochs
                            if e.epoch == k), None)
            if k >= 0 and reached is not None and step != reached:
                raise CheckFailed(f"RES-1: the {name} of epoch {k} says train_step {step}, but "
                                  f"the run had taken {reached} optimizer steps by the end of "
                                  "that epoch")
            if not trained:
                raise CheckFailed(f"RES-1: {_at(crash)} and resumed from {name} of epoch {k}, the "
                                  f"run trained no epoch; expected to continue at epoch {k + 1}")
            if trained != list(range(k + 1, k + 1 + len(trained))):
                raise CheckFailed(f"RES-1: {_at(crash)} and resumed from {name} of epoch {k}, the "
                                  f"run trained epochs {trained}; expected {k + 1}, {k + 2}, ... "
                                  "(no epoch repeated or skipped)")
            if r.train_epochs[0].start_step != step:
                raise CheckFailed(f"RES-1: resumed from {name} of epoch {k} (train_step {step}), "
                                  f"epoch {k + 1} started at train_step "
                                  f"{r.train_epochs[0].start_step}")
    return f"resumed at k+1 with the saved step after {len(CRASHES)} kills; no epoch repeated"


@check("RES-2", requires={"resume", "checkpoint"}, covers=("RES-2.1",))
def check_resume_restores_every_registered_item(ctx: CheckContext) -> str:
    """Optimizer and scheduler state at the resume point equal the uninterrupted run's."""
    whole = ctx.completed(res_scenario()).rank0
    for crash, pair in _pairs(ctx, "RES-2"):
        with ctx.case(_at(crash)):
            r = pair.resumed.rank0
            if not r.train_epochs:
                continue
            first = r.train_epochs[0]
            ref = _epoch(whole, first.epoch)
            if ref is None:
                continue
            found = item_difference(ref.state, first.state)
            if found is not None:
                item, diff = found
                raise CheckFailed(
                    f"RES-2: {_at(crash)} and resumed at epoch {first.epoch}, the {item} state "
                    f"differs from the uninterrupted run ({diff}). Restore every registered "
                    "item's state_dict on resume.")
    return "optimizer (Adam moments, step) and LR scheduler equal the uninterrupted run's " \
        "at every resume point"


@check("RES-3", requires={"resume", "checkpoint", "early_stopping"},
       covers=("RES-3.1", "RES-3.2", "RES-3.3", "RES-3.4", "RES-3.5", "RES-3.6"))
def check_resume_keeps_best_and_patience(ctx: CheckContext) -> str:
    """Interrupted-and-resumed runs decide, select and write best.pt as the uninterrupted one."""
    s = res_scenario()
    whole = ctx.completed(s)
    w = whole.rank0
    want = [(v.epoch, v.improved, v.stop) for v in w.validations]
    want_best = whole.newest("best")
    for crash, pair in _pairs(ctx, "RES-3"):
        with ctx.case(_at(crash)):
            k = pair.ckpt_epoch
            seen = combined_decisions(pair)
            if seen != want:
                raise CheckFailed(
                    f"RES-3: {_at(crash)} and resumed from epoch {k}, the run validated "
                    f"(epoch, improved, stop) {seen}; uninterrupted: {want}. Save the best score, "
                    "its epoch and the patience counter with each checkpoint, after the epoch's "
                    "validation.")
            diff = weights_diff(w.best_model, pair.resumed.rank0.best_model)
            if diff is not None:
                raise CheckFailed(f"RES-3: {_at(crash)}, the resumed run ends with other best "
                                  f"weights than the uninterrupted run: {diff}")
            best = pair.resumed.newest("best")
            if want_best is not None and want_best.epoch is None:
                ctx.notes.append(f"the best file's epoch: the uninterrupted run's "
                                 f"{want_best.name} could not be read ({want_best.error})")
            elif want_best is not None and best is not None and best.error is not None:
                ctx.notes.append(f"the best file's epoch {_at(crash)}: the resumed run's "
                                 f"{best.name} could not be read ({best.error})")
            elif want_best is not None and (best is None or best.epoch != want_best.epoch):
                raise CheckFailed(
                    f"RES-3: {_at(crash)}, the newest best file "
                    f"{'(none)' if best is None else best.name} says epoch "
                    f"{None if best is None else best.epoch}; uninterrupted: {want_best.name} "
                    f"of epoch {want_best.epoch}")
    for name, case, scores, crash, how in _MORE_RES3:
        with ctx.case(case):
            more = make_scenario(name, scores, cfg={"val.patience": 2})
            want = [(v.epoch, v.improved, v.stop) for v in ctx.completed(more).rank0.validations]
            seen = combined_decisions(interrupt_and_resume(ctx, "RES-3", more, crash))
            if seen != want:
                raise CheckFailed(f"RES-3: {_at(crash)} ({how}) and resumed, the run validated "
                                  f"(epoch, improved, stop) {seen}; uninterrupted: {want}")
    return f"same improvements, stop and best weights/best.pt (epoch 1) after {len(CRASHES)} " \
        "kills, one between training and validation, one after an improving epoch's best.pt; " \
        "also resumed with patience part spent before an improvement, and from a checkpoint " \
        "written before any improvement"


# (scenario, case, scores, where the run is killed, what the file resumed from holds), with
# patience 2
_MORE_RES3 = (
    # one validation of patience left when epoch 2 begins, then an improvement: it refills
    # patience, so the run stops after epoch 4, not 3
    ("res-refill", "an improvement after the resume refills patience",
     [0.5, 0.4, 0.6, 0.5, 0.45, 0.44], CrashPoint(where="train_start", epoch=2),
     "one validation of patience 2 left, an improvement at epoch 2 next"),
    # epoch 0 scored NaN: the file of epoch 0 holds no best yet (no best weights, no best score)
    ("res-no-best-yet", "resumed from a file written before any improvement",
     [math.nan, 0.5, 0.4, 0.6], CrashPoint(where="train_start", epoch=1),
     "from epoch 0's file, written before any improvement: epoch 0 scored NaN"),
)


_STATE_MEANING = {
    "weights": "the model weights differed",
    "optimizer": "the optimizer state differed",
    "scheduler": "the LR scheduler state differed",
    "rng": "the {} RNG state differed (data order, dropout): save and restore RNG states",
}


@check("RES-4", requires={"resume", "checkpoint"},
       covers=("RES-4.1", "RES-4.2", "RES-4.3"))
def check_resume_is_bitwise_exact(ctx: CheckContext) -> str:
    """On CPU, crash + resume ends with weights bitwise equal to the uninterrupted run."""
    s = make_scenario("res-exact", [0.1, 0.2, 0.3, 0.4], task=Task(shuffle=True))
    whole = ctx.completed(s).rank0
    for crash, pair in reachable_pairs(ctx, "RES-4", s, (
            CrashPoint(where="train_start", epoch=2), CrashPoint(where="val_start", epoch=1))):
        with ctx.case(_at(crash)):
            r = pair.resumed.rank0
            final = weights_diff(whole.final_weights, r.final_weights)
            lost = lost_state(whole, r)
            if final is not None:
                raise CheckFailed(f"RES-4: {_at(crash)} and resumed, the final weights differ from "
                                  f"the uninterrupted run ({final}); at the resume point "
                                  f"{lost or 'no recorded part of the state differed'}")
            if lost is not None:
                # the probe draws only from torch's generator; a data pipeline drawing from
                # python's or numpy's would diverge
                raise CheckFailed(f"RES-4: {_at(crash)} and resumed, the final weights match, but "
                                  f"at the resume point {lost}")
    return "final weights and every RNG state bitwise equal to the uninterrupted run after " \
        "kills at 2 points"


def lost_state(whole: RankTrace, resumed: RankTrace) -> str | None:
    """What differed at the resume point between the resumed and the uninterrupted run."""
    if not resumed.train_epochs:
        return None
    first = resumed.train_epochs[0]
    ref = _epoch(whole, first.epoch)
    if ref is None:
        return None
    for part in _PARTS:
        diff = first_difference({part: ref.state.part(part)}, {part: first.state.part(part)})
        if diff is not None:
            return _STATE_MEANING[part].format(diff.split(":")[0].removeprefix("rng."))
    return None


@check("RES-5", requires={"resume", "checkpoint"},
       covers=("RES-5.1", "RES-5.2", "RES-5.3", "RES-5.4"))
def check_resume_refuses_state_that_does_not_fit(ctx: CheckContext) -> str:
    """Resuming into another optimizer or an extra scheduler raises, naming item and way out,
    and leaves no item half-restored: refused before restoring (the extra scheduler's case:
    the optimizer and the first scheduler fit, the second has no state in the checkpoint) and
    failing while restoring (the optimizer's load raises after the scheduler was restored)."""
    base = make_scenario("res-fit", [0.1, 0.2])
    source = source_run(ctx, "RES-5", base)
    cases = {
        "another optimizer class (Adam -> SGD)": (Task(optimizer="sgd"), "optimizer"),
        "an extra optimizer param group": (Task(extra_param_group=True), "optimizer"),
        "an extra registered scheduler": (Task(extra_scheduler=True), "scheduler2"),
        # the scheduler fits and is restored first; the optimizer's load then raises
        "an extra optimizer param group, after the scheduler was restored": (
            Task(extra_param_group=True, schedulers_first=True), "optimizer"),
    }
    for what, (task, item) in cases.items():
        with ctx.case(what):
            s = with_load(base.replace(task=task), source.path, resume=True,
                          name=f"res-fit-{item}")
            trace = ctx.run(s)
            bad = [r for r in trace.ranks if r.status != "completed"]
            if not bad:
                raise CheckFailed(f"RES-5: resuming with {what} went on silently; expected an "
                                  f"error naming '{item}' and the way out (finetune)")
            message = bad[0].error + "\n" + _last_line(bad[0].detail)
            if item not in message or not WAY_OUT.search(message):
                _resumes_at_all(ctx, base, source)  # a refusal of the file itself, not of the fit
            if item not in message:
                raise CheckFailed(f"RES-5: resuming with {what} failed without naming '{item}': "
                                  f"{bad[0].error}")
            if not WAY_OUT.search(message):
                raise CheckFailed(f"RES-5: resuming with {what} failed without naming the way "
                                  f"out (a finetune: ckpt.model_only / ckpt.resume=false): "
                                  f"{bad[0].error}")
            _all_or_nothing(what, bad[0])
    return "another optimizer, an extra param group (also after the scheduler was restored) " \
        "and an extra scheduler each raised, naming the item and the finetune way out, and " \
        "left no item half-restored"


def _resumes_at_all(ctx: CheckContext, base: Scenario, source: SourceRun) -> None:
    """The trainer resumes from its own file with the same optimizer and schedulers: else its
    refusals above say nothing of what does not fit, and its own resume's error is the
    evidence."""
    same = with_load(base, source.path, resume=True, name="res-fit-same")
    from_checkpoint(ctx, "RES-5", same, source.file,
                    "resuming with the same optimizer and schedulers, the trainer's resume from")


def _all_or_nothing(what: str, refused: RankTrace) -> None:
    """After a refused resume no registered item is restored while another is not."""
    after = next((e for e in refused.records if isinstance(e, ItemsOnRaise)), None)
    if after is None or not after.changed or not after.unchanged:
        return  # the adapter does not say, or all or nothing was restored
    raise CheckFailed(
        f"RES-5: resuming with {what} raised, but after the refused resume the "
        f"{_names(after.changed)} restored and {_names(after.unchanged)} not: "
        "half-restored. Check that every item fits before loading any, or put back what was "
        "loaded.")


def _names(names: tuple[str, ...]) -> str:
    return f"{' and '.join(names)} {'was' if len(names) == 1 else 'were'}"


# the way out of a resume that does not fit: a finetune, by model_only or by resume=false
WAY_OUT = re.compile(r"model[_ ]only|finetun|fine-tun|resume\W{0,3}(=|:|to|is)?\W{0,3}false",
                     re.IGNORECASE)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
