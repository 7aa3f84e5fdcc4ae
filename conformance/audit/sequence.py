"""The run's validations as one sequence, and the oracle's decisions on its real scores.

A resumed launch redoes the epochs after the checkpoint it resumed from: the validations an
earlier launch made after that epoch are dropped (the run went back before them), so the
sequence is the one an uninterrupted run would have made. The oracle
(:func:`~trainspec.conformance.spec.oracle.decide`) judges it as a whole: that is how a resume's
decisions are held to the uninterrupted run's (RES-3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainspec.conformance.audit.logs import Event, Log
from trainspec.conformance.audit.runs import AuditedRun
from trainspec.conformance.run.auditlog import AuditConfig
from trainspec.conformance.spec.oracle import Outcome, decide

__all__ = ["Step", "Validations", "fmt_score", "validations"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One validation of the sequence: where it was logged and what the trainer decided."""

    launch: int  # index of its launch
    log: Log
    event: Event

    @property
    def epoch(self) -> int | None:
        """The oracle's epoch: None for the val.first validation."""
        return None if self.event.get("phase") == "first" else self.event.number("epoch")

    @property
    def score(self) -> float:
        score = self.event.score
        return math.nan if score is None else score

    @property
    def improved(self) -> bool | None:
        value = self.event.get("improved")
        return value if isinstance(value, bool) else None

    @property
    def stop(self) -> bool:
        return bool(self.event.get("stop"))

    @property
    def where(self) -> str:
        return self.log.where(self.event)

    @property
    def name(self) -> str:
        return "the val.first validation" if self.epoch is None else \
            f"the validation after epoch {self.epoch}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Validations:
    steps: tuple[Step, ...]
    config: AuditConfig
    outcome: Outcome | None  # None: the config lacks what the oracle needs

    @property
    def scores(self) -> list[float]:
        return [s.score for s in self.steps]

    def scores_text(self, upto: int | None = None) -> str:
        shown = self.scores[: None if upto is None else upto + 1]
        return "[" + ", ".join(fmt_score(s) for s in shown[-12:]) + "]"

    def config_text(self) -> str:
        c = self.config
        return (f"val.minimize={c.minimize}, val.patience="
                f"{c.patience if c.has_patience else None}, "
                f"val.start_patience={c.start_patience}")


def fmt_score(score: float) -> str:
    return f"{score:.6g}"


def validations(run: AuditedRun) -> Validations:
    """Every validation of the run that an uninterrupted run would have made, in order."""
    steps: list[Step] = []
    for index, launch in enumerate(run.launches):
        resumed = launch.main.resumed_from
        if index and resumed is not None and isinstance(resumed.get("epoch"), int):
            k = int(resumed["epoch"])  # type: ignore[call-overload]
            steps = [s for s in steps if s.epoch is None or s.epoch <= k]
        steps += [Step(launch=index, log=launch.main, event=e) for e in launch.main.of("val")
                  if e.get("score") is not None]
    config = run.last.main.config  # a resume may extend num_epochs
    outcome = None
    if config.minimize is not None and config.has_patience is not None \
            and config.num_epochs is not None:
        outcome = decide([(s.epoch, s.score) for s in steps], minimize=config.minimize,
                         patience=config.patience if config.has_patience else None,
                         start_patience=config.start_patience or 0,
                         num_epochs=config.num_epochs)
    return Validations(steps=tuple(steps), config=config, outcome=outcome)
