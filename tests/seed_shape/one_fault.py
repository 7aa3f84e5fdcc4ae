"""Trainers with two slips of different clauses, as real trainers have them: each slip must be
charged to its own clause once, and neither must hide the other (tests/test_one_fault.py)."""

from __future__ import annotations

from tests.mutants.nan import InfRefillsPatience
from tests.mutants.pat import StopsOneValidationLate

__all__ = ["StopsLateAndInfRefills"]


class StopsLateAndInfRefills(StopsOneValidationLate, InfRefillsPatience):
    """Stops one validation late (PAT-1) and takes +inf as an improvement, refilling patience
    (NAN-1, NAN-3)."""
