"""The conformance checks, one module per clause family; importing this registers them all."""

from collections.abc import Sequence

from trainspec.conformance.checks import (
    best,
    ckpt,
    dbg,
    dist,
    dist_runs,
    ft,
    loop,
    model_based,
    nan,
    pat,
    res,
)
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
    "dist_runs",
    "ft",
    "loop",
    "model_based",
    "nan",
    "pat",
    "res",
    "run_check",
    "selected_checks",
]


def checks_by_clause() -> dict[str, list[str]]:
    """Clause ID -> names of the checks that verify it."""
    out: dict[str, list[str]] = {}
    for spec in CHECKS.values():
        for clause in spec.clauses:
            out.setdefault(clause, []).append(spec.name)
    return out


def selected_checks(selected: Sequence[str], world_size: int | None) -> list[CheckSpec]:
    """The checks verifying any of ``selected``, in registry order; multi-rank ones only with
    several ranks (all of them when ``world_size`` is None)."""
    chosen = set(selected)
    several = world_size is None or world_size > 1
    return [spec for spec in CHECKS.values()
            if chosen.intersection(spec.clauses) and (several or not spec.multi_rank)]
