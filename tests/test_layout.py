"""The dependency rules of design.md, enforced from the imports themselves.

``trainspec.reference`` imports torch only; ``trainspec.conformance`` imports torch, pytest,
hypothesis and torchmetrics, never a framework and never an adapter or the reference; each
adapter imports the suite's public types and its one framework, the framework lazily (inside a
function). Every import counts, top-level or inside a function.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}

# package folder -> third-party top-level modules it may import, and trainspec modules
RULES: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "reference": (frozenset({"torch"}), ("trainspec.reference", "trainspec.errors")),
    "conformance": (frozenset({"torch", "pytest", "hypothesis", "torchmetrics"}),
                    ("trainspec.conformance", "trainspec.errors", "trainspec")),
    "adapters": (frozenset({"torch"}), ("trainspec.conformance", "trainspec.errors",
                                        "trainspec.adapters")),
}
# a module's own extra dependency: the example trainer scores with torchmetrics; the seed-shape
# adapter builds an omegaconf config, lazily, for classes that take one
EXTRA = {"reference/example.py": {"torchmetrics"}, "adapters/base_trainer.py": {"omegaconf"},
         "adapters/lightning/__init__.py": {"lightning"},
         "adapters/lightning/module.py": {"lightning"},
         "adapters/ignite/__init__.py": {"ignite"}, "adapters/ignite/run.py": {"ignite"},
         "adapters/hf/__init__.py": {"transformers"}, "adapters/hf/run.py": {"transformers"},
         "adapters/hf/files.py": {"transformers", "safetensors"},
         "adapters/hf/task.py": {"torchmetrics"},
         "adapters/keras/run.py": {"keras"}, "adapters/keras/files.py": {"h5py"},
         "adapters/poutyne/run.py": {"poutyne"},
         "adapters/skorch/__init__.py": {"skorch"}, "adapters/skorch/run.py": {"skorch"},
         # the ready audit callbacks (trainspec audit), one per framework
         **{f"adapters/{fw}/audit.py": {fw} for fw in ("lightning", "ignite", "keras",
                                                        "poutyne", "skorch")},
         "adapters/hf/audit.py": {"transformers"}}
# optional everywhere, imported inside a function only: numpy's RNG is saved when numpy exists
OPTIONAL = frozenset({"numpy"})


def imports(path: Path) -> Iterator[tuple[str, int, bool]]:
    """(module, line, is_top_level) for every import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, id(node) in top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno, id(node) in top


def violations(folder: str) -> list[str]:
    third_party, internal = RULES[folder]
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        allowed = third_party | EXTRA.get(rel, set())
        for module, line, is_top in imports(path):
            head = module.split(".")[0]
            if head in STDLIB or (head in OPTIONAL and not is_top):
                continue
            if head == "trainspec":
                if module == "trainspec" or any(module == p or module.startswith(p + ".")
                                                for p in internal if p != "trainspec"):
                    continue
                found.append(f"{rel}:{line} imports {module}")
            elif head not in allowed:
                found.append(f"{rel}:{line} imports {module}")
            elif head in EXTRA.get(rel, set()) and folder == "adapters" and is_top:
                found.append(f"{rel}:{line} imports its framework {module} at module level")
    return found


@pytest.mark.parametrize("folder", sorted(RULES))
def test_each_subpackage_imports_only_what_design_allows(folder: str) -> None:
    assert violations(folder) == []


def test_the_rules_catch_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import lightning\nfrom trainspec.conformance import api\n")
    found = [module for module, _, _ in imports(sample)]
    assert found == ["lightning", "trainspec.conformance"]
    third_party, internal = RULES["reference"]
    assert "lightning" not in third_party
    assert not any("trainspec.conformance".startswith(p) for p in internal)


def test_the_package_root_stays_light() -> None:
    # importing trainspec (for the reference) must not pull in the suite
    top_level = [m for m, _, is_top in imports(ROOT / "trainspec" / "__init__.py") if is_top]
    assert all(m.split(".")[0] in STDLIB or m == "trainspec.errors" for m in top_level)


