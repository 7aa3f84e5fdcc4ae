"""Helpers the checks share: building scenarios, and comparing a run with the oracle."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainspec.conformance.checks.base import CheckFailed
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
