"""The model-based family: generated runs of every kind against the executable model.

One engine (:mod:`trainspec.conformance.checks.generated_passes`, run next to the trainer as a
property is) draws chains of runs and compares every observable with the model of the spec
(:mod:`trainspec.conformance.spec.model`). Each divergence names the sentence it breaks, and is
reported under that sentence's clause: one check per clause the model speaks for, all sharing
the engine's runs. Each chain's first divergence is charged to its clause (what follows it
may be its consequence); a chain that matches the model throughout is evidence for every clause
it speaks of. A clause charged is then shrunk to its smallest chain, in a pass of its own.

The budgets follow the profile (``fast`` in the default check, ``ci`` nightly) and are counted
in trainer runs, never in seconds: the same target gets the same chains and the same verdicts
on any machine, however loaded.
"""

from __future__ import annotations

import json
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

__all__ = ["ENGINE_MEMO", "GENERATED_RUNNER", "JUDGED_ON", "MODEL_CLAUSES", "examples_for",
           "runs_for", "shrink_runs_for"]

GENERATED_RUNNER = "trainspec.conformance.checks.generated_passes:run_generated"
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
    ModelClause(clause="DIST-1", subject="pool_the_score",
                covers=("DIST-1.1", "DIST-1.2", "DIST-1.3"),
                requires=frozenset({"multi_rank"}), multi_rank=True),
    ModelClause(clause="DIST-2", subject="stop_and_end_together", covers=("DIST-2.1", "DIST-2.2"),
                requires=frozenset({"multi_rank"}), multi_rank=True),
    ModelClause(clause="DIST-3", subject="agree_on_the_best",
                covers=("DIST-3.1", "DIST-3.2", "DIST-3.3"),
                requires=frozenset({"multi_rank"}), multi_rank=True),
)


_ALL = ("fresh", "resumed", "finetuned", "debug", "multi-rank")
# runs that track afresh (a resume's are RES-3's); a multi-rank run's rank 0
_OWN = ("fresh", "finetuned", "debug", "multi-rank")
# an interrupted source's files too; a multi-rank run's, which rank 0 writes
_FILES = ("fresh", "interrupted", "resumed", "finetuned", "multi-rank")
_RANKS = ("multi-rank",)
# a multi-rank chain resumes or finetunes on every rank from a file its fresh run left
_RESUMED = ("resumed", "multi-rank")
_FINETUNED = ("finetuned", "multi-rank")
# sentence -> the kinds of generated run it is judged on (the attribution of model_compare)
JUDGED_ON: dict[str, tuple[str, ...]] = {
    "LOOP-1.1": _OWN, "LOOP-1.2": ("fresh", "debug", "multi-rank"),
    "LOOP-2.1": _ALL, "LOOP-2.2": _ALL, "LOOP-2.3": _OWN, "LOOP-2.6": _RESUMED,
    "LOOP-4.1": _ALL, "LOOP-4.2": _ALL, "LOOP-4.4": _ALL,
    "BEST-1.1": _OWN, "BEST-2.1": _OWN,
    "BEST-3.1": _FILES, "BEST-3.2": _FILES, "BEST-3.4": _FILES, "BEST-3.6": _FILES,
    "BEST-4.1": _ALL, "BEST-4.2": _ALL, "NAN-1.1": _OWN, "PAT-5.1": _OWN,
    "RES-1.1": _RESUMED, "RES-1.2": _RESUMED, "RES-1.3": _RESUMED,
    "RES-3.1": _RESUMED, "RES-3.3": _RESUMED,
    "FT-1.1": _FINETUNED, "FT-1.2": _FINETUNED,
    "DBG-1.1": ("debug",), "DBG-2.1": ("debug",), "DBG-2.2": ("debug",),
    "DBG-3.1": ("debug",),
    "CKPT-1.1": _FILES, "CKPT-1.2": _FILES, "CKPT-1.3": _FILES, "CKPT-1.5": _FILES,
    "DIST-1.1": _ALL, "DIST-1.2": _RANKS, "DIST-1.3": _RANKS,
    "DIST-2.1": _RANKS, "DIST-2.2": _RANKS, "DIST-3.1": _RANKS, "DIST-3.2": _RANKS,
    "DIST-3.3": _RANKS,
}


def runs_for(max_examples: int) -> int:
    """Trainer runs the judge pass may make per target: 80 in the ``fast`` profile, 400 in
    ``ci``. Counted in runs, never in seconds: a target gets the same chains, and so the same
    verdicts, on a loaded machine as on a quiet one. The reference's 30 fast chains take 56
    runs (a resumed chain is judged from up to four files); a check of several ranks adds 6
    multi-rank runs (each one run, however many ranks)."""
    return 80 if max_examples <= 60 else 400


def shrink_runs_for(max_examples: int) -> int:
    """Trainer runs that shrinking one clause's failure may make: 30 (``fast``), 150 (``ci``);
    the chains the judge pass ran cost none (the engine's memo holds them)."""
    return 30 if max_examples <= 60 else 150


