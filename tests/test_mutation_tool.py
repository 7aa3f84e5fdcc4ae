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
    mapping = {"functions": {f"{mutants[0].file}:patience_left": ["PAT-1", "PAT-2"]}}
    inside = next(m for m in mutants if m.function == "patience_left")
    assert mutation.clauses_for(inside, mapping) == ["PAT-1", "PAT-2"]
    unmapped = next(m for m in mutants if m.function == "Loop.done")
    assert mutation.clauses_for(unmapped, mapping) == []  # [] selects every clause


def test_with_a_line_map_a_mutant_is_checked_where_its_lines_run_and_not_run_where_none_do(
        mutants: list[mutation.Mutant], tmp_path: Path) -> None:
    file = mutants[0].file
    # line 11 (`return bad is not None and bad < patience`) runs in PAT-2's and PAT-1's runs;
    # line 17 (`return self.epoch >= 3`) in none: the function map would check it everywhere
    mapping = {"functions": {f"{file}:Loop.done": ["PAT-1"]},
               "lines": {file: {"10": ["BEST-1"], "11": ["PAT-2", "PAT-1"]}}}
    flip = next(m for m in mutants if m.operator == "ReplaceComparisonOperator_Lt_LtE")
    assert mutation.clauses_for(flip, mapping) == ["PAT-1", "PAT-2"]  # in the spec's order
    boundary = next(m for m in mutants if m.operator == "ReplaceComparisonOperator_GtE_Gt")
    assert mutation.clauses_for(boundary, mapping) is None
    tree = tmp_path / "tree"
    tree.mkdir()
    outcome = mutation.check_mutant(boundary, None, tree)  # nothing written, nothing run
    assert (outcome.status, outcome.seconds, outcome.detail) == (
        "unexecuted", 0.0, "no clause's runs execute line 17 (the line map)")
    assert list(tree.iterdir()) == []
    # an unexecuted mutant is triaged as a survivor is: the report lists it, and CI's
    # --require-killed counts it as missed unless triaged outside the score
    text = mutation.render(mutants, [outcome], {}, wall_s=None)
    assert "and 1 on lines no clause's runs execute" in text
    assert f"`{boundary.id}` (line 17, `Loop.done`)" in text
    assert "no clause's runs execute it, not run. **not triaged**" in text


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


TRACED = '''def branch(flag):
    if flag:
        return "forked"
    return "parent"
'''


def test_the_line_map_notes_each_line_a_process_or_its_forked_run_executes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the line map (TRAINSPEC_TRACE_LINES) is what lets the run skip a mutant no run reaches:
    # a line only a forked run executes must be noted, and a line none executes must not
    import importlib.util
    import json
    import sys

    from trainspec.conformance.run.memory import _in_forks
    from trainspec.conformance.run.profiling import TRACE_LINES_ENV, profiled

    source = tmp_path / "traced" / "branchy.py"
    source.parent.mkdir()
    source.write_text(TRACED + "\n\ndef never():\n    return 0\n")
    spec = importlib.util.spec_from_file_location("branchy", source)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv(TRACE_LINES_ENV, str(source.parent))
    before = sys.gettrace()
    prof = tmp_path / "prof"
    prof.mkdir()
    with profiled(prof, "property"):
        assert module.branch(False) == "parent"
        assert _in_forks([lambda: module.branch(True).encode()]) == [(b"forked", "ended")]
    assert sys.gettrace() is before  # the trace function it replaced is back
    real = str(source.resolve())
    (own,) = prof.glob("property-*.lines")
    (forked,) = prof.glob("fork-*.lines")
    assert json.loads(own.read_text()) == {real: [2, 4]}
    # the fork notes what it ran (line 3, which only it ran) and what its parent had before
    # the fork; `never` (line 8) appears in neither
    assert json.loads(forked.read_text()) == {real: [2, 3, 4]}


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



def test_a_map_made_from_other_sources_is_refused(tmp_path: Path) -> None:
    # a line map names lines of the code it was made from: after an edit it could skip a
    # mutant the edited code runs, so the tool refuses it rather than trusting it
    import json

    path = tmp_path / "map.json"
    with pytest.raises(SystemExit, match="is missing"):
        mutation.load_map(path)
    sources = mutation._sources()
    path.write_text(json.dumps({"sources": sources, "functions": {}, "lines": {}}))
    assert mutation.load_map(path)["sources"] == sources
    edited = {**sources, "reference/trainer.py": "0" * 64}
    path.write_text(json.dumps({"sources": edited, "functions": {}, "lines": {}}))
    with pytest.raises(SystemExit, match=r"made from other sources of reference/trainer\.py"):
        mutation.load_map(path)


def test_the_published_map_is_of_the_reference_as_it_is() -> None:
    assert set(mutation.load_map()["lines"]) == set(mutation.FILES)
