"""The conformance checks, one module per clause family; importing this registers them all."""

from trainspec.conformance.checks import best, ckpt, dbg, dist, ft, loop, nan, pat, res
from trainspec.conformance.checks.base import (
    CHECKS,
    CheckContext,
    CheckFailed,
    CheckSpec,
    NotApplicable,
    Runs,
    check,
    run_check,
)

__all__ = [
    "CHECKS",
    "CheckContext",
    "CheckFailed",
    "CheckSpec",
    "NotApplicable",
    "Runs",
    "best",
    "check",
    "checks_by_clause",
    "ckpt",
    "dbg",
    "dist",
    "ft",
    "loop",
    "nan",
    "pat",
    "res",
    "run_check",
]


def checks_by_clause() -> dict[str, list[str]]:
    """Clause ID -> names of the checks that verify it."""
    out: dict[str, list[str]] = {}
    for spec in CHECKS.values():
        for clause in spec.clauses:
            out.setdefault(clause, []).append(spec.name)
    return out