def examples_for(max_examples: int) -> int:
    """Generated chains per target: 30 in the ``fast`` profile (60), 125 in ``ci`` (250),
    shared among the kinds of chain by :func:`~trainspec.conformance.checks.generated.quotas`
    (which adds a fifth of that, at least 4, in multi-rank runs to a check of several ranks).

    The 30 fast chains catch every mutant of tests/mutants/model.py (tests/test_mutants.py);
    the draws are derandomized, so a target gets the same examples every time."""
    return max(30, max_examples // 2)


@dataclass(slots=True)
class _Engine:
    """The judge pass's outcome on this target, and the shrunk failure of each clause asked."""

    memo: str = ""  # the file of chains judged, shared by the passes
    judged: PropertyOutcome | None = None
    shrunk: dict[str, PropertyOutcome] = field(default_factory=dict)


def _engine(ctx: CheckContext) -> _Engine:
    state = ctx.memo.get(ENGINE_MEMO)
    if not isinstance(state, _Engine):
        state = _Engine(memo=str(ctx.runs.new_ckpt_root("generated-memo") / "chains.jsonl"))
        ctx.memo[ENGINE_MEMO] = state
    return state


def _draws_ranks(ctx: CheckContext) -> bool:
    """A check of several ranks draws multi-rank runs too (on 2 to 4 ranks)."""
    return ctx.world_size > 1


def _pass(ctx: CheckContext, name: str, runs: int) -> PropertyOutcome:
    state = _engine(ctx)
    ranks = ";ranks=1" if _draws_ranks(ctx) else ""
    return ctx.runs.property(f"{name};runs={runs}{ranks};memo={state.memo}",
                             runner=GENERATED_RUNNER,
                             max_examples=examples_for(ctx.max_examples),
                             max_runs=runs)


def _judge(ctx: CheckContext, clause: str) -> str:
    state = _engine(ctx)
    budget = runs_for(ctx.max_examples)
    if state.judged is None:
        state.judged = _pass(ctx, "judge", budget)
    outcome = state.judged
    if outcome.verdict == "broke":
        _broke(clause, outcome)
    found = outcome.found.get(clause)
    if found is not None:
        raise _failed(ctx, state, clause, found)
    others = sorted(outcome.found)
    aside = f"; set aside the chains whose first slip is charged to {', '.join(others)}" \
        if others else ""
    n_judged = outcome.judged.get(clause, 0)
    spent = f"; the judge pass's {budget} runs ended the draw" if outcome.out_of_budget else ""
    if not n_judged:
        # nothing judged it: the clause rests on its hand-written checks, and its verdict is
        # theirs (the slips that kept it from being judged are charged to their own clauses)
        spoke = outcome.spoke.get(clause, 0)
        why = (f"each of the {spoke} chains that speak of it showed another clause's slip "
               "first" if spoke else "no chain drawn speaks of it")
        raise NotApplicable(f"{clause}: not judged by generated runs: none of the "
                            f"{outcome.examples} generated chains ({outcome.runs} runs) gave "
                            f"it anything to judge: {why}{aside}{spent}")
    kinds = "fresh, resumed, finetuned, debug" + (", multi-rank" if _draws_ranks(ctx) else "")
    return (f"{n_judged} of {outcome.examples} generated chains ({kinds}; {outcome.runs} "
            f"runs) judged {clause} and matched the model on every sentence of it{aside}"
            f"{spent}")


def _failed(ctx: CheckContext, state: _Engine, clause: str, found: PropertyOutcome
            ) -> CheckFailed:
    """The clause's failure, shrunk (the first chain charged to it when shrinking could not
    meet it again, or broke)."""
    shrunk = state.shrunk.get(clause)
    if shrunk is None:
        kind = (found.scenario or {}).get("kind", "")
        shrunk = state.shrunk[clause] = _pass(ctx, f"shrink={clause};kind={kind}",
                                              shrink_runs_for(ctx.max_examples))
    how = "a generated run, shrunk"
    if shrunk.verdict != "failed":
        how = "a generated run, not shrunk" + (
            f": shrinking {shrunk.status}: {shrunk.error}" if shrunk.verdict == "broke" else "")
        shrunk = found
    return CheckFailed(f"{shrunk.evidence} [{how}; replay in the detail]",
                       _reproducer(ctx.target_args, dict(shrunk.scenario or {})),
                       cause=shrunk.cause)


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
    on_ranks = all(JUDGED_ON[s] == _RANKS for s in spec.covers)
    judge.__doc__ = (f"Generated runs {'on several ranks' if on_ranks else 'of every kind'} "
                     f"meet {clause} as the model of the spec says.\n\nOne divergence per "
                     "generated chain, shrunk, charged to the sentence it breaks.")
    check(clause, requires=spec.requires, covers=spec.covers, multi_rank=spec.multi_rank)(judge)


for _spec in MODEL_CLAUSES:
    _register(_spec)
