"""The clause registry: every clause of the spec, its level, text, rationale and observable.

This is the single source of truth the spec pages
(:mod:`trainspec.conformance.report.specdocs`), the CLI (``trainspec list``, ``explain``,
``--clauses``) and the reports read. IDs and levels are those of ``docs/spec-outline.md`` and
are permanent: a clause may be sharpened or split (a new ``RES-3a``), never dropped or
renumbered. The module is long because it is data, one entry per clause; the code is the few
functions at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainspec.conformance.spec.results import Level
from trainspec.errors import UsageError

__all__ = [
    "CLAUSES",
    "FAMILIES",
    "FAMILY_TITLES",
    "Clause",
    "Family",
    "clauses_of",
    "family_of",
    "get",
    "select",
]

Family = Literal["LOOP", "BEST", "NAN", "PAT", "RES", "FT", "DIST", "DBG", "CKPT"]

FAMILIES: tuple[Family, ...] = ("LOOP", "BEST", "NAN", "PAT", "RES", "FT", "DIST", "DBG", "CKPT")

FAMILY_TITLES: dict[Family, str] = {
    "LOOP": "The epoch loop",
    "BEST": "Best-model selection",
    "NAN": "Non-finite scores",
    "PAT": "Patience and early stopping",
    "RES": "Resume",
    "FT": "Finetune",
    "DIST": "Multiple ranks",
    "DBG": "Debug mode",
    "CKPT": "Checkpoint files",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Clause:
    """One numbered requirement of the spec.

    ``text`` is the normative sentence (RFC 2119 MUST/SHOULD), ``rationale`` the silent failure
    the clause prevents, ``observable`` what the suite looks at to judge it.
    """

    id: str
    level: Level
    family: Family
    title: str
    text: str
    rationale: str
    observable: str

    @property
    def anchor(self) -> str:
        """The clause's link target in the spec pages, e.g. ``res-3``."""
        return self.id.lower()


