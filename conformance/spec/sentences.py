"""The normative sentences of the spec: each clause's text split into its requirements.

A clause's registry text (:mod:`trainspec.conformance.spec.clauses`) is the spec; its title is a
summary. The text often states several requirements: a MUST, a MUST NOT, an edge case named in
passing ("an empty split stays empty"), "all or nothing". Each gets an ID, ``<CLAUSE>.<n>``
(``RES-5.4``), and its exact wording: a substring of the clause text, given by the reviewed
table below, so that a sentence can never drift from the text it quotes (tests/test_coverage.py
checks that every wording occurs in its clause's text, in order, and that together they cover
every MUST and SHOULD of it).

A sentence that no run can show is marked ``observable=False`` with the reason: durability
against power loss, say, cannot be observed by killing a process. Which checks exercise the
others, and which mutants prove those checks can fail them, is the coverage map
(:mod:`trainspec.conformance.checks.coverage`). Pure data: no torch, no processes.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainspec.conformance.spec.clauses import Clause
from trainspec.conformance.spec.clauses import get as get_clause
from trainspec.conformance.spec.results import Level
from trainspec.errors import UsageError

__all__ = [
    "OUTLINE_DIFFERENCES",
    "SENTENCES",
    "MutantProof",
    "Sentence",
    "get",
    "sentences_of",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Sentence:
    """One normative requirement of a clause, quoted from the clause's text.

    ``observable`` is False for a requirement no run can show; ``reason`` then says why.
    """

    id: str  # "RES-5.4"
    wording: str  # an exact substring of the clause's text
    observable: bool = True
    reason: str = ""

    @property
    def clause_id(self) -> str:
        return self.id.rpartition(".")[0]

    @property
    def clause(self) -> Clause:
        return get_clause(self.clause_id)

    @property
    def level(self) -> Level:
        return self.clause.level


@dataclass(frozen=True, slots=True, kw_only=True)
class MutantProof:
    """One mutant declaration as data (tests/mutants/): ``mutant`` fails ``check`` with
    ``expect`` in the evidence, and its flaw breaks the sentences in ``proves``.

    The mutants live in the tests; the spec pages and ``trainspec explain`` read these records
    from the generated data that :mod:`trainspec.conformance.spec.mutant_proofs` reads.
    """

    mutant: str  # "<family>:<Class>"
    check: str
    expect: str
    proves: tuple[str, ...]
    slip: str  # the first line of the mutant's docstring: the flaw, in words


def _s(sentence_id: str, wording: str, *, observable: bool = True,
       reason: str = "") -> Sentence:
    return Sentence(id=sentence_id, wording=wording, observable=observable, reason=reason)


_POWER_LOSS = ("durability against power loss: killing a process leaves the page cache to the "
               "kernel, so a missing fsync shows only when the machine itself goes down")

# ID -> the exact substring of the clause's text, in text order. Reviewed by hand: a sentence
# is one requirement a distinct slip could break.
SENTENCES: tuple[Sentence, ...] = (
    # ---------------------------------------------------------------- LOOP
    _s("LOOP-1.1", "A run MUST train epochs `start`, `start+1`, ..., `num_epochs-1` in "
       "increasing order, each exactly once"),
    _s("LOOP-1.2", "where `start` is 0 for a fresh run or a finetune"),
    _s("LOOP-1.3", "and k+1 when resuming from a checkpoint of epoch k (its last completed "
       "epoch)"),
    _s("LOOP-2.1", "A run MUST validate after training epoch e if and only if "
       "`e % val.every_n_epochs == 0`"),
    _s("LOOP-2.2", "or e is the final epoch `num_epochs-1`"),
    _s("LOOP-2.3", "With `val.first` it MUST also validate once before the first training "
       "epoch"),
    _s("LOOP-2.4", "that validation is an ordinary one at epoch 0 (it counts for best tracking "
       "and patience"),
    _s("LOOP-2.5", "and if it exhausts patience the run stops before training)"),
    _s("LOOP-2.6", "a resumed run MUST NOT repeat it"),
    _s("LOOP-3.1", "With `num_epochs = 0` a run MUST NOT run any training step or optimizer "
       "step"),
    _s("LOOP-3.2", "the `val.first` validation and the test pass MUST still run as configured"),
    _s("LOOP-4.1", "With `test.enable` the test pass MUST run exactly once, after the epoch "
       "loop ends"),
    _s("LOOP-4.2", "whether it ended by running out of epochs or by an early stop"),
    _s("LOOP-4.3", "(one at the `val.first` validation included)"),
    _s("LOOP-4.4", "without `test.enable` it MUST NOT run"),
    # ---------------------------------------------------------------- BEST
    _s("BEST-1.1", "A validation score MUST count as an improvement if and only if it is "
       "finite and strictly better than the incumbent best in the direction `val.minimize` "
       "sets"),
    _s("BEST-1.2", "the incumbent starts at +inf when minimizing and -inf when maximizing"),
    _s("BEST-1.3", "a tie MUST NOT count as an improvement"),
    _s("BEST-2.1", "On an improvement the trainer MUST capture the model's weights as a copy "
       "that later training never changes."),
    _s("BEST-3.1", "With checkpointing enabled, the trainer MUST write `best.pt` on every "
       "improvement"),
    _s("BEST-3.2", "and at no other time"),
    _s("BEST-3.3", "holding the improving epoch's weights"),
    _s("BEST-3.4", "its epoch (the last completed epoch"),
    _s("BEST-3.5", "-1 for the `val.first` validation)"),
    _s("BEST-3.6", "and its step counter"),
    _s("BEST-4.1", "The test pass SHOULD evaluate the best weights when any improvement was "
       "recorded"),
    _s("BEST-4.2", "and the final weights otherwise"),
    # ---------------------------------------------------------------- NAN
    _s("NAN-1.1", "A NaN, +inf or -inf score MUST NOT count as an improvement, whether "
       "`val.minimize` is true or false."),
    _s("NAN-2.1", "Non-finite scores before the first finite one MUST leave the incumbent at "
       "its initial value, so that the first finite score counts as an improvement."),
    _s("NAN-3.1", "A non-finite score SHOULD count as exactly one non-improving validation for "
       "patience"),
    _s("NAN-3.2", "the trainer SHOULD NOT crash"),
    _s("NAN-3.3", "refill the counter"),
    _s("NAN-3.4", "or stop at once because of it"),
    # ---------------------------------------------------------------- PAT
    _s("PAT-1.1", "With `val.patience = p` the counter starts at p and each counted "
       "non-improvement decrements it; the run MUST stop right after the validation that "
       "brings it to 0, that is after p consecutive counted non-improvements"),
    _s("PAT-1.2", "never earlier"),
    _s("PAT-1.3", "and never later"),
    _s("PAT-1.4", "The `val.first` validation counts like any other."),
    _s("PAT-2.1", "An improvement MUST reset the patience counter to p."),
    _s("PAT-3.1", "A non-improving validation at an epoch below `val.start_patience` MUST NOT "
       "decrement the counter"),
    _s("PAT-3.2", "an improvement there still counts for best tracking"),
    _s("PAT-3.3", "and refills it", observable=False,
       reason=("below `val.start_patience` nothing decrements the counter (PAT-3.1), so it "
               "still holds p there and a refill changes nothing a run can show")),
    _s("PAT-3.4", "The `val.first` validation is at epoch 0."),
    _s("PAT-4.1", "With `val.patience` unset a run MUST NOT stop early, whatever its scores"),
    _s("PAT-4.2", "and with or without `val.first`"),
    _s("PAT-4.3", "it trains all `num_epochs` epochs"),
    _s("PAT-5.1", "For any score sequence (finite, tied, NaN, +inf, -inf) and any "
       "`val.patience`, `val.start_patience` and direction, the trainer's improvement flags, "
       "stop epoch and best epoch MUST equal the oracle's."),
    # ---------------------------------------------------------------- RES
    _s("RES-1.1", "Resuming from a checkpoint of epoch k (its last completed epoch) MUST "
       "continue at epoch k+1"),
    _s("RES-1.2", "with the `train_step` saved in that checkpoint"),
    _s("RES-1.3", "and MUST NOT repeat or skip an epoch"),
    _s("RES-2.1", "On resume the trainer MUST restore every registered stateful item other than "
       "the model (optimizer, LR scheduler, grad scaler, ...) from the checkpoint"),
    _s("RES-2.2", "the model's weights are loaded by the subclass in `setup(ckpt)`",
       observable=False,
       reason=("informative, not a requirement: it says who loads the model's weights in the "
               "seed's shape (the subclass, in setup); adapters of other shapes load them "
               "elsewhere, and the weights a resume continues from are judged by RES-4")),
    _s("RES-3.1", "On resume the trainer MUST restore the best score, best epoch, best "
       "weights"),
    _s("RES-3.2", "and patience counter"),
    _s("RES-3.3", "so that an interrupted-and-resumed run makes the same improvement and stop "
       "decisions, and leaves the same best weights and `best.pt` epoch, as the uninterrupted "
       "run"),
    _s("RES-3.4", "wherever the interruption falls (also between an epoch's checkpoint write "
       "and its validation, in either order)"),
    _s("RES-3.5", "A checkpoint of epoch e MUST therefore be written after e's validation"),
    _s("RES-3.6", "and carry its outcome"),
    _s("RES-4.1", "On CPU with deterministic kernels, a run crashed after epoch k and resumed "
       "SHOULD end with weights bitwise equal to the uninterrupted run's"),
    _s("RES-4.2", "the checkpoint SHOULD carry, and resume SHOULD restore, the RNG states "
       "(Python, NumPy, torch, CUDA)"),
    _s("RES-4.3", "and the data order"),
    _s("RES-5.1", "Under resume, checkpoint state that no longer fits the run (a registered "
       "item missing from the checkpoint, saved from another class, or failing to load) MUST "
       "raise an error"),
    _s("RES-5.2", "naming the item"),
    _s("RES-5.3", "and the way out (finetune: `ckpt.model_only=true` or `ckpt.resume=false`)"),
    _s("RES-5.4", "restoring MUST be all or nothing, leaving no item half-restored"),
    # ---------------------------------------------------------------- FT
    _s("FT-1.1", "A finetune MUST load the checkpoint's model weights"),
    _s("FT-1.2", "and start at epoch 0 with `train_step` 0"),
    _s("FT-1.3", "and fresh optimizer and LR scheduler state"),
    _s("FT-2.1", "With `ckpt.model_only=true` the trainer MUST restore nothing but the model "
       "weights, whatever `ckpt.resume` says."),
    _s("FT-3.1", "A finetune MUST work when the optimizer or scheduler no longer matches the "
       "checkpoint's (another class, other parameter groups)."),
    _s("FT-4.1", "In a finetune, best tracking MUST start from the initial incumbent (+inf or "
       "-inf)"),
    _s("FT-4.2", "and the patience counter from p, ignoring the checkpoint's"),
    # ---------------------------------------------------------------- DIST
    _s("DIST-1.1", "A pooled mean MUST be the sum of every rank's totals over the sum of their "
       "counts, not a mean of rank means"),
    _s("DIST-1.2", "it MUST be identical on every rank"),
    _s("DIST-1.3", "and NaN only when no rank contributed"),
    _s("DIST-2.1", "Every rank MUST reach the same early-stop verdict at the same epoch (the "
       "verdict is reduced over ranks)"),
    _s("DIST-2.2", "and the run MUST end on every rank, leaving no rank waiting in a "
       "collective"),
    _s("DIST-3.1", "Every rank MUST agree on every improvement and on the best epoch"),
    _s("DIST-3.2", "and hold the same best weights"),
    _s("DIST-3.3", "the score best selection compares MUST be rank 0's, broadcast to every "
       "rank"),
    _s("DIST-4.1", "Checkpoint files MUST be written by rank 0 alone"),
    _s("DIST-4.2", "and every file of epoch e MUST be complete before any rank starts epoch "
       "e+1"),
    _s("DIST-5.1", "A rank that fails or stalls SHOULD surface as an error on every rank within "
       "a bounded time that the config sets (`ddp.timeout_s`)"),
    _s("DIST-5.2", "the run SHOULD NOT hang indefinitely", observable=False,
       reason=("'indefinitely' cannot be observed in a bounded run; what can be observed is "
               "DIST-5.1's bound, which implies it")),
    _s("DIST-6.1", "With a pooled score, the improvement and stop decisions on N ranks MUST "
       "equal those on one rank over the same global data."),
    # ---------------------------------------------------------------- DBG
    _s("DBG-1.1", "In debug mode every split MUST yield at most one batch per pass"),
    _s("DBG-1.2", "and report `len()` as `min(len, 1)`"),
    _s("DBG-1.3", "(an empty split stays empty)"),
    _s("DBG-1.4", "and every other loader attribute (`dataset`, `batch_size`, `sampler`, ...) "
       "MUST pass through"),
    _s("DBG-2.1", "Debug mode MUST cap `num_epochs` at 1"),
    _s("DBG-2.2", "with 0 staying 0 (eval-only)"),
    _s("DBG-2.3", "in an effective config derived for the run; the user's config MUST NOT be "
       "mutated"),
    _s("DBG-3.1", "In debug mode the trainer MUST NOT write any checkpoint file"),
    _s("DBG-3.2", "and MUST NOT contact an external logging sink"),
    _s("DBG-4.1", "A debug epoch MUST perform an optimizer step"),
    _s("DBG-4.2", "gradient accumulation MUST be forced to 1 (`grad_accum_steps = 1`)"),
    _s("DBG-5.1", "Whatever setup sizes from a loader's length (an LR schedule's total steps) "
       "MUST see the full length in debug mode"),
    _s("DBG-5.2", "loaders MUST be truncated only after setup returns"),
    _s("DBG-6.1", "Debug mode SHOULD disable prediction dumps (`save_preds.enable`) in the "
       "effective config."),
    # ---------------------------------------------------------------- CKPT
    _s("CKPT-1.1", "With checkpointing enabled the trainer MUST write `last.pt` after every "
       "epoch"),
    _s("CKPT-1.2", "unless `ckpt.save_last=false`"),
    _s("CKPT-1.3", "and `epoch_{e}.pt` if and only if `e % ckpt.every_n_epochs == 0`"),
    _s("CKPT-1.4", "(never when it is unset)"),
    _s("CKPT-1.5", "each file MUST hold the epoch (the last completed one), the step, the run "
       "id, the config and every registered item's state"),
    _s("CKPT-1.6", "and MUST load with `torch.load(weights_only=True)` (tensors, numbers, "
       "strings, plain containers)"),
    _s("CKPT-2.1", "A checkpoint write interrupted by a crash MUST leave the previous file at "
       "that path intact and loadable"),
    _s("CKPT-2.2", "write a temporary file in the same folder"),
    _s("CKPT-2.3", "fsync it", observable=False, reason=_POWER_LOSS),
    _s("CKPT-2.4", "then `os.replace` it over the path"),
    _s("CKPT-3.1", "Loading a checkpoint MUST NOT execute code embedded in it"),
    _s("CKPT-3.2", "the trainer MUST read it with a weights-only load "
       "(`torch.load(weights_only=True)` or equivalent)"),
    _s("CKPT-4.1", "A missing checkpoint MUST raise an error naming every location tried"),
    _s("CKPT-4.2", "(`ckpt.load_from` as given and relative to `ckpt.dir`)"),
    _s("CKPT-4.3", "and a truncated or corrupt one an error naming the file"),
    _s("CKPT-4.4", "the trainer MUST NOT fall back to a fresh run"),
    _s("CKPT-5.1", "On SIGTERM the trainer SHOULD finish the epoch in progress (its validation "
       "and checkpoints included)"),
    _s("CKPT-5.2", "write `last.pt` even when `ckpt.save_last=false`"),
    _s("CKPT-5.3", "and exit with status 143"),
    _s("CKPT-5.4", "resuming from that `last.pt` SHOULD satisfy RES-1 to RES-3"),
    _s("CKPT-5.5", "Under several ranks, a SIGTERM that reaches any one rank SHOULD stop every "
       "rank after the same epoch, each exiting with status 143"),
)

_BY_ID: dict[str, Sentence] = {s.id: s for s in SENTENCES}


def get(sentence_id: str) -> Sentence:
    """The sentence with this ID, matched case-insensitively.

    Raises:
        UsageError: no sentence has that ID (the message lists its clause's sentences).
    """
    key = sentence_id.strip().upper()
    found = _BY_ID.get(key)
    if found is None:
        clause = get_clause(key.rpartition(".")[0])  # an unknown clause: its own error
        known = ", ".join(s.id for s in sentences_of(clause.id))
        raise UsageError(f"unknown sentence {sentence_id!r}: {clause.id} has the sentences "
                         f"{known}. Run `trainspec explain {clause.id}` to read them.")
    return found


def sentences_of(clause_id: str) -> tuple[Sentence, ...]:
    """The sentences of one clause, in text order."""
    return tuple(s for s in SENTENCES if s.clause_id == clause_id)



# Where a clause's registry text says more than (or otherwise than) its row in the outline table
# the project started from (docs/spec-outline.md). The registry text is normative; every other
# clause says what its row says, in other words. Levels never differ (tests/test_clauses.py).
OUTLINE_DIFFERENCES: dict[str, str] = {
    "LOOP-1": "names the finetune (start 0) and defines k as the last completed epoch",
    "LOOP-2": ("makes the `val.first` validation an ordinary one at epoch 0 (it counts for best "
               "tracking and patience, and can stop the run before training) and forbids a "
               "resumed run to repeat it"),
    "LOOP-3": "forbids optimizer steps as well as training steps",
    "LOOP-4": "includes an early stop at the `val.first` validation",
    "BEST-1": ("states the incumbent's initial value (+inf minimizing, -inf maximizing), which "
               "the outline gives only in its vocabulary"),
    "BEST-3": ("defines the epoch `best.pt` holds: the last completed one, -1 for the "
               "`val.first` validation"),
    "PAT-1": ("spells out the counter (starts at p, each counted non-improvement decrements it) "
              "and counts the `val.first` validation like any other"),
    "PAT-3": ("adds that an improvement before `val.start_patience` still counts and refills "
              "the counter, and puts the `val.first` validation at epoch 0"),
    "PAT-4": "adds 'whatever its scores, with or without `val.first`: it trains every epoch'",
    "PAT-5": "leaves '(property-based)', how the suite judges it, to the observable",
    "RES-1": "names the saved counter (`train_step`) and defines k as the last completed epoch",
    "RES-2": ("adds that the model's weights are loaded by the subclass in `setup(ckpt)` "
              "(informative)"),
    "RES-3": ("lists what is restored (best score, best epoch, best weights, patience counter), "
              "covers interruptions between the checkpoint write and the validation in either "
              "order, and adds a MUST: a checkpoint of epoch e is written after e's validation "
              "and carries its outcome"),
    "RES-4": ("makes carrying and restoring the RNG states (Python, NumPy, torch, CUDA) and "
              "the data order SHOULDs of their own; the outline has them in a parenthesis"),
    "RES-5": ("says what no longer fits (an item missing, of another class, failing to load), "
              "names the way out (`ckpt.model_only=true` or `ckpt.resume=false`), and makes "
              "restoring all or nothing where the outline forbids only silent half-restoring"),
    "FT-4": ("states where tracking restarts: the initial incumbent and a counter of p, "
             "ignoring the checkpoint's"),
    "DIST-2": "adds how: the verdict is reduced over ranks",
    "DIST-3": ("adds a MUST on how: the score best selection compares is rank 0's, broadcast "
               "to every rank"),
    "DIST-5": "names the config key of the bound (`ddp.timeout_s`)",
    "DBG-2": ("adds that the cap lives in an effective config derived for the run, and a MUST "
              "NOT: the user's config is not mutated"),
    "DBG-5": "adds how: loaders are truncated only after setup returns",
    "DBG-6": ("names the key (`save_preds.enable`) and where it is turned off (the effective "
              "config); the outline's reason moves to the rationale"),
    "CKPT-1": "makes the files conditional on checkpointing being enabled",
    "CKPT-2": ("adds the recipe: a temporary file in the same folder, fsync, then `os.replace` "
               "over the path"),
    "CKPT-3": "adds a MUST on how: a weights-only load (`torch.load(weights_only=True)`)",
    "CKPT-4": ("names the locations tried (`ckpt.load_from` as given and relative to "
               "`ckpt.dir`) and adds a MUST NOT: no fallback to a fresh run"),
    "CKPT-5": ("replaces 'writes a resumable checkpoint and exits' with: finish the epoch in "
               "progress (its validation and checkpoints included), write `last.pt` even when "
               "`ckpt.save_last=false`, exit with status 143; adds that under several ranks the "
               "ranks stop together when any one of them receives SIGTERM"),
}
