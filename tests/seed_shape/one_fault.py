"""Trainers with two slips of different clauses, as real trainers have them: each slip must be
charged to its own clause once, and neither must hide the other (tests/test_one_fault.py)."""

from __future__ import annotations

from typing import Any

from tests.mutants.nan import InfRefillsPatience
from tests.mutants.pat import StopsOneValidationLate
from trainspec.reference import BaseTrainer

__all__ = ["ResumeRaises", "StopsLateAndInfRefills"]


class StopsLateAndInfRefills(StopsOneValidationLate, InfRefillsPatience):
    """Stops one validation late (PAT-1) and takes +inf as an improvement, refilling patience
    (NAN-1, NAN-3)."""


class ResumeRaises(BaseTrainer):
    """Every resume raises the same error: one cause behind every resume clause, which the
    reports group."""

    def _apply_checkpoint(self, ckpt: dict[str, Any]) -> None:
        if self.is_resumed:
            raise RuntimeError("\x1b[31mcannot restore the sampler\x1b[0m: no 'sampler_state' "
                               "in the checkpoint")
        super()._apply_checkpoint(ckpt)