CLAUSES: tuple[Clause, ...] = (
    # ---------------------------------------------------------------- LOOP
    Clause(
        id="LOOP-1", level="MUST", family="LOOP",
        title="Each epoch trains once, in order",
        text=("A run MUST train epochs `start`, `start+1`, ..., `num_epochs-1` in increasing "
              "order, each exactly once, where `start` is 0 for a fresh run or a finetune and "
              "k+1 when resuming from a checkpoint of epoch k (its last completed epoch)."),
        rationale=("An off-by-one at resume repeats an epoch (its data and scheduler steps count "
                   "twice) or skips one, and nothing in the loss curve shows it."),
        observable=("The epoch index of every training epoch the trainer ran, compared with "
                    "`start .. num_epochs-1`."),
    ),
    Clause(
        id="LOOP-2", level="MUST", family="LOOP",
        title="Validation runs when due, and once first with val.first",
        text=("A run MUST validate after training epoch e if and only if "
              "`e % val.every_n_epochs == 0` or e is the final epoch `num_epochs-1`. With "
              "`val.first` it MUST also validate once before the first training epoch; that "
              "validation is an ordinary one at epoch 0 (it counts for best tracking and "
              "patience, and if it exhausts patience the run stops before training), and a "
              "resumed run MUST NOT repeat it."),
        rationale=("A skipped final validation leaves the last epochs out of best-model "
                   "selection; a `val.first` score that is ignored, or repeated on resume, "
                   "hides the baseline a finetune must beat or counts it twice."),
        observable=("The epochs after which a validation ran, and whether one ran before the "
                    "first training epoch, for fresh and resumed runs."),
    ),
    Clause(
        id="LOOP-3", level="MUST", family="LOOP",
        title="num_epochs = 0 is an eval-only run",
        text=("With `num_epochs = 0` a run MUST NOT run any training step or optimizer step; "
              "the `val.first` validation and the test pass MUST still run as configured."),
        rationale=("Eval-only runs are how a team scores a checkpoint without changing it; a "
                   "loop that trains one epoch anyway reports on weights nobody asked for."),
        observable=("Training epochs and optimizer steps (none) and the validation and test "
                    "events of a run with `num_epochs = 0`."),
    ),
    Clause(
        id="LOOP-4", level="MUST", family="LOOP",
        title="The test pass runs exactly once, after the loop",
        text=("With `test.enable` the test pass MUST run exactly once, after the epoch loop "
              "ends, whether it ended by running out of epochs or by an early stop (one at the "
              "`val.first` validation included); without `test.enable` it MUST NOT run."),
        rationale=("A test pass skipped on early stop leaves a run without a test number; one "
                   "run inside the loop reports on the wrong weights."),
        observable=("How many test passes the trace records and where they fall relative to "
                    "the last training epoch and the stop."),
    ),
    # ---------------------------------------------------------------- BEST
    Clause(
        id="BEST-1", level="MUST", family="BEST",
        title="An improvement is finite and strictly better",
        text=("A validation score MUST count as an improvement if and only if it is finite "
              "and strictly better than the incumbent best in the direction `val.minimize` "
              "sets; the incumbent starts at +inf when minimizing and -inf when maximizing, "
              "and a tie MUST NOT count as an improvement."),
        rationale=("A `>=` comparison lets a later epoch with an equal score replace the "
                   "earlier best, and a wrong direction keeps the worst model; both go unseen "
                   "because a best checkpoint still exists."),
        observable=("Each validation's improvement flag against the oracle's, over scripted "
                    "scores with ties, in both directions."),
    ),
    Clause(
        id="BEST-2", level="MUST", family="BEST",
        title="Best weights are a copy",
        text=("On an improvement the trainer MUST capture the model's weights as a copy that "
              "later training never changes."),
        rationale=("Keeping a reference to the live `state_dict` instead of a copy makes the "
                   "best weights silently follow the final ones."),
        observable=("The best weights at the end of the run, compared with the weights the "
                    "model had at the improving validation."),
    ),
    Clause(
        id="BEST-3", level="MUST", family="BEST",
        title="best.pt is written on every improvement and only then",
        text=("With checkpointing enabled, the trainer MUST write `best.pt` on every "
              "improvement and at no other time, holding the improving epoch's weights, its "
              "epoch (the last completed epoch: -1 for the `val.first` validation) and its "
              "step counter."),
        rationale=("`best.pt` is what gets deployed: written every epoch, or overwritten by a "
                   "worse model, it ships the wrong weights and the mistake shows only in "
                   "production."),
        observable=("Every write of `best.pt`, and the weights, epoch and step each version "
                    "holds, against the improvement flags."),
    ),
    Clause(
        id="BEST-4", level="SHOULD", family="BEST",
        title="The test pass sees the best weights",
        text=("The test pass SHOULD evaluate the best weights when any improvement was "
              "recorded, and the final weights otherwise."),
        rationale=("Testing the final weights after an early stop reports on a model p epochs "
                   "past its best, not the one `best.pt` holds."),
        observable=("The weights the test pass evaluated, compared with the run's best and "
                    "final weights."),
    ),
    # ---------------------------------------------------------------- NAN
    Clause(
        id="NAN-1", level="MUST", family="NAN",
        title="A non-finite score never improves",
        text=("A NaN, +inf or -inf score MUST NOT count as an improvement, whether "
              "`val.minimize` is true or false."),
        rationale=("NaN compares false with everything and -inf beats every finite score when "
                   "minimizing, so a naive comparison lets a diverged model win best selection "
                   "and overwrite `best.pt`."),
        observable=("Improvement flags and `best.pt` writes for scripted NaN, +inf and -inf "
                    "scores, in both directions."),
    ),
    Clause(
        id="NAN-2", level="MUST", family="NAN",
        title="Leading non-finite scores leave best tracking clean",
        text=("Non-finite scores before the first finite one MUST leave the incumbent at its "
              "initial value, so that the first finite score counts as an improvement."),
        rationale=("A trainer that stores NaN as the incumbent never improves again: every "
                   "comparison with NaN is false, so no best model is ever kept."),
        observable=("The improvement flag of the first finite score after a run of non-finite "
                    "ones, and the best epoch."),
    ),
    Clause(
        id="NAN-3", level="SHOULD", family="NAN",
        title="A non-finite score is one non-improvement",
        text=("A non-finite score SHOULD count as exactly one non-improving validation for "
              "patience: the trainer SHOULD NOT crash, refill the counter, or stop at once "
              "because of it."),
        rationale=("Crashing on one NaN validation loses the run, refilling on it keeps a "
                   "diverged run alive forever, and stopping at once throws away a run that "
                   "would have recovered."),
        observable=("The patience counter and the stop epoch against the oracle's for scripts "
                    "with non-finite scores; no exception raised."),
    ),
    # ---------------------------------------------------------------- PAT
    Clause(
        id="PAT-1", level="MUST", family="PAT",
        title="The run stops right after patience runs out",
        text=("With `val.patience = p` the counter starts at p and each counted "
              "non-improvement decrements it; the run MUST stop right after the validation "
              "that brings it to 0, that is after p consecutive counted non-improvements, "
              "never earlier and never later. The `val.first` validation counts like any "
              "other."),
        rationale=("An off-by-one in patience stops a run an epoch early or late: it keeps a "
                   "different best model, or burns compute, and raises no error."),
        observable="The stop epoch (the last epoch trained) against the oracle's.",
    ),
    Clause(
        id="PAT-2", level="MUST", family="PAT",
        title="An improvement refills patience",
        text="An improvement MUST reset the patience counter to p.",
        rationale=("A counter that only ever goes down counts total non-improvements, and "
                   "stops a run that is still improving now and then."),
        observable=("The stop epoch against the oracle's for scripts that alternate "
                    "improvements and plateaus."),
    ),
    Clause(
        id="PAT-3", level="MUST", family="PAT",
        title="Non-improvements before start_patience do not count",
        text=("A non-improving validation at an epoch below `val.start_patience` MUST NOT "
              "decrement the counter; an improvement there still counts for best tracking and "
              "refills it. The `val.first` validation is at epoch 0."),
        rationale=("Warm-up epochs often score badly; counting them stops a run before it "
                   "starts to learn."),
        observable="The stop epoch against the oracle's with `val.start_patience > 0`.",
    ),
    Clause(
        id="PAT-4", level="MUST", family="PAT",
        title="Unset patience never stops early",
        text=("With `val.patience` unset a run MUST NOT stop early, whatever its scores and "
              "with or without `val.first`: it trains all `num_epochs` epochs."),
        rationale=("Reading unset as 0 or -1 stops a run after its first non-improving "
                    "validation."),
        observable=("The epochs trained, for never-improving scripts with `val.patience` "
                    "unset."),
    ),
    Clause(
        id="PAT-5", level="MUST", family="PAT",
        title="Decisions equal the oracle's for any score sequence",
        text=("For any score sequence (finite, tied, NaN, +inf, -inf) and any `val.patience`, "
              "`val.start_patience` and direction, the trainer's improvement flags, stop epoch "
              "and best epoch MUST equal the oracle's."),
        rationale=("Hand-written cases miss interactions such as a tie at `start_patience` or "
                   "a NaN right after a refill; comparison with the oracle over generated "
                   "sequences finds them."),
        observable=("Hypothesis-generated score scripts and configs; the trace's decisions "
                    "against the oracle's, with the shrunk counterexample as reproducer."),
    ),
    # ---------------------------------------------------------------- RES
    Clause(
        id="RES-1", level="MUST", family="RES",
        title="Resume continues at the next epoch and step",
        text=("Resuming from a checkpoint of epoch k (its last completed epoch) MUST continue "
              "at epoch k+1 with the `train_step` saved in that checkpoint, and MUST NOT "
              "repeat or skip an epoch."),
        rationale=("A repeated epoch counts its data and schedule steps twice; a reset step "
                   "counter shifts every step-indexed schedule and log."),
        observable=("The first epoch and the step counter of the resumed run against the "
                    "checkpoint; the epochs of both runs together cover each epoch once."),
    ),
    Clause(
        id="RES-2", level="MUST", family="RES",
        title="Every registered item is restored",
        text=("On resume the trainer MUST restore every registered stateful item other than "
              "the model (optimizer, LR scheduler, grad scaler, ...) from the checkpoint; the "
              "model's weights are loaded by the subclass in `setup(ckpt)`."),
        rationale=("An optimizer restarted with empty moments or a scheduler back in warm-up "
                   "makes the resumed run diverge from the interrupted one without an error."),
        observable=("Each registered item's state after resume, against the state saved at "
                    "epoch k and against the uninterrupted run."),
    ),
    Clause(
        id="RES-3", level="MUST", family="RES",
        title="Best tracking and patience survive a resume",
        text=("On resume the trainer MUST restore the best score, best epoch, best weights "
              "and patience counter, so that an interrupted-and-resumed run makes the same "
              "improvement and stop decisions, and leaves the same best weights and `best.pt` "
              "epoch, as the uninterrupted run, wherever the interruption falls (also between "
              "an epoch's checkpoint write and its validation, in either order). A checkpoint "
              "of epoch e MUST therefore be written after e's validation and carry its "
              "outcome."),
        rationale=("A resume that restarts best tracking at the initial incumbent overwrites "
                   "`best.pt` with the first epoch after the restart, however bad; one that "
                   "resets patience trains past the point where the run should have stopped."),
        observable=("Improvement flags, stop epoch, best weights and the newest `best.pt` "
                    "across both run directories of a crash-and-resume pair, against the "
                    "uninterrupted run, for crash points across the epoch."),
    ),
    Clause(
        id="RES-4", level="SHOULD", family="RES",
        title="Resume is exact on CPU",
        text=("On CPU with deterministic kernels, a run crashed after epoch k and resumed "
              "SHOULD end with weights bitwise equal to the uninterrupted run's; to that end "
              "the checkpoint SHOULD carry, and resume SHOULD restore, the RNG states (Python, "
              "NumPy, torch, CUDA) and the data order."),
        rationale=("Without RNG state the resumed run sees another data order and other "
                   "dropout masks, so a crash alone changes the result and experiments stop "
                   "being reproducible."),
        observable=("The largest absolute difference between the final weights of the resumed "
                    "and the uninterrupted run, on CPU with deterministic algorithms."),
    ),
    Clause(
        id="RES-5", level="MUST", family="RES",
        title="State that no longer fits fails the resume loudly",
        text=("Under resume, checkpoint state that no longer fits the run (a registered item "
              "missing from the checkpoint, saved from another class, or failing to load) "
              "MUST raise an error naming the item and the way out (finetune: "
              "`ckpt.model_only=true` or `ckpt.resume=false`); restoring MUST be all or "
              "nothing, leaving no item half-restored."),
        rationale=("A silently skipped optimizer state or a partly loaded scheduler turns a "
                   "resume into an unannounced finetune."),
        observable=("The error and its message (the item, the fix) for mismatched optimizer "
                    "and scheduler state; the items' states unchanged after the failure."),
    ),
    # ---------------------------------------------------------------- FT
    Clause(
        id="FT-1", level="MUST", family="FT",
        title="A finetune starts fresh from the weights",
        text=("A finetune MUST load the checkpoint's model weights and start at epoch 0 with "
              "`train_step` 0 and fresh optimizer and LR scheduler state."),
        rationale=("Carrying over the old run's optimizer moments or schedule position starts "
                   "the finetune at the wrong learning rate, with stale momentum."),
        observable=("The first epoch, the step counter, and the optimizer and scheduler state "
                    "at the start of a finetune; the model weights against the checkpoint's."),
    ),
    Clause(
        id="FT-2", level="MUST", family="FT",
        title="ckpt.model_only restores weights only",
        text=("With `ckpt.model_only=true` the trainer MUST restore nothing but the model "
              "weights, whatever `ckpt.resume` says."),
        rationale=("`model_only` is the user's explicit request for a fresh run; honouring "
                   "`resume` over it restores optimizer, epoch and best tracking behind their "
                   "back."),
        observable=("The same observations as FT-1, for `ckpt.resume=true` with "
                    "`ckpt.model_only=true`."),
    ),
    Clause(
        id="FT-3", level="MUST", family="FT",
        title="A finetune tolerates another optimizer or scheduler",
        text=("A finetune MUST work when the optimizer or scheduler no longer matches the "
              "checkpoint's (another class, other parameter groups)."),
        rationale=("A new head or a new optimizer is the usual reason to finetune; a trainer "
                   "that loads their old state anyway crashes, or loads mismatched groups."),
        observable=("A finetune with another optimizer class and another number of parameter "
                    "groups runs to the end without error."),
    ),
    Clause(
        id="FT-4", level="MUST", family="FT",
        title="A finetune starts best tracking and patience fresh",
        text=("In a finetune, best tracking MUST start from the initial incumbent (+inf or "
              "-inf) and the patience counter from p, ignoring the checkpoint's."),
        rationale=("A best score inherited from another run on other data may never be beaten, "
                   "so no best model is kept and patience runs out at once."),
        observable=("The improvement flags and stop epoch of a finetune, against the oracle "
                    "from a fresh start."),
    ),
    # ---------------------------------------------------------------- DIST
    Clause(
        id="DIST-1", level="MUST", family="DIST",
        title="A pooled mean is exact and identical on every rank",
        text=("A pooled mean MUST be the sum of every rank's totals over the sum of their "
              "counts, not a mean of rank means; it MUST be identical on every rank, and NaN "
              "only when no rank contributed."),
        rationale=("A mean of rank means weighs a rank with few samples like one with many, so "
                   "the score depends on world size and sharding."),
        observable=("The pooled value on each rank for scripted uneven (total, count) pairs, "
                    "zero counts included."),
    ),
    Clause(
        id="DIST-2", level="MUST", family="DIST",
        title="Every rank stops at the same epoch",
        text=("Every rank MUST reach the same early-stop verdict at the same epoch (the "
              "verdict is reduced over ranks), and the run MUST end on every rank, leaving no "
              "rank waiting in a collective."),
        rationale=("One rank leaving the loop while the others enter the next all-reduce is "
                   "the classic hang: the job idles until the cluster kills it."),
        observable=("The stop epoch on each rank, and every rank's exit within the scenario's "
                    "time bound."),
    ),
    Clause(
        id="DIST-3", level="MUST", family="DIST",
        title="Every rank agrees on the best model",
        text=("Every rank MUST agree on every improvement and on the best epoch, and hold the "
              "same best weights: the score best selection compares MUST be rank 0's, "
              "broadcast to every rank."),
        rationale=("Ranks judging their own local scores keep different best weights and "
                   "patience, and the model rank 0 saves is not the one the others test."),
        observable=("Improvement flags, best epoch and a digest of the best weights on each "
                    "rank, with per-rank scores that disagree."),
    ),
    Clause(
        id="DIST-4", level="MUST", family="DIST",
        title="Rank 0 alone writes, and files are complete in time",
        text=("Checkpoint files MUST be written by rank 0 alone, and every file of epoch e "
              "MUST be complete before any rank starts epoch e+1."),
        rationale=("Ranks writing the same path race and tear the file; a rank running ahead "
                   "can read a checkpoint that is still being written."),
        observable=("The files each rank wrote, and when each rank started an epoch relative "
                    "to the end of the previous epoch's writes."),
    ),
    Clause(
        id="DIST-5", level="SHOULD", family="DIST",
        title="A failed or stalled rank surfaces in bounded time",
        text=("A rank that fails or stalls SHOULD surface as an error on every rank within a "
              "bounded time that the config sets (`ddp.timeout_s`); the run SHOULD NOT hang "
              "indefinitely."),
        rationale=("The default collective timeout is long enough for a dead rank to hold a "
                   "whole node's GPUs for hours before anyone notices."),
        observable=("With one rank killed or stalled, the time until every other rank raises, "
                    "against the configured timeout."),
    ),
    Clause(
        id="DIST-6", level="MUST", family="DIST",
        title="N ranks decide as one rank does",
        text=("With a pooled score, the improvement and stop decisions on N ranks MUST equal "
              "those on one rank over the same global data."),
        rationale=("If the decisions depend on the world size, scaling out changes which model "
                   "is kept and when the run stops."),
        observable=("Improvement flags, stop epoch and best epoch at world size 2 against "
                    "world size 1, for the same global score script."),
    ),
    # ---------------------------------------------------------------- DBG
    Clause(
        id="DBG-1", level="MUST", family="DBG",
        title="Debug loaders yield at most one batch",
        text=("In debug mode every split MUST yield at most one batch per pass and report "
              "`len()` as `min(len, 1)` (an empty split stays empty), and every other loader "
              "attribute (`dataset`, `batch_size`, `sampler`, ...) MUST pass through."),
        rationale=("A debug run that iterates the whole data set is no smoke test; a wrapper "
                   "that hides `dataset` or `sampler` breaks code only in debug."),
        observable=("Batches per pass, `len()` and the pass-through attributes of each loader "
                    "after setup, in debug mode."),
    ),
    Clause(
        id="DBG-2", level="MUST", family="DBG",
        title="Debug runs at most one epoch",
        text=("Debug mode MUST cap `num_epochs` at 1, with 0 staying 0 (eval-only), in an "
              "effective config derived for the run; the user's config MUST NOT be mutated."),
        rationale=("A debug run of every epoch is not quick, turning 0 into 1 trains in what "
                   "was meant as an evaluation, and a mutated config leaks debug settings into "
                   "whatever reads it next."),
        observable=("The epochs a debug run trains for `num_epochs` of 0, 1 and more, and the "
                    "user's config after the run."),
    ),
    Clause(
        id="DBG-3", level="MUST", family="DBG",
        title="Debug writes no checkpoint and logs nowhere external",
        text=("In debug mode the trainer MUST NOT write any checkpoint file and MUST NOT "
              "contact an external logging sink."),
        rationale=("A debug run's files can overwrite a real run's `last.pt` or `best.pt`, "
                   "and its metrics pollute the team's dashboards."),
        observable=("The files under `ckpt.dir` after a debug run (none) and the calls made to "
                    "logging sinks."),
    ),
    Clause(
        id="DBG-4", level="MUST", family="DBG",
        title="A debug epoch steps the optimizer",
        text=("A debug epoch MUST perform an optimizer step: gradient accumulation MUST be "
              "forced to 1 (`grad_accum_steps = 1`)."),
        rationale=("With accumulation over several batches and one batch per epoch, no batch "
                   "ever reaches a step, and the debug run never exercises the optimizer."),
        observable=("The optimizer steps of a debug epoch with `grad_accum_steps > 1`, and "
                    "whether the weights changed."),
    ),
    Clause(
        id="DBG-5", level="MUST", family="DBG",
        title="Setup sizes from the full loader length",
        text=("Whatever setup sizes from a loader's length (an LR schedule's total steps) "
              "MUST see the full length in debug mode: loaders MUST be truncated only after "
              "setup returns."),
        rationale=("A schedule sized from a one-batch loader is another schedule (warm-up over "
                   "one step, immediate decay), so debug stops exercising the real one."),
        observable="The loader length setup sees, in debug mode and outside it.",
    ),
    Clause(
        id="DBG-6", level="SHOULD", family="DBG",
        title="Debug turns prediction dumps off",
        text=("Debug mode SHOULD disable prediction dumps (`save_preds.enable`) in the "
              "effective config."),
        rationale=("A prediction file from a truncated split looks like a complete one, and "
                   "scoring it gives a wrong number without a warning."),
        observable=("The effective `save_preds.enable` and the prediction files of a debug "
                    "run."),
    ),
    # ---------------------------------------------------------------- CKPT
    Clause(
        id="CKPT-1", level="MUST", family="CKPT",
        title="Which checkpoint files are written, and what they hold",
        text=("With checkpointing enabled the trainer MUST write `last.pt` after every epoch "
              "unless `ckpt.save_last=false`, and `epoch_{e}.pt` if and only if "
              "`e % ckpt.every_n_epochs == 0` (never when it is unset); each file MUST hold "
              "the epoch (the last completed one), the step, the run id, the config and every "
              "registered item's state, and MUST load with `torch.load(weights_only=True)` "
              "(tensors, numbers, strings, plain containers)."),
        rationale=("A checkpoint without the scheduler or the step cannot be resumed exactly; "
                   "one holding pickled objects cannot be loaded safely, or after a refactor."),
        observable=("The files written after each epoch against the rule; each loaded with "
                    "`weights_only=True` and its keys checked."),
    ),
    Clause(
        id="CKPT-2", level="MUST", family="CKPT",
        title="A crash during a write leaves the old file intact",
        text=("A checkpoint write interrupted by a crash MUST leave the previous file at that "
              "path intact and loadable (write a temporary file in the same folder, fsync it, "
              "then `os.replace` it over the path)."),
        rationale=("`torch.save` straight onto `last.pt` leaves a torn file when the job is "
                   "killed mid-write, destroying the only point to resume from."),
        observable=("A run killed in a subprocess during a checkpoint write; the file at that "
                    "path loads and holds the previous epoch."),
    ),
    Clause(
        id="CKPT-3", level="MUST", family="CKPT",
        title="Loading a checkpoint never runs embedded code",
        text=("Loading a checkpoint MUST NOT execute code embedded in it: the trainer MUST "
              "read it with a weights-only load (`torch.load(weights_only=True)` or "
              "equivalent)."),
        rationale=("A full unpickle runs whatever code a shared or downloaded checkpoint "
                   "carries."),
        observable=("A checkpoint with a pickled callable that would leave a marker file: "
                    "loading it fails with an error and no marker appears."),
    ),
    Clause(
        id="CKPT-4", level="MUST", family="CKPT",
        title="A missing or corrupt checkpoint fails clearly",
        text=("A missing checkpoint MUST raise an error naming every location tried "
              "(`ckpt.load_from` as given and relative to `ckpt.dir`), and a truncated or "
              "corrupt one an error naming the file; the trainer MUST NOT fall back to a "
              "fresh run."),
        rationale=("A bare traceback about a relative path or an unpickling failure sends "
                   "users debugging the wrong thing; a silent fresh start throws the run away."),
        observable=("The error and its message for a missing path and for a truncated and a "
                    "garbage file."),
    ),
    Clause(
        id="CKPT-5", level="SHOULD", family="CKPT",
        title="SIGTERM leaves a resumable checkpoint",
        text=("On SIGTERM the trainer SHOULD finish the epoch in progress (its validation and "
              "checkpoints included), write `last.pt` even when `ckpt.save_last=false`, and "
              "exit with status 143; resuming from that `last.pt` SHOULD satisfy RES-1 to "
              "RES-3. Under several ranks, a SIGTERM that reaches any one rank SHOULD stop "
              "every rank after the same epoch, each exiting with status 143."),
        rationale=("Clusters preempt jobs with SIGTERM and a grace period; a trainer that dies "
                   "at once loses every epoch since its last checkpoint."),
        observable=("A run sent SIGTERM mid-epoch in a subprocess: its exit status, the epoch "
                    "in `last.pt`, and the resumed run against the uninterrupted one; under "
                    "several ranks, one rank sent SIGTERM: every rank's epochs and exit "
                    "status."),
    ),
)

