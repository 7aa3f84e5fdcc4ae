"""The guides teach the kit alone and state true sizes: every Python block and included file of
``docs/guides/*.md`` imports nothing of trainspec but ``trainspec.kit`` (and ``trainspec``
itself, for ``trainspec.check``), and the size the five-minute guide gives its example adapter
is the docs' own count of its lines of code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.test_worked_adapters import code_lines

REPO = Path(__file__).resolve().parents[1]
GUIDES = REPO / "docs" / "guides"
FIVE_MINUTES = GUIDES / "five-minutes.md"
TINY_ADAPTER = REPO / "tests" / "guides" / "tiny_adapter.py"

# a fence and its body: ```python, ```{code-block} python, ```{literalinclude} PATH
_FENCE = re.compile(r"^```+\s*(\{[\w-]+\})?\s*([^\n]*)\n(.*?)^```+\s*$", re.MULTILINE | re.DOTALL)
# (guide, module) pairs a guide may show although they are not the kit, with the reason
_SHOWN_AS_PRINTED = {
    # the reproducer a failing property check prints, shown as the suite prints it
    ("reading-a-failure.md", "trainspec.conformance.api"),
}


def python_sources(page: Path) -> list[tuple[str, str]]:
    """(where, code) of every Python block of ``page`` and every Python file it includes."""
    out = []
    for match in _FENCE.finditer(page.read_text(encoding="utf-8")):
        directive, argument, body = match.group(1), match.group(2).strip(), match.group(3)
        if directive == "{literalinclude}":
            included = (page.parent / argument).resolve()
            if included.suffix == ".py" or ":language: python" in body:
                where = included.relative_to(REPO) if included.is_relative_to(REPO) \
                    else included
                out.append((str(where), included.read_text(encoding="utf-8")))
        elif directive in (None, "{code-block}", "{code}") and argument in ("python", "py"):
            out.append((f"{page.name}, the block at offset {match.start()}", body))
    return out


def trainspec_imports(code: str) -> list[str]:
    """The trainspec modules (or ``module.name`` for ``from module import name``) ``code``
    imports, wherever the import is."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "trainspec"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == \
                "trainspec" and not node.level:
            module = node.module or ""
            found += [f"{module}.{a.name}" for a in node.names] if module == "trainspec" \
                else [module]
    return found


def outside_the_kit(page: Path) -> list[str]:
    """Each import of ``page``'s Python that is neither the kit nor ``trainspec``'s own
    ``check``, as "where: module"."""
    allowed = {"trainspec", "trainspec.kit", "trainspec.check", "trainspec.Report",
               "trainspec.TrainspecError"}
    bad = []
    for where, code in python_sources(page):
        for module in trainspec_imports(code):
            shown = any(page.name == guide and (module == m or module.startswith(f"{m}."))
                        for guide, m in _SHOWN_AS_PRINTED)
            if module not in allowed and not module.startswith("trainspec.kit.") and not shown:
                bad.append(f"{where}: {module}")
    return bad


def test_the_guides_python_imports_nothing_of_trainspec_but_the_kit() -> None:
    pages = sorted(GUIDES.glob("*.md"))
    assert FIVE_MINUTES in pages
    assert [p for p in pages if python_sources(p)], "no Python found in the guides"
    assert [bad for page in pages for bad in outside_the_kit(page)] == []


def test_the_five_minute_guide_shows_its_example_adapter_and_that_imports_the_kit() -> None:
    shown = dict(python_sources(FIVE_MINUTES))
    code = shown[str(TINY_ADAPTER.relative_to(REPO))]
    assert trainspec_imports(code) == ["trainspec.kit"]


@pytest.mark.parametrize(("code", "bad"), [
    ("from trainspec.conformance.run.records import Setup\n",
     "trainspec.conformance.run.records"),
    ("import trainspec.conformance.spec.causes as causes\n", "trainspec.conformance.spec.causes"),
    ("from trainspec import conformance\n", "trainspec.conformance"),
    ("def f() -> None:\n    from trainspec.conformance import api\n", "trainspec.conformance"),
])
def test_an_import_from_outside_the_kit_is_found_in_a_block_or_an_included_file(
        tmp_path: Path, code: str, bad: str) -> None:
    (tmp_path / "adapter.py").write_text(code, encoding="utf-8")
    page = tmp_path / "guide.md"
    text = ("```python\nfrom trainspec import kit\n```\n\n"
            "```{literalinclude} adapter.py\n:language: python\n```\n")
    page.write_text(text, encoding="utf-8")
    assert [m.rpartition(": ")[2] for m in outside_the_kit(page)] == [bad]
    page.write_text(f"```python\n{code}```\n", encoding="utf-8")
    assert [m.rpartition(": ")[2] for m in outside_the_kit(page)] == [bad]


def test_the_size_the_guide_gives_its_example_adapter_is_its_count_of_lines_of_code() -> None:
    stated = [int(n) for n in re.findall(r"(\d+) lines of code",
                                         FIVE_MINUTES.read_text(encoding="utf-8"))]
    assert len(stated) >= 2  # in the introduction and in the example's caption
    assert set(stated) == {code_lines(TINY_ADAPTER)}
