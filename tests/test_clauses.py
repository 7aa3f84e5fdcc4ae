"""The clause registry matches the outline, and everything that reads it gets what it expects."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainspec.conformance.report.specdocs import (
    main,
    page_name,
    render_family,
    render_index,
    write_spec_pages,
)
from trainspec.conformance.spec import clauses
from trainspec.conformance.spec.clauses import CLAUSES, FAMILIES, FAMILY_TITLES, get, select
from trainspec.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
VENDORED_OUTLINE = REPO / "docs" / "spec-outline.md"
SHARED_OUTLINE = REPO.parent / "shared" / "spec-outline.md"

_ROW = re.compile(r"^\|\s*([A-Z]+-\d+[a-z]?)\s*\|\s*(MUST|SHOULD)\s*\|")


def outline_levels(path: Path) -> dict[str, str]:
    """Clause ID -> level, from the clause table of an outline file."""
    levels: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match:
            assert match.group(1) not in levels, f"{path}: {match.group(1)} listed twice"
            levels[match.group(1)] = match.group(2)
    return levels


def outline_order(path: Path) -> list[str]:
    return list(outline_levels(path))


def registry_levels() -> dict[str, str]:
    return {c.id: c.level for c in CLAUSES}


# ---------------------------------------------------------------- the registry against the outline


def test_the_registry_holds_the_vendored_outlines_clauses_with_their_levels() -> None:
    assert registry_levels() == outline_levels(VENDORED_OUTLINE)


def test_the_registry_lists_clauses_in_outline_order() -> None:
    assert [c.id for c in CLAUSES] == outline_order(VENDORED_OUTLINE)


def test_the_registry_holds_the_shared_outlines_clauses_with_their_levels() -> None:
    if not SHARED_OUTLINE.is_file():
        pytest.skip(f"{SHARED_OUTLINE} is absent outside the development workspace")
    assert registry_levels() == outline_levels(SHARED_OUTLINE)


def test_the_spec_has_42_clauses_with_unique_ids() -> None:
    ids = [c.id for c in CLAUSES]
    assert len(ids) == 42
    assert len(set(ids)) == len(ids)
    assert len({c.anchor for c in CLAUSES}) == len(ids)


def test_every_clause_belongs_to_the_family_its_id_names() -> None:
    for clause in CLAUSES:
        assert clause.id.split("-")[0] == clause.family, clause.id
        assert clause.family in FAMILIES


def test_families_come_in_registry_order_and_each_has_a_title() -> None:
    first_seen = list(dict.fromkeys(c.family for c in CLAUSES))
    assert first_seen == list(FAMILIES)
    assert set(FAMILY_TITLES) == set(FAMILIES)
    assert all(title.strip() for title in FAMILY_TITLES.values())


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.id)
def test_every_clause_has_text_rationale_observable_and_a_short_title(
        clause: clauses.Clause) -> None:
    for field in (clause.title, clause.text, clause.rationale, clause.observable):
        assert field.strip(), clause.id
    assert len(clause.title) <= 60


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.id)
def test_every_clause_text_uses_its_own_level_keyword_only(clause: clauses.Clause) -> None:
    other = "SHOULD" if clause.level == "MUST" else "MUST"
    assert re.search(rf"\b{clause.level}\b", clause.text), clause.text
    assert not re.search(rf"\b{other}\b", clause.text), clause.text


def test_a_clause_anchor_is_its_lowercase_id() -> None:
    assert get("RES-3").anchor == "res-3"


# ---------------------------------------------------------------- lookup


def test_get_finds_a_clause_whatever_the_case() -> None:
    assert get("res-3") is get("RES-3") is get(" Res-3 ")
    assert get("res-3").level == "MUST"


def test_get_rejects_an_unknown_id_naming_it_and_the_families() -> None:
    with pytest.raises(UsageError, match=r"'RES-99'.*LOOP, BEST, NAN, PAT, RES, FT, DIST"):
        get("RES-99")


def test_family_of_names_the_family_of_a_clause() -> None:
    assert clauses.family_of("dbg-5") == "DBG"
    assert clauses.family_of("CKPT-1") == "CKPT"


def test_clauses_of_a_family_are_that_familys_clauses_in_order() -> None:
    assert [c.id for c in clauses.clauses_of("FT")] == ["FT-1", "FT-2", "FT-3", "FT-4"]


# ---------------------------------------------------------------- select


@pytest.mark.parametrize("spec", [None, "", "  ", ","])
def test_select_without_a_value_selects_every_clause(spec: str | None) -> None:
    assert select(spec) == tuple(c.id for c in CLAUSES)


def test_select_expands_a_family_into_its_clauses() -> None:
    assert select("RES") == ("RES-1", "RES-2", "RES-3", "RES-4", "RES-5")


def test_select_mixes_families_and_ids_in_registry_order() -> None:
    assert select("PAT-5, LOOP,res-3") == ("LOOP-1", "LOOP-2", "LOOP-3", "LOOP-4", "PAT-5",
                                           "RES-3")


def test_select_ignores_case_and_whitespace() -> None:
    assert select("  ft , Dbg-2 ") == ("FT-1", "FT-2", "FT-3", "FT-4", "DBG-2")


def test_select_drops_duplicates() -> None:
    assert select("NAN-1,nan,NAN-1,nan-2") == ("NAN-1", "NAN-2", "NAN-3")


def test_select_tolerates_a_trailing_comma() -> None:
    assert select("CKPT-3,") == ("CKPT-3",)


@pytest.mark.parametrize("token", ["RES-9", "LOPP", "res3", "*"])
def test_select_rejects_an_unknown_token_naming_it_and_what_was_expected(token: str) -> None:
    with pytest.raises(UsageError, match=re.escape(repr(token))) as info:
        select(f"LOOP,{token}")
    message = str(info.value)
    assert "clause ID such as RES-3 or a family name" in message
    assert ", ".join(FAMILIES) in message


# ---------------------------------------------------------------- spec pages


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_page_has_an_anchored_section_per_clause_with_its_text(
        family: clauses.Family) -> None:
    page = render_family(family)
    assert page.startswith(f"# {family}: {FAMILY_TITLES[family]}\n")
    for clause in clauses.clauses_of(family):
        heading = f"({clause.anchor})=\n## {clause.id} ({clause.level}): {clause.title}\n"
        assert heading in page
        assert f"> {clause.text}\n" in page
        assert clause.rationale in page
        assert clause.observable in page
    others = [c for c in CLAUSES if c.family != family]
    assert not any(f"({c.anchor})=" in page for c in others)


def test_a_family_page_names_the_registered_checks_or_says_there_is_none() -> None:
    page = render_family("RES", {"RES-3": ["check_resume_keeps_best", "check_resume_patience"]})
    section = page.split("(res-3)=")[1].split("(res-4)=")[0]
    assert "**Checked by:** `check_resume_keeps_best`, `check_resume_patience`" in section
    other = page.split("(res-4)=")[1]
    assert "**Checked by:** no check yet" in other


def test_the_index_links_every_family_page_and_every_clause() -> None:
    index = render_index()
    for family in FAMILIES:
        assert f"]({page_name(family)})" in index
    for clause in CLAUSES:
        assert f"[{clause.id}](#{clause.anchor})" in index


def test_the_spec_pages_are_written_as_an_index_and_one_page_per_family(
        tmp_path: Path) -> None:
    written = write_spec_pages(tmp_path / "spec")
    assert [p.name for p in written] == ["index.md", *(f"{f.lower()}.md" for f in FAMILIES)]
    assert (tmp_path / "spec" / "res.md").read_text(encoding="utf-8") == render_family("RES")


def test_the_specdocs_command_writes_the_pages_where_it_is_told(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 0
    assert (tmp_path / "index.md").is_file()
    assert str(tmp_path / "ckpt.md") in capsys.readouterr().out


def test_the_committed_spec_pages_anchor_every_clause_of_their_family() -> None:
    spec_dir = REPO / "docs" / "spec"
    for family in FAMILIES:
        page = (spec_dir / page_name(family)).read_text(encoding="utf-8")
        for clause in clauses.clauses_of(family):
            assert f"({clause.anchor})=" in page, f"{family}: {clause.id} missing"
            assert clause.text in page, f"{family}: {clause.id} text out of date"