_BY_KEY: dict[str, Clause] = {c.id.lower(): c for c in CLAUSES}
_FAMILY_KEYS: dict[str, Family] = {f.lower(): f for f in FAMILIES}


def _families_hint() -> str:
    return ", ".join(FAMILIES)


def get(clause_id: str) -> Clause:
    """The clause with this ID, matched case-insensitively.

    Raises:
        UsageError: no clause has that ID.
    """
    clause = _BY_KEY.get(clause_id.strip().lower())
    if clause is None:
        raise UsageError(f"unknown clause {clause_id!r}: expected a clause ID such as RES-3, "
                         f"in one of the families {_families_hint()}. "
                         "Run `trainspec list` to see every clause.")
    return clause


def family_of(clause_id: str) -> Family:
    """The family of a clause, e.g. ``"RES"`` for ``"res-3"``."""
    return get(clause_id).family


def clauses_of(family: Family) -> tuple[Clause, ...]:
    """The clauses of one family, in registry order."""
    return tuple(c for c in CLAUSES if c.family == family)


def select(spec: str | None) -> tuple[str, ...]:
    """Clause IDs named by a CLI value such as ``"LOOP,RES-3, pat-5"``, in registry order.

    Tokens are clause IDs or family names, comma-separated, case-insensitive; blanks around
    them and empty tokens are ignored. ``None`` or an empty value selects every clause.

    Raises:
        UsageError: a token is neither a clause ID nor a family name.
    """
    tokens = [t.strip() for t in (spec or "").split(",") if t.strip()]
    if not tokens:
        return tuple(c.id for c in CLAUSES)
    wanted: set[str] = set()
    for token in tokens:
        key = token.lower()
        if key in _FAMILY_KEYS:
            wanted.update(c.id for c in clauses_of(_FAMILY_KEYS[key]))
        elif key in _BY_KEY:
            wanted.add(_BY_KEY[key].id)
        else:
            raise UsageError(f"--clauses: unknown clause or family {token!r}: expected "
                             f"a clause ID such as RES-3 or a family name ({_families_hint()}). "
                             "Run `trainspec list` to see every clause.")
    return tuple(c.id for c in CLAUSES if c.id in wanted)
