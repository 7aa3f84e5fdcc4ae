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


def test_an_unobservable_mutant_must_name_a_sentence_the_spec_declares_unobservable(
        tmp_path: Path) -> None:
    path = tmp_path / "triage.toml"
    entry = '[mutant."f.py:AddNot:0"]\nkind = "unobservable"\nwhy = "only a power loss"\n'
    path.write_text(entry + 'sentence = "CKPT-2.3"\n')
    assert mutation.load_triage(path)["f.py:AddNot:0"]["sentence"] == "CKPT-2.3"
    path.write_text(entry + 'sentence = "CKPT-2.1"\n')  # observable: judged by a kill
    with pytest.raises(SystemExit, match="must name a sentence the sentence map declares"):
        mutation.load_triage(path)
    path.write_text(entry)
    with pytest.raises(SystemExit, match="found none"):
        mutation.load_triage(path)
    path.write_text('[mutant."f.py:AddNot:0"]\nkind = "harmless"\nwhy = "?"\n')
    with pytest.raises(SystemExit, match="'harmless' is not one of"):
        mutation.load_triage(path)


def test_the_first_failing_check_is_read_from_the_progress_line_the_command_prints() -> None:
    # the tool ends a mutant's check at the first failing check: it reads `check`'s own
    # progress lines, so the two formats are tested together
    import io

    from trainspec.conformance.cli import _Progress
    from trainspec.conformance.spec.results import CheckResult

    stream = io.StringIO()
    progress = _Progress(12, stream)
    for outcome in ("passed", "n/a", "failed", "error", "timeout"):
        progress(CheckResult(name=f"check_{outcome.replace('/', '')}", clauses=("PAT-1",),
                             outcome=outcome, evidence="", duration_s=1.5))
    found = [m.group(2) for line in stream.getvalue().splitlines()
             if (m := mutation._PROGRESS.match(line))]
    assert found == ["check_failed", "check_error", "check_timeout"]


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


def _called_in_the_fork() -> bytes:
    return b"ok"


def test_a_forked_run_writes_its_profile_so_the_clause_map_sees_what_generated_runs_call(
        tmp_path: Path) -> None:
    # generated runs and forked file reads end with os._exit: without their own profile the
    # map missed every reference function only they call (the resumes a model check draws)
    import pstats

    from trainspec.conformance.run.memory import _in_forks
    from trainspec.conformance.run.profiling import profiled

    with profiled(tmp_path, "property"):
        assert _in_forks([_called_in_the_fork]) == [(b"ok", "ended")]
    forked = list(tmp_path.glob("fork-*.prof"))
    assert len(forked) == 1
    called = {name for _file, _line, name in pstats.Stats(str(forked[0])).stats}  # type: ignore[attr-defined]
    assert "_called_in_the_fork" in called
    # the process that forked it keeps its own profile, without the fork's calls
    (own,) = tmp_path.glob("property-*.prof")
    assert "_called_in_the_fork" not in {
        name for _file, _line, name in pstats.Stats(str(own)).stats}  # type: ignore[attr-defined]

