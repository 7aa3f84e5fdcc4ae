"""Helpers the checks share: building scenarios, and comparing a run with the oracle."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainspec.conformance.checks.base import CheckContext, CheckFailed
from trainspec.conformance.run.records import StatePart, TrainerState, Validation, Weights
from trainspec.conformance.run.scenario import Scenario, ScoreScript, Task
from trainspec.conformance.run.trace import RankTrace, Trace, first_difference
from trainspec.conformance.spec.oracle import Outcome, decide, expected_validations

__all__ = [
    "expected_outcome",
    "fmt_scores",
    "label",
    "make_scenario",
    "match_decisions",
    "match_own_stop_rule",
    "same_weights",
    "weights_diff",
]


def make_scenario(name: str, scores: Sequence[float], *, first: float | None = None,
                  cfg: Mapping[str, Any] | None = None, task: Task | None = None,
                  world_size: int = 1) -> Scenario:
    """A scenario whose every rank reports the given scores; ``cfg`` has dotted keys."""
    base = Scenario(name=name, scores=ScoreScript.of(scores, first), task=task or Task(),
                    world_size=world_size)
    changes = {"num_epochs": len(scores), **(cfg or {})}
    if first is not None:
        changes.setdefault("val.first", True)
    return base.with_config(**changes)


def fmt_scores(values: Sequence[float]) -> str:
    return "[" + ", ".join(_fmt(v) for v in values) + "]"


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:g}"


def label(epoch: int | None) -> str:
    return "val.first" if epoch is None else f"epoch {epoch}"


def describe(s: Scenario) -> str:
    """The config keys that matter for decisions, in one short phrase."""
    pooled = [s.scores.pooled(e, s.world_size) for e in range(len(s.scores.epochs))]
    parts = [f"scores {fmt_scores(pooled)}"]
    if s.scores.first is not None:
        parts.append(f"val.first score {_fmt(s.scores.pooled(None, s.world_size))}")
    for key in ("val.patience", "val.start_patience", "val.minimize", "val.every_n_epochs",
                "num_epochs"):
        value = s.get(key)
        if key == "val.minimize" and not value:
            continue
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def expected_outcome(s: Scenario) -> Outcome:
    """The oracle's decisions for an uninterrupted run of ``s``."""
    schedule = expected_validations(num_epochs=s.get("num_epochs"),
                                    every_n_epochs=s.get("val.every_n_epochs"),
                                    first=s.get("val.first"))
    scores = [(e, s.scores.pooled(e, s.world_size)) for e in schedule]
    return decide(scores, minimize=s.get("val.minimize"), patience=s.get("val.patience"),
                  start_patience=s.get("val.start_patience"), num_epochs=s.get("num_epochs"))


def _key(v: Validation) -> int | None:
    return None if v.phase == "first" else v.epoch


def match_decisions(clause: str, s: Scenario, trace: Trace, *, what: str = "all") -> Outcome:
    """Compare every rank's validations, flags and epochs with the oracle; raise on a slip.

    ``what`` narrows the comparison: "improved" (flags only), "stop" (stop flags and epochs).
    """
    expected = expected_outcome(s)
    for rank in trace.ranks:
        _match_rank(clause, s, rank, expected, what, multi=len(trace.ranks) > 1)
    return expected


def _match_rank(clause: str, s: Scenario, r: RankTrace, expected: Outcome, what: str,
                *, multi: bool) -> None:
    on = f" on rank {r.rank}" if multi else ""
    context = f"({describe(s)})"
    seen = [_key(v) for v in r.validations]
    want = [d.epoch for d in expected.decisions]
    if seen != want:
        raise CheckFailed(f"{clause}: validations{on} ran after "
                          f"{[label(e) for e in seen]}, expected {[label(e) for e in want]} "
                          f"{context}")
    if what in ("all", "improved"):
        for v, d in zip(r.validations, expected.decisions, strict=True):
            if v.improved != d.improved:
                raise CheckFailed(
                    f"{clause}: the validation after {label(d.epoch)}{on} scored "
                    f"{_fmt(v.score)} and was {'taken' if v.improved else 'not taken'} as an "
                    f"improvement; expected {'an improvement' if d.improved else 'none'} "
                    f"{context}")
    if what in ("all", "stop"):
        for v, d in zip(r.validations, expected.decisions, strict=True):
            if v.stop != d.stop:
                raise CheckFailed(
                    f"{clause}: the validation after {label(d.epoch)}{on} "
                    f"{'stopped' if v.stop else 'did not stop'} the run; expected "
                    f"{'a stop' if d.stop else 'no stop'} (patience left "
                    f"{d.patience_left}) {context}")
        trained = r.epochs_trained
        if trained != list(expected.epochs_trained):
            raise CheckFailed(f"{clause}: epochs trained{on} {trained}, expected "
                              f"{list(expected.epochs_trained)} {context}")


