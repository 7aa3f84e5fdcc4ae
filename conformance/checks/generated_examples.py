"""What one generated example gives the model's clauses to judge, and how it reads in evidence.

A generated example (a chain of runs, as JSON) speaks for a clause when the run the model
expects holds something that clause judges: a validation, an epoch trained, a test pass, a
file. The engine counts the clean chains that speak for each clause as its evidence
(:mod:`trainspec.conformance.checks.generated_passes`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Literal

from trainspec.conformance.checks.model_compare import MULTI_RANK
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.spec.model import ModelConfig, RunExpect, expect_chain, expect_run

__all__ = ["chain_kind", "decided_score", "describe_example", "from_file", "own_score",
           "speaks_for"]


# clause -> what a run the model expects must hold for the clause to have something to judge
_NEEDS: dict[str, str] = {
    "LOOP-1": "epochs", "DBG-1": "epochs", "DBG-2": "epochs", "DBG-3": "epochs",
    "LOOP-2": "validations", "BEST-1": "validations", "BEST-2": "validations",
    "NAN-1": "validations", "PAT-5": "validations", "DIST-1": "validations",
    "RES-3": "validations", "LOOP-4": "test", "BEST-4": "test",
    "BEST-3": "files", "CKPT-1": "files", "RES-1": "run", "FT-1": "run",
    # a multi-rank run that trains: its ranks meet in collectives, and must stop and end together
    "DIST-2": "epochs", "DIST-3": "validations",
}
_RANKS_ONLY = ("DIST-2", "DIST-3")  # judged on multi-rank runs alone
_KINDS: dict[str, tuple[str, ...]] = {"DBG-1": ("debug",), "DBG-2": ("debug",),
                                      "DBG-3": ("debug",), "RES-1": ("resumed",),
                                      "RES-3": ("resumed",), "FT-1": ("finetuned",)}


def _holds(want: RunExpect, need: str) -> bool:
    if need == "epochs":
        return bool(want.epochs_trained)
    if need == "validations":
        return bool(want.validations)
    if need == "test":
        return want.test_passes > 0
    if need == "files":
        return bool(want.files)
    return True


def from_file(kind: str) -> Literal["resumed", "finetuned"] | None:
    """The kind of a run from a file, where ``kind`` is one."""
    return "resumed" if kind == "resumed" else "finetuned" if kind == "finetuned" else None


def chain_kind(example: dict[str, Any]) -> str:
    """What the chain does after its source: ``fresh`` (no second run), ``debug``,
    ``resumed`` or ``finetuned``; a multi-rank chain says under ``chain`` (fresh where it
    does not say: the examples drawn before multi-rank chains resumed)."""
    kind = str(example["kind"])
    return str(example.get("chain", "fresh")) if kind == MULTI_RANK else kind


def own_score(s: Scenario, rank: int, epoch: int | None) -> float:
    """One rank's own score of a validation: its total over its count (NaN: none counted)."""
    total, count = s.scores.pairs(epoch, rank)
    return math.nan if count == 0 else total / count


def decided_score(s: Scenario) -> Callable[[int | None], float]:
    """The score the run's decisions are taken on, by validation: the pooled one, or, where
    the scores are handed to the trainer rank-local (``task.metric="local"``), rank 0's own
    (DIST-3.3: rank 0's, broadcast to every rank)."""
    if s.task.metric == "local":
        return functools.partial(own_score, s, 0)
    return lambda epoch: s.scores.pooled(epoch, s.world_size)


def speaks_for(example: dict[str, Any]) -> set[str]:
    """The clauses one generated chain gives something to judge, as the model expects it:
    a clause on validations is judged only where a validation is expected, and so on."""
    kind = example["kind"]
    base = Scenario.from_json(example["scenario"])
    cfg = ModelConfig.from_mapping(base.config)

    score = decided_score(base)
    # handed rank-local scores, the trainer pools nothing: DIST-1 has nothing to judge
    unpooled = {"DIST-1"} if base.task.metric == "local" else set()
    over = from_file(chain_kind(example))
    wants: list[RunExpect] = []
    if over is None:
        wants.append(expect_run(cfg, score, kind="debug" if kind == "debug" else "fresh"))
    else:
        at = example["interrupted_at"]
        chain = expect_chain(cfg, score, kind=over, steps_per_epoch=1,
                             file_index=int(example["file_index"]),
                             interrupted_at=None if at is None else (at[0], int(at[1])))
        if at is None:
            wants.append(chain.source)
        if chain.run is not None:
            wants.append(chain.run)
    return {clause for clause, need in _NEEDS.items()
            if (kind == MULTI_RANK or clause not in _RANKS_ONLY) and clause not in unpooled
            and any((want.kind in _KINDS.get(clause, (want.kind,))) and _holds(want, need)
                    for want in wants)}


def describe_example(example: dict[str, Any]) -> str:
    """The generated chain in one phrase: kind, interruption, file, config, scores."""
    s = Scenario.from_json(example["scenario"])
    parts = [example["kind"]]
    over = chain_kind(example)
    if over in ("resumed", "finetuned"):
        if over != example["kind"]:
            parts.append(over)
        at = example["interrupted_at"]
        parts.append("from a source run " + ("run to its end" if at is None
                                             else f"interrupted at {at[0]} of epoch {at[1]}"))
        parts.append(f"its resumable file #{example['file_index']}")
    keys = ("num_epochs", "val.first", "val.every_n_epochs", "val.minimize", "val.patience",
            "val.start_patience", "test.enable", "ckpt.enable", "ckpt.every_n_epochs",
            "ckpt.save_last", "grad_accum_steps")
    parts.append(", ".join(f"{k}={s.get(k)}" for k in keys))
    n = s.world_size
    local = s.task.metric == "local"
    if example["kind"] == MULTI_RANK:
        parts.insert(1, f"{n} ranks" + (", scores handed rank-local" if local else ""))
        shards = [list(s.scores.epochs[e]) for e in range(len(s.scores.epochs))]
        parts.append(f"(total, count) per rank {shards}" + (
            "" if s.scores.first is None else f", val.first {list(s.scores.first)}"))
    score = decided_score(s)
    scores = [score(e) for e in range(len(s.scores.epochs))]
    what = "rank 0's own scores" if local else "pooled scores" if n > 1 else "scores"
    parts.append(f"{what} {scores}" + (
        "" if s.scores.first is None else f", val.first score {score(None)}"))
    return "; ".join(parts)
