"""The model-based family: generated runs of every kind against the executable model.

One engine (:mod:`trainspec.conformance.checks.generated`, run next to the trainer as a
property is) draws chains of runs and compares every observable with the model of the spec
(:mod:`trainspec.conformance.spec.model`). Each divergence names the sentence it breaks, and is
reported under that sentence's clause: one check per clause the model speaks for, all sharing
the engine's runs. When a slip is found, the engine runs again with that clause set aside,
skipping the examples that show it, so that the other clauses are judged on runs free of it.

The budget follows the profile: ``fast`` (the default check) draws a handful of chains,
``ci`` (nightly) several times more.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn

from trainspec.conformance.checks.base import (
    CheckContext,
    CheckFailed,
    NotApplicable,
    PropertyTimeout,
    check,
)
from trainspec.conformance.run.adapter import Capability
from trainspec.conformance.run.protocol import PropertyOutcome
from trainspec.errors import AdapterError, HarnessError

__all__ = ["ENGINE_MEMO", "GENERATED_RUNNER", "JUDGED_ON", "MODEL_CLAUSES", "budget_for",
           "examples_for"]

GENERATED_RUNNER = "trainspec.conformance.checks.generated:run_generated"
ENGINE_MEMO = "model-based"  # the key of the engine's state in a target's CheckContext.memo


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelClause:
    """A clause the model-based family reports under: the sentences its divergences cite."""

    clause: str
    subject: str  # the check's name: check_generated_runs_<subject>
    covers: tuple[str, ...]
    requires: frozenset[Capability] = frozenset()
    # judged only in a check of several ranks (a one-rank world pools nothing)
    multi_rank: bool = False


def _c(clause: str, subject: str, covers: tuple[str, ...],
       requires: tuple[Capability, ...] = ()) -> ModelClause:
    return ModelClause(clause=clause, subject=subject, covers=covers,
                       requires=frozenset(requires))


MODEL_CLAUSES: tuple[ModelClause, ...] = (
    _c("LOOP-1", "train_each_epoch_once", ("LOOP-1.1", "LOOP-1.2")),
    _c("LOOP-2", "validate_on_schedule", ("LOOP-2.1", "LOOP-2.2", "LOOP-2.3", "LOOP-2.6")),
    _c("LOOP-4", "test_once", ("LOOP-4.1", "LOOP-4.2", "LOOP-4.4"), ("test_pass",)),
    _c("BEST-1", "take_strict_improvements", ("BEST-1.1",)),
    _c("BEST-2", "keep_the_best_weights", ("BEST-2.1",)),
    _c("BEST-3", "write_best_on_improvement", ("BEST-3.1", "BEST-3.2", "BEST-3.4", "BEST-3.6"),
       ("checkpoint",)),
    _c("BEST-4", "test_the_best_weights", ("BEST-4.1", "BEST-4.2"), ("test_pass",)),
    _c("NAN-1", "never_improve_on_nonfinite", ("NAN-1.1",)),
    _c("PAT-5", "stop_as_the_model", ("PAT-5.1",)),
    _c("RES-1", "resume_where_the_file_ends", ("RES-1.1", "RES-1.2", "RES-1.3"),
       ("checkpoint", "resume")),
    _c("RES-3", "resume_the_decisions", ("RES-3.1", "RES-3.3"), ("checkpoint", "resume")),
    _c("FT-1", "finetune_from_epoch_zero", ("FT-1.1", "FT-1.2"), ("checkpoint", "finetune")),
    _c("DBG-1", "take_one_debug_batch", ("DBG-1.1",), ("debug",)),
    _c("DBG-2", "cap_debug_epochs", ("DBG-2.1", "DBG-2.2"), ("debug",)),
    _c("DBG-3", "write_nothing_in_debug", ("DBG-3.1",), ("debug", "checkpoint")),
    _c("CKPT-1", "leave_the_model_files", ("CKPT-1.1", "CKPT-1.2", "CKPT-1.3", "CKPT-1.5"),
       ("checkpoint",)),
    ModelClause(clause="DIST-1", subject="pool_the_score", covers=("DIST-1.1",),
                requires=frozenset({"multi_rank"}), multi_rank=True),
)


_ALL = ("fresh", "resumed", "finetuned", "debug")
_OWN = ("fresh", "finetuned", "debug")  # runs that track afresh: a resume's are RES-3's
_FILES = ("fresh", "interrupted", "resumed", "finetuned")  # an interrupted source's files too
# sentence -> the kinds of generated run it is judged on (the attribution of model_compare)
JUDGED_ON: dict[str, tuple[str, ...]] = {
    "LOOP-1.1": _OWN, "LOOP-1.2": ("fresh", "debug"),
    "LOOP-2.1": _ALL, "LOOP-2.2": _ALL, "LOOP-2.3": _OWN, "LOOP-2.6": ("resumed",),
    "LOOP-4.1": _ALL, "LOOP-4.2": _ALL, "LOOP-4.4": _ALL,
    "BEST-1.1": _OWN, "BEST-2.1": _OWN,
    "BEST-3.1": _FILES, "BEST-3.2": _FILES, "BEST-3.4": _FILES, "BEST-3.6": _FILES,
    "BEST-4.1": _ALL, "BEST-4.2": _ALL, "NAN-1.1": _OWN, "PAT-5.1": _OWN,
    "RES-1.1": ("resumed",), "RES-1.2": ("resumed",), "RES-1.3": ("resumed",),
    "RES-3.1": ("resumed",), "RES-3.3": ("resumed",),
    "FT-1.1": ("finetuned",), "FT-1.2": ("finetuned",),
    "DBG-1.1": ("debug",), "DBG-2.1": ("debug",), "DBG-2.2": ("debug",),
    "DBG-3.1": ("debug",),
    "CKPT-1.1": _FILES, "CKPT-1.2": _FILES, "CKPT-1.3": _FILES, "CKPT-1.5": _FILES,
    "DIST-1.1": _ALL,
}


def budget_for(max_examples: int) -> float:
    """Seconds of generated runs per target, all engine runs together: 20 in the ``fast``
    profile, 90 in ``ci``. The reference runs its 30 (fast) or 125 (ci) chains well within
    it; a trainer whose runs take seconds gets fewer chains, and its evidence says so."""
    return 20.0 if max_examples <= 60 else 90.0


def examples_for(max_examples: int) -> int:
    """Generated chains per engine run: 30 in the ``fast`` profile (60), 125 in ``ci`` (250).

    30 is the fewest that catch every mutant of tests/mutants/model.py (measured: 20 miss
    one); the draws are derandomized, so a target gets the same examples every time."""
    return max(30, max_examples // 2)


@dataclass(slots=True)
class _Engine:
    """What the engine found so far on this target: a failure per clause, and whether a run
    with those clauses set aside passed."""

    found: dict[str, PropertyOutcome] = field(default_factory=dict)
    settled: bool = False
    examples: int = 0
    runs: int = 0
    judged: dict[str, int] = field(default_factory=dict)  # clause -> examples that judged it
    broke: PropertyOutcome | None = None  # the engine could not judge: every clause says so
    spent_s: float = 0.0
    out_of_time: bool = False
    clean: int = 0  # runs (of every engine run) that matched the model throughout


def _engine(ctx: CheckContext) -> _Engine:
    state = ctx.memo.get(ENGINE_MEMO)
    if not isinstance(state, _Engine):
        state = _Engine()
        ctx.memo[ENGINE_MEMO] = state
    return state


def _clause_of(evidence: str) -> str:
    return evidence.partition(":")[0].rpartition(".")[0]


def _judge(ctx: CheckContext, clause: str) -> str:
    state = _engine(ctx)
    budget = examples_for(ctx.max_examples)
    total_s = budget_for(ctx.max_examples)
    if state.broke is not None:
        _broke(clause, state.broke)
    while clause not in state.found and not state.settled and state.runs <= len(MODEL_CLAUSES):
        left_s = total_s - state.spent_s
        if left_s <= 0:
            state.out_of_time = state.settled = True
            break
        state.runs += 1
        started = time.monotonic()
        outcome = ctx.runs.property(f"exclude={','.join(sorted(state.found))};"
                                    f"budget_s={left_s:.1f}",
                                    runner=GENERATED_RUNNER, max_examples=budget)
        state.spent_s += time.monotonic() - started
        state.out_of_time = state.out_of_time or outcome.out_of_time
        state.examples += outcome.examples
        state.clean += outcome.clean or 0
        for judged, n in outcome.judged.items():
            state.judged[judged] = state.judged.get(judged, 0) + n
        if outcome.verdict == "passed":
            state.settled = True
        elif outcome.verdict == "broke":
            state.broke = outcome
            _broke(clause, outcome)
        else:
            state.found.setdefault(_clause_of(outcome.evidence), outcome)
    found = state.found.get(clause)
    if found is not None:
        raise CheckFailed(f"{found.evidence} [a generated run, shrunk; replay in the detail]",
                          _reproducer(ctx.target_args, dict(found.scenario or {})),
                          cause=found.cause)
    others = f"; set aside the slips charged to {', '.join(sorted(state.found))}" \
        if state.found else ""
    n_judged = state.judged.get(clause, 0)
    timed = f" (the {total_s:.0f} s budget of generated runs ended the draw)" \
        if state.out_of_time else ""
    # out of budget before a run of its kind came: the clause rests on its hand-written
    # checks; but when no run at all matched the model (each showed a slip), those slips are
    # what kept it from being judged
    if not n_judged and state.out_of_time and (state.clean or not state.found):
        raise NotApplicable(f"{clause}: not judged by generated runs: none of the "
                            f"{state.examples} run within the {total_s:.0f} s budget gave "
                            f"it anything to judge{others}")
    if not n_judged:  # every run that would have judged it showed a slip set aside
        raise CheckFailed(f"{clause}: none of the {state.examples} generated runs gave it "
                          f"anything to judge{others}: each run the clause speaks of showed "
                          "one of those slips first")
    return (f"{n_judged} of {state.examples} generated runs (fresh, resumed, finetuned, debug) "
            f"judged {clause} and matched the model on every sentence of it{others}{timed}")


def _broke(clause: str, outcome: PropertyOutcome) -> NoReturn:
    """The engine did not finish: a run hung (timeout), the trainer's process died or quit
    (a fail), or the adapter or the suite broke (an error)."""
    message = f"{clause}: the generated runs {outcome.status}: {outcome.error}"
    if outcome.status == "timeout":
        raise PropertyTimeout(message, outcome.detail)
    if outcome.status in ("killed", "exited"):  # the trainer's process died or quit
        raise CheckFailed(message, outcome.detail)
    if outcome.status == "adapter":
        raise AdapterError(message)
    raise HarnessError(message)


def _reproducer(target_args: str, example: dict[str, Any]) -> str:
    return ("# replay a generated run that departs from the model of the spec\n"
            "from trainspec.conformance.api import replay_generated\n\n"
            f"example = {json.dumps(example)!r}\n"
            f"replay_generated({target_args}, example=example)\n")


def _register(spec: ModelClause) -> None:
    clause = spec.clause

    def judge(ctx: CheckContext) -> str:
        return _judge(ctx, clause)

    judge.__name__ = judge.__qualname__ = f"check_generated_runs_{spec.subject}"
    judge.__doc__ = (f"Generated runs of every kind meet {clause} as the model of the spec "
                     "says.\n\nOne divergence per generated chain, shrunk, charged to the "
                     "sentence it breaks.")
    check(clause, requires=spec.requires, covers=spec.covers, multi_rank=spec.multi_rank)(judge)


for _spec in MODEL_CLAUSES:
    _register(_spec)
