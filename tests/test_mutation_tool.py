"""The mutation score's tool (benchmarks/mutation.py) makes the mutants it says it makes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("cosmic_ray")

from benchmarks import mutation

SOURCE = '''from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    LIMIT = 1 | 2


def patience_left(bad: int | None, patience: int) -> bool:
    flags = 1 | 2
    return bad is not None and bad < patience


class Loop:
    @property
    def done(self) -> bool:
        return self.epoch >= 3
'''


@pytest.fixture
def mutants(tmp_path: Path) -> list[mutation.Mutant]:
    path = tmp_path / "loop.py"
    path.write_text(SOURCE)
    return mutation.generate((str(path),))


def test_annotations_and_type_checking_blocks_are_never_mutated(
        mutants: list[mutation.Mutant]) -> None:
    bit_or = [m for m in mutants if m.operator == "ReplaceBinaryOperator_BitOr_BitAnd"]
    # `int | None` (an annotation) and `1 | 2` under TYPE_CHECKING: neither evaluated in a run
    assert [(m.line, m.before) for m in bit_or] == [(10, "flags = 1 | 2")]


def test_each_mutant_names_its_function_and_its_changed_line(
        mutants: list[mutation.Mutant]) -> None:
    flip = next(m for m in mutants if m.operator == "ReplaceComparisonOperator_Lt_LtE")
    assert (flip.function, flip.line) == ("patience_left", 11)
    assert flip.after() == "return bad is not None and bad <= patience"
    boundary = next(m for m in mutants if m.operator == "ReplaceComparisonOperator_GtE_Gt")
    assert boundary.function == "Loop.done"
    decorator = next(m for m in mutants if m.operator == "RemoveDecorator")
    assert decorator.function == "Loop.done"  # the decorator's line belongs to its function


def test_a_mutant_outside_any_function_is_checked_on_every_clause(
        mutants: list[mutation.Mutant]) -> None:
    mapping = {f"{mutants[0].file}:patience_left": ["PAT-1", "PAT-2"]}
    inside = next(m for m in mutants if m.function == "patience_left")
    assert mutation.clauses_for(inside, mapping) == ["PAT-1", "PAT-2"]
    unmapped = next(m for m in mutants if m.function == "Loop.done")
    assert mutation.clauses_for(unmapped, mapping) == []  # [] selects every clause


def test_the_sample_is_fixed_by_its_seed(mutants: list[mutation.Mutant]) -> None:
    one = mutation.sample(mutants, 4, seed=0)
    assert one == mutation.sample(mutants, 4, seed=0)
    assert len(one) == 4
    assert [mutants.index(m) for m in one] == sorted(mutants.index(m) for m in one)


def test_the_report_scores_only_non_equivalent_mutants(mutants: list[mutation.Mutant]) -> None:
    a, b, c = mutants[:3]
    outcomes = [mutation.Outcome(id=a.id, status="killed", clauses=["PAT-1"], failed=["PAT-1"],
                                 seconds=1.0),
                mutation.Outcome(id=b.id, status="survived", clauses=[], failed=[], seconds=1.0),
                mutation.Outcome(id=c.id, status="survived", clauses=[], failed=[], seconds=1.0)]
    triage = {b.id: {"kind": "equivalent", "why": "no run reaches it"}}
    text = mutation.render(mutants, outcomes, triage, wall_s=60.0)
    assert "**Score: 1 of 2 scored mutants killed (50.0%)**" in text
    assert f"`{b.id}`" in text
    assert "**equivalent**: no run reaches it" in text
    assert "**not triaged**" in text
    assert f"{len(mutants) - 3} not checked yet" in text


@pytest.mark.slow
def test_a_patience_mutant_is_killed_in_a_tree_of_its_own_and_the_reference_stays() -> None:
    # patience_left <= 0 -> < 0: the run stops one validation late; PAT-1's check fails it
    mutant = next(m for m in mutation.generate(("reference/trainer.py",))
                  if m.id == "reference/trainer.py:ReplaceComparisonOperator_LtE_Lt:0")
    assert mutant.after() == "return self.patience_left < 0"
    before = (mutation.ROOT / mutant.file).read_bytes()
    with mutation._tree() as tree:
        outcome = mutation.check_mutant(mutant, ["PAT-1"], tree)
        assert (tree / "trainspec" / mutant.file).read_bytes() == before  # restored
    assert (outcome.status, outcome.failed) == ("killed", ["PAT-1"]), outcome.detail
    assert (mutation.ROOT / mutant.file).read_bytes() == before
