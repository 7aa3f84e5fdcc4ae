"""Meta-tests: every check fails its mutants for the declared reason, and the reference passes
every clause checked.

A check that cannot fail is a defect. Each mutant in tests/mutants/ declares, with
``@mutant_of``, the checks it must fail and a fragment of the evidence each gives for its flaw;
a check passes its meta-test only when it comes out ``failed`` *with* that fragment in its
evidence, which makes its clause ``fail``. A crash counts only for a mutant whose flaw is the
crash and whose fragment quotes it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tests.mutants.registry import MutantOf, declarations, mutant_of
from trainspec.conformance.checks import CHECKS, run_check
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.runner import judge_clauses, open_context, resolve_target, run_checks
from trainspec.conformance.spec.results import CheckResult

ROOT = Path(__file__).resolve().parent.parent
PAIRS = declarations()
# the pairs there were when the mutants declared themselves: the count may grow, never fall
PAIRS_BEFORE = 64
CLAUSE_PREFIX = re.compile(r"[A-Z]+-\d+:")  # "RES-3:", which may move to the report writer
RUN_BROKE = re.compile(r"scenario '[^']*': (the run \w+)")  # how RunBroke's evidence starts


def run_one(harness: Harness, base_trainer: str, check_name: str) -> CheckResult:
    spec = CHECKS[check_name]
    target = resolve_target(base_trainer=base_trainer)
    ctx, _ = open_context(target, harness, world_size=2 if spec.multi_rank else 1,
                          max_examples=40)
    return run_check(spec, ctx)


def test_every_declared_check_exists() -> None:
    unknown = [p.id for p in PAIRS if p.check not in CHECKS]
    assert not unknown


def test_every_declaration_records_the_clauses_of_its_check() -> None:
    assert all(p.clauses == CHECKS[p.check].clauses for p in PAIRS if p.check in CHECKS)


def test_every_check_has_a_mutant() -> None:
    assert set(CHECKS) - {p.check for p in PAIRS} == set()


def test_the_count_of_check_mutant_pairs_does_not_fall() -> None:
    assert len(PAIRS) >= PAIRS_BEFORE


def test_no_fragment_leans_on_the_clause_prefix() -> None:
    leaning = [p.id for p in PAIRS if CLAUSE_PREFIX.match(p.expect.strip())]
    assert not leaning


def test_a_mutant_declared_twice_for_one_check_is_refused() -> None:
    pair = PAIRS[0]
    family, _, name = pair.mutant.partition(":")
    mutant = getattr(importlib.import_module(f"tests.mutants.{family}"), name)
    with pytest.raises(ValueError, match="declared twice"):
        mutant_of(pair.check, expect="another reason")(mutant)


def test_a_mutant_outside_the_mutants_package_is_refused() -> None:
    class Elsewhere:
        pass

    with pytest.raises(ValueError, match="a mutant lives in "):
        mutant_of(PAIRS[0].check, expect="a reason")(Elsewhere)


@pytest.mark.parametrize("pair", PAIRS, ids=[p.id for p in PAIRS])
def test_the_check_fails_its_mutant_for_the_declared_reason(harness: Harness,
                                                             pair: MutantOf) -> None:
    result = run_one(harness, pair.base_trainer, pair.check)
    shown = f"{pair.id}: {result.outcome}: {result.evidence}\n{result.detail}"
    assert result.outcome == "failed", shown
    assert pair.expect in result.evidence, f"expected {pair.expect!r} in the evidence\n{shown}"
    # a run that broke proves the check only for a mutant that declares the crash as its flaw
    broke = RUN_BROKE.match(result.evidence)
    assert broke is None or broke.group(1) in pair.expect, \
        f"the run broke, and {pair.mutant} does not declare a crash\n{shown}"
    # files are named relative to the harness's temporary folder, never by this machine's path
    assert str(harness.root) not in result.evidence + result.detail
    clauses = judge_clauses([result], list(result.clauses), {}, world_size=2)
    assert {c.id: c.verdict for c in clauses if c.id in result.clauses} == \
        dict.fromkeys(pair.clauses, "fail")


def test_the_reference_passes_every_checked_clause(harness: Harness) -> None:
    checked = sorted({c for spec in CHECKS.values() for c in spec.clauses})
    report = run_checks(resolve_target("reference"), clauses=",".join(checked), world_size=2,
                        harness=harness, max_examples=40)
    bad = [(c.id, c.verdict, c.evidence) for c in report.clauses
           if c.id in checked and c.verdict != "pass"]
    assert not bad


def test_a_trainer_that_always_makes_its_own_group_is_not_judged_inside_one(
        harness: Harness) -> None:
    # correct, but calls init_process_group unconditionally: a group made before it cannot be
    # expressed for this trainer, so that case is not judged, and the check still passes
    result = run_one(harness, "tests.mutants.dist:AlwaysMakesItsOwnGroup",
                     "check_ranks_agree_on_best_on_rank_local_scores")
    assert result.outcome == "passed", result.evidence
    cases = {c.name: c for c in result.cases}
    assert cases["the trainer made the process group"].outcome == "passed"
    inside = cases["inside a process group made before the trainer"]
    assert inside.outcome == "not judged"
    assert "initialize the default process group twice" in inside.evidence
