"""Every clause of the outline has a test of the reference that names it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
OUTLINE_CANDIDATES = [HERE.parents[1] / "docs" / "spec-outline.md",
                      HERE.parents[2] / "shared" / "spec-outline.md"]
CLAUSE_ROW = re.compile(r"^\| ([A-Z]+-\d+[a-z]?) \| (MUST|SHOULD|MAY) \|", re.MULTILINE)


def outline_clause_ids() -> set[str]:
    """The clause IDs of the outline's table: the project's copy, else the shared one."""
    outline = next((p for p in OUTLINE_CANDIDATES if p.exists()), None)
    if outline is None:
        pytest.fail(f"no clause outline; looked for {', '.join(map(str, OUTLINE_CANDIDATES))}")
    return {m.group(1) for m in CLAUSE_ROW.finditer(outline.read_text())}


def marked_clause_ids() -> dict[str, set[str]]:
    """Clause id -> the tests marked with it, read from the test modules' source."""
    marked: dict[str, set[str]] = {}
    for module in sorted(HERE.glob("test_*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for decorator in node.decorator_list:
                if (isinstance(decorator, ast.Call)
                        and ast.unparse(decorator.func) == "pytest.mark.clause"):
                    for arg in decorator.args:
                        assert isinstance(arg, ast.Constant)
                        assert isinstance(arg.value, str)
                        marked.setdefault(arg.value, set()).add(f"{module.stem}::{node.name}")
    return marked


def test_every_outline_clause_has_a_reference_test() -> None:
    outline = outline_clause_ids()
    marked = marked_clause_ids()
    assert len(outline) == 42
    assert sorted(outline - marked.keys()) == [], "clauses without a test"
    assert sorted(marked.keys() - outline) == [], "markers naming no outline clause"