# one improvement (epoch 0), then only worse scores: where the run stops shows the trainer's
# own stop rule, the count of consecutive non-improvements that ends it at val.patience=2
_STOP_RULE = ("pat-own-stop-rule", [0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01], 2)


def own_stop_offset(ctx: CheckContext) -> int:
    """How many validations later (positive) or earlier than val.patience says the trainer
    stops, as a run of one improvement and then only worse scores shows; 0 when it stops on
    time or never stops there. Whether it stops on time is PAT-1's matter: checks of other
    clauses that watch stops (PAT-2's refill, NAN-3's counting) judge against this rule."""
    name, scores, patience = _STOP_RULE
    key = "own-stop-offset"
    cached = ctx.memo.get(key)
    if isinstance(cached, int):
        return cached
    r = ctx.completed(make_scenario(name, scores, cfg={"val.patience": patience})).rank0
    offset, count = 0, 0
    for v in r.validations:
        count = 0 if v.improved else count + 1
        if v.stop:
            offset = count - patience if count > 0 else 0
            break
    ctx.memo[key] = offset
    return offset


def match_own_stop_rule(ctx: CheckContext, clause: str, s: Scenario, trace: Trace) -> Outcome:
    """:func:`match_decisions` against the oracle run with the trainer's own stop rule
    (:func:`own_stop_offset`): a trainer that stops one validation late is charged under
    PAT-1 alone, not under every clause whose scenario ends in a stop."""
    offset = own_stop_offset(ctx)
    patience = s.get("val.patience")
    if not offset or patience is None or patience + offset < 1:
        return match_decisions(clause, s, trace)
    own = s.with_config(**{"val.patience": patience + offset})
    try:
        return match_decisions(clause, own, trace)
    except CheckFailed as e:
        raise CheckFailed(f"{e.evidence} [judged with the trainer's own stop rule: it stops "
                          f"after {_STOP_RULE[2] + offset} non-improvements at val.patience="
                          f"{_STOP_RULE[2]} (PAT-1's matter), so val.patience={patience} reads "
                          f"as {patience + offset} here]", e.detail) from None


ITEMS: tuple[StatePart, ...] = ("optimizer", "scheduler")  # registered items besides weights


def item_difference(expected: TrainerState, observed: TrainerState) -> tuple[str, str] | None:
    """The first registered item whose state differs, as (item, first difference); None when
    all are bitwise equal. An item ``expected`` lacks is not compared; one ``observed`` lacks
    reads as empty, so the difference names the first entry it misses."""
    for item in ITEMS:
        want, got = expected.part(item), observed.part(item)
        if want is None:
            continue
        diff = first_difference({item: want}, {item: {} if got is None else got})
        if diff is not None:
            return item, diff
    return None


def weights_diff(a: Weights | None, b: Weights | None) -> str | None:
    """None when bitwise equal; else the first differing tensor and its max |diff|."""
    if a is None or b is None:
        return None if a is b else f"{'expected' if a is None else 'observed'} no weights"
    return first_difference(a, b)


def same_weights(a: Weights | None, b: Weights | None) -> bool:
    return weights_diff(a, b) is None


def changed(a: Weights, b: Weights) -> bool:
    import torch  # imported already: the weights are tensors

    return any(not torch.equal(a[k], b[k]) for k in a if k in b)


def ranks_seeing_rank0_files(ctx: CheckContext, trace: Trace) -> list[RankTrace]:
    """The ranks of ``trace`` whose checkpoint folder is rank 0's; the others (other nodes of
    a launch, node-local folders) are noted as not judged on rank 0's files."""
    elsewhere = [r.rank for r in trace.ranks if not r.sees_rank0_files]
    if elsewhere:
        ctx.notes.append(f"ranks {elsewhere} ran on other nodes with node-local checkpoint "
                         "folders (no --ckpt-root): not judged on seeing rank 0's files")
    return [r for r in trace.ranks if r.sees_rank0_files]