# ------------------------------------------------------------ layers inside the suite
# conformance/<layer>/ -> the conformance layers it may import (ARCHITECTURE.md): spec is pure,
# run sits on spec, checks on both, report renders results only. The entry points at the top
# (api, runner, targets, cli, plugin, deviations) may import any layer.
LAYERS: dict[str, frozenset[str]] = {
    "spec": frozenset({"spec"}),
    "run": frozenset({"spec", "run"}),
    "checks": frozenset({"spec", "run", "checks"}),
    "report": frozenset({"spec", "report"}),
    # the audit of a recorded real run: reads the run layer's logs, judges with the spec's
    # oracle; never the checks (they drive scenarios) and never a writer
    "audit": frozenset({"spec", "run", "audit"}),
}
# (file, layer) pairs allowed inside a function only, each with its reason
LAZY_EXCEPTIONS = {
    # the spec pages name the checks that verify each clause
    ("conformance/report/specdocs.py", "checks"),
}
PURE = frozenset({"spec"})  # layers that must not import torch (no processes, no tensors)
# selftest is one package (conformance/selftest/) at the entry points' level: no layer imports it
TOP_LEVEL_LAYERS = frozenset({"api", "runner", "targets", "cli", "plugin", "deviations",
                              "selftest", "audit_cli"})


def layer_violations() -> list[str]:
    found = []
    for layer, allowed in LAYERS.items():
        for path in sorted((ROOT / "conformance" / layer).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for module, line, is_top in imports(path):
                parts = module.split(".")
                if layer in PURE and parts[0] == "torch":
                    found.append(f"{rel}:{line} imports torch (the {layer} layer is pure)")
                if parts[:2] != ["trainspec", "conformance"] or len(parts) < 3:
                    continue
                target = parts[2]
                if target in TOP_LEVEL_LAYERS:
                    found.append(f"{rel}:{line} imports the entry point {module}")
                elif target not in allowed and not (
                        (rel, target) in LAZY_EXCEPTIONS and not is_top):
                    found.append(f"{rel}:{line} imports {module} (layer {target})")
    return found


def test_each_layer_of_the_suite_imports_only_the_layers_below_it() -> None:
    assert layer_violations() == []


# ------------------------------------------------------------------------ sizes
# a module of the package fits about 400 lines and a function a screen (style.md); these are
# longer for a reason their docstrings give
LONG_MODULES = {
    "conformance/spec/clauses.py": "data: one entry per clause of the spec",
    "reference/trainer.py": "the loop and the state its checkpoints carry are one unit",
}
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60


def package_files() -> list[Path]:
    return sorted(p for folder in ("reference", "conformance", "adapters")
                  for p in (ROOT / folder).rglob("*.py"))


def test_no_module_of_the_package_is_over_400_lines() -> None:
    long = {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
            for p in package_files()}
    over = {rel: n for rel, n in long.items() if n > MAX_MODULE_LINES and rel not in LONG_MODULES}
    assert over == {}


def test_no_function_of_the_package_is_over_a_screen() -> None:
    over = []
    for path in package_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    over.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
                                f"({length} lines)")
    assert over == []


def test_every_long_module_exemption_still_applies() -> None:
    for rel in LONG_MODULES:
        assert len((ROOT / rel).read_text(encoding="utf-8").splitlines()) > MAX_MODULE_LINES, rel


# ------------------------------------------------------------------------ import circles
def module_imports() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports, lazily or not (``from
    PKG import SUB`` counts as importing the submodule SUB, not PKG's own code)."""
    files: dict[str, Path] = {}
    for path in [*package_files(), ROOT / "trainspec" / "kit.py"]:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[0] != "trainspec":
            parts.insert(0, "trainspec")
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    head = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*head, base] if base else head)
                subs = [f"{base}.{alias.name}" for alias in node.names
                        if f"{base}.{alias.name}" in files]
                found = subs if len(subs) == len(node.names) else [base, *subs]
            for each in found:
                imported = each
                while imported and imported not in files:
                    imported = imported.rpartition(".")[0]
                if imported and imported != name:
                    graph[name].add(imported)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return circles


def test_import_circles_are_found() -> None:
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_package_takes_part_in_an_import_circle() -> None:
    graph = module_imports()
    assert "trainspec.conformance.runner" in graph["trainspec.conformance.api"]  # it sees imports
    assert import_circles(graph) == []
