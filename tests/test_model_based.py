"""The model-based family's declarations agree with one another and with the spec."""

from __future__ import annotations

import re
from pathlib import Path

from trainspec.conformance.checks import CHECKS
from trainspec.conformance.checks.generated import SET_ASIDE_SENTENCES
from trainspec.conformance.checks.generated_passes import run_generated
from trainspec.conformance.checks.model_based import (
    JUDGED_ON,
    MODEL_CLAUSES,
    examples_for,
    runs_for,
    shrink_runs_for,
)
from trainspec.conformance.run.adapter import CAPABILITIES
from trainspec.conformance.run.protocol import RunReply
from trainspec.conformance.run.world import _property_ended
from trainspec.conformance.spec.sentences import get as get_sentence

ROOT = Path(__file__).resolve().parent.parent
CITED = re.compile(r'"([A-Z]+-\d+\.\d+)"')


def cited_sentences() -> set[str]:
    """Every sentence ID the comparison and the engine can charge a divergence to."""
    found: set[str] = set()
    for name in ("model_compare.py", "generated.py"):
        found |= set(CITED.findall((ROOT / "conformance" / "checks" / name).read_text()))
    return found


def test_every_sentence_a_divergence_can_cite_is_reported_by_a_check_of_its_clause() -> None:
    covered = {s for spec in MODEL_CLAUSES for s in spec.covers}
    assert cited_sentences() - covered == set(SET_ASIDE_SENTENCES)
    # a set-aside sentence is another family's: its own check judges the trainer on it
    assert not set(SET_ASIDE_SENTENCES) & covered


def test_every_covered_sentence_exists_and_belongs_to_its_checks_clause() -> None:
    for spec in MODEL_CLAUSES:
        for sentence in spec.covers:
            assert get_sentence(sentence).clause_id == spec.clause


def test_the_sentence_map_names_the_run_kinds_of_exactly_the_covered_sentences() -> None:
    covered = {s for spec in MODEL_CLAUSES for s in spec.covers}
    assert set(JUDGED_ON) == covered


def test_one_check_per_clause_is_registered_under_that_clause_alone() -> None:
    for spec in MODEL_CLAUSES:
        registered = CHECKS[f"check_generated_runs_{spec.subject}"]
        assert registered.clauses == (spec.clause,)
        assert registered.covers == spec.covers


def test_the_fast_profile_draws_thirty_chains_and_ci_more() -> None:
    assert examples_for(60) == 30
    assert examples_for(250) > 100


class _Caps:
    """An adapter as the draw sees it: its capabilities alone (no run is ever started)."""

    def capabilities(self) -> frozenset[str]:
        return CAPABILITIES


def test_a_budget_spent_before_any_run_ends_the_draw_as_out_of_budget_not_as_a_crash() -> None:
    # the budget is counted in trainer runs: none left, none is made, and the engine reports
    # no chain judged and the budget spent, so each clause rests on its hand-written checks
    got = run_generated("judge;runs=0", _Caps(), max_examples=5)
    assert got == {"passed": True, "examples": 0, "judged": {}, "spoke": {}, "clean": 0,
                   "found": {}, "runs": 0, "out_of_budget": True}


def test_the_budgets_are_counted_in_runs_and_grow_with_the_profile() -> None:
    assert runs_for(60) < runs_for(250)
    assert shrink_runs_for(60) < shrink_runs_for(250)


def test_a_property_run_that_ends_without_a_result_names_its_status_and_its_error() -> None:
    log = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
           "hypothesis.errors.Unsatisfiable: Unable to satisfy assumptions\n\n")
    exited = _property_ended(RunReply(status="exited", code=1), log)
    assert exited == ("the property run exited with status 1: "
                      "hypothesis.errors.Unsatisfiable: Unable to satisfy assumptions")
    killed = _property_ended(RunReply(status="killed", signal=9), "epoch 3\n")
    assert killed == "the property run was killed by signal 9"
