"""The normative sentences and the coverage map: every sentence quotes its clause's text, every
observable sentence has a check that exercises it and a mutant that proves the check can fail it
(but for the known gaps, which only shrink), and explain and the spec pages show the map.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from tests.mutants.registry import PROOFS_MODULE, declarations, render_proofs
from trainspec.conformance.checks import CHECKS
from trainspec.conformance.checks.coverage import (
    Coverage,
    clause_markdown,
    coverage_map,
    declaration_problems,
    explain_lines,
    scenarios_of,
    summary_markdown,
)
from trainspec.conformance.cli import main
from trainspec.conformance.report.specdocs import render_family, render_index
from trainspec.conformance.spec.clauses import CLAUSES, Clause
from trainspec.conformance.spec.mutant_proofs import PROOFS
from trainspec.conformance.spec.sentences import (
    OUTLINE_DIFFERENCES,
    SENTENCES,
    MutantProof,
    get,
    sentences_of,
)
from trainspec.errors import UsageError

# Observable sentences that lack a check ("no check") or a mutant proving a check can fail them
# ("no mutant"), as phase 1 of the sentence map found them. Close a gap by adding the check case
# (and its covers=) or the mutant (and its proves=), then delete its line here: the test below
# fails while a closed gap is still listed, so this list only shrinks.
KNOWN_GAPS: dict[str, str] = {
}

_KEYWORD = re.compile(r"\b(MUST|SHOULD)\b")


def _spans(clause: Clause) -> list[tuple[int, int]]:
    """Where each sentence of the clause lies in its text, searched in order."""
    spans, at = [], 0
    for sentence in sentences_of(clause.id):
        start = clause.text.find(sentence.wording, at)
        assert start >= 0, f"{sentence.id} is not in {clause.id}'s text after offset {at}"
        spans.append((start, start + len(sentence.wording)))
        at = start + len(sentence.wording)
    return spans


# ---------------------------------------------------------------- the sentences

@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.id)
def test_every_sentence_quotes_its_clauses_text_in_order_without_overlap(
        clause: Clause) -> None:
    spans = _spans(clause)  # each found after the end of the one before
    assert len(spans) == len(sentences_of(clause.id)) > 0
    assert all(s.wording == s.wording.strip() != "" for s in sentences_of(clause.id))


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.id)
def test_the_sentences_of_a_clause_cover_every_must_and_should_of_its_text(
        clause: Clause) -> None:
    spans = _spans(clause)
    outside = [m.start() for m in _KEYWORD.finditer(clause.text)
               if not any(a <= m.start() < b for a, b in spans)]
    assert outside == []


def test_sentence_ids_number_each_clauses_sentences_from_one() -> None:
    for clause in CLAUSES:
        ids = [s.id for s in sentences_of(clause.id)]
        assert ids == [f"{clause.id}.{n}" for n in range(1, len(ids) + 1)]
    assert len({s.id for s in SENTENCES}) == len(SENTENCES)
    assert {s.clause_id for s in SENTENCES} == {c.id for c in CLAUSES}


def test_a_sentence_is_marked_not_observable_only_with_its_reason() -> None:
    for sentence in SENTENCES:
        assert bool(sentence.reason.strip()) == (not sentence.observable), sentence.id


def test_a_sentence_is_found_by_its_id_whatever_the_case() -> None:
    assert get("res-5.4") is get(" RES-5.4 ")
    assert get("RES-5.4").wording.startswith("restoring MUST be all or nothing")
    assert get("RES-5.4").level == "MUST"


def test_an_unknown_sentence_id_names_the_sentences_its_clause_has() -> None:
    with pytest.raises(UsageError, match=r"'RES-5\.9': RES-5 has the sentences RES-5\.1, "):
        get("RES-5.9")


# ---------------------------------------------------------------- the declarations

def test_every_check_covers_sentences_that_exist() -> None:
    assert declaration_problems() == []


def test_every_mutant_declaration_proves_sentences_its_check_covers() -> None:
    pairs = declarations()
    missing = [p.id for p in pairs if not p.proves]
    assert missing == []
    live = [MutantProof(mutant=p.mutant, check=p.check, expect=p.expect, proves=p.proves,
                        slip=p.slip) for p in pairs]
    assert declaration_problems(proofs=live) == []


def test_the_generated_mutant_proofs_match_the_declarations() -> None:
    assert PROOFS_MODULE.read_text(encoding="utf-8") == render_proofs(declarations()), \
        "conformance/spec/mutant_proofs.json is stale: run python -m tests.mutants.registry"


def test_a_mutant_proving_a_sentence_its_check_does_not_cover_is_reported() -> None:
    proof = next(p for p in PROOFS if p.check == "check_resume_refuses_state_that_does_not_fit")
    wrong = replace(proof, proves=("RES-1.1",))
    assert declaration_problems(proofs=[wrong]) == [
        f"{proof.mutant} on {proof.check}: proves 'RES-1.1', which the check does not cover"]


def test_a_check_that_covers_nothing_or_an_unknown_sentence_is_reported() -> None:
    spec = CHECKS["check_best_weights_are_a_copy"]
    found = declaration_problems(checks={"a": replace(spec, covers=()),
                                         "b": replace(spec, covers=("BEST-2.7",))}, proofs=[])
    assert found == [f"{spec.name}: covers no sentence (add covers=(...) to its @check)",
                     f"{spec.name}: covers 'BEST-2.7', which is no sentence ID"]


# ---------------------------------------------------------------- the map and its gaps

def test_every_observable_sentence_has_a_check_and_a_mutant_but_the_known_gaps() -> None:
    new = {k: v for k, v in coverage_map().gaps.items() if KNOWN_GAPS.get(k) != v}
    assert new == {}, "a sentence lost its check or mutant (or a new sentence has none)"


def test_a_closed_gap_is_no_longer_listed_as_known() -> None:
    gaps = coverage_map().gaps
    closed = {k: v for k, v in KNOWN_GAPS.items() if gaps.get(k) != v}
    assert closed == {}, "close these in KNOWN_GAPS: the gap is gone or has changed"


def test_a_sentence_that_is_not_observable_is_no_gap() -> None:
    hidden = {s.id for s in SENTENCES if not s.observable}
    assert hidden == {"PAT-3.3", "RES-2.2", "DIST-5.2", "CKPT-2.3"}
    assert not hidden & set(coverage_map().gaps)


def test_the_map_counts_sentences_checks_and_mutants_consistently() -> None:
    coverage = coverage_map()
    observable = len(coverage.observable)
    assert len(coverage.sentences) == len(SENTENCES)
    assert observable + len(coverage.not_observable) == len(SENTENCES)
    assert observable - coverage.with_check == sum(v == "no check" for v in KNOWN_GAPS.values())
    assert coverage.with_mutant <= coverage.with_check


def test_a_check_names_the_scenarios_its_code_and_its_helpers_build() -> None:
    assert scenarios_of(CHECKS["check_resume_refuses_state_that_does_not_fit"]) == (
        "res-fit", "res-fit-*", "res-fit-same")
    assert "res" in scenarios_of(CHECKS["check_resume_keeps_best_and_patience"])  # via a helper
    assert scenarios_of(CHECKS["check_decisions_match_the_oracle"]) == (
        "hypothesis property decisions",)


def test_the_map_lists_the_checks_scenarios_and_mutants_of_a_sentence() -> None:
    entry = coverage_map().of("RES-5.1")
    assert entry.checks == ("check_resume_refuses_state_that_does_not_fit",)
    assert "res-fit" in entry.scenarios
    assert [p.mutant for p in entry.mutants] == ["res:SkipsStateThatDoesNotFit"]


# ---------------------------------------------------------------- showing it

def _with_gap(sentence_id: str) -> Coverage:
    """The map as it would be if no check covered, and no mutant proved, the sentence."""
    checks = {n: replace(s, covers=tuple(c for c in s.covers if c != sentence_id))
              for n, s in CHECKS.items()}
    proofs = [replace(p, proves=tuple(c for c in p.proves if c != sentence_id)) for p in PROOFS]
    return coverage_map(checks=checks, proofs=proofs)


def test_explain_prints_each_sentence_with_its_checks_and_mutants(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "RES-5"]) == 0
    out = capsys.readouterr().out
    section = out.split("Sentences (")[1]
    for sentence in sentences_of("RES-5"):
        assert f"  {sentence.id}" in section
    assert "check: check_resume_refuses_state_that_does_not_fit" in section
    assert "mutant: res:SkipsStateThatDoesNotFit fails" in section
    gap = "\n".join(explain_lines("RES-5", _with_gap("RES-5.4"))).split("RES-5.4")[1]
    assert "check: none yet (a gap)" in gap


def test_explain_of_a_sentence_id_prints_its_clause_and_that_sentence_only(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "res-5.4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("RES-5 (MUST): ")
    section = out.split("Sentences (")[1]
    assert "RES-5.4" in section
    assert "RES-5.1" not in section


def test_explain_of_an_unknown_sentence_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "RES-5.9"]) == 2
    assert "unknown sentence 'RES-5.9'" in capsys.readouterr().err


def test_explain_says_why_a_sentence_is_not_observable() -> None:
    text = "\n".join(explain_lines("CKPT-2.3"))
    assert "not observable: durability against power loss" in text


def test_a_spec_page_shows_the_sentences_under_each_clause() -> None:
    page = render_family("RES")
    section = page.split("(res-5)=")[1]
    assert "**Sentences.**" in section
    assert "- **RES-5.1** “Under resume, checkpoint state" in section
    assert "Proven by the mutant `res:SkipsStateThatDoesNotFit`" in section
    gap = "\n".join(clause_markdown("RES-5", _with_gap("RES-5.4"))).split("**RES-5.4**")[1]
    assert "**No check yet.**" in gap
    assert "**No mutant yet**" in gap
    hidden = "\n".join(clause_markdown("RES-2")).split("**RES-2.2**")[1]
    assert hidden.splitlines()[1].startswith("  - *Not observable:* informative")


def test_the_spec_index_says_the_registry_text_is_normative_and_counts_the_sentences() -> None:
    index = render_index()
    coverage = coverage_map()
    assert "registry text is the normative one; its title is a summary" in index
    line = next(x for x in summary_markdown() if x.startswith("**Coverage.**"))
    assert line in index
    assert (f"{len(SENTENCES)} sentences: {len(coverage.observable)} observable, of which "
            f"{coverage.with_check} have a check and {coverage.with_mutant} a mutant; 4 not "
            "observable: PAT-3.3 (") in line


def test_the_spec_index_lists_each_clause_whose_text_differs_from_the_outline() -> None:
    assert list(OUTLINE_DIFFERENCES) == [c.id for c in CLAUSES if c.id in OUTLINE_DIFFERENCES]
    index = render_index()
    assert "where they differ, the registry text holds" in index
    for clause_id in OUTLINE_DIFFERENCES:
        assert f"[{clause_id}](#{clause_id.lower()}) " in index
