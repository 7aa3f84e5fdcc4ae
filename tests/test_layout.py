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
         "adapters/lightning.py": {"lightning"}, "adapters/lightning_module.py": {"lightning"},
         "adapters/ignite.py": {"ignite"}, "adapters/ignite_run.py": {"ignite"},
         "adapters/hf.py": {"transformers"}, "adapters/hf_run.py": {"transformers"},
         "adapters/hf_files.py": {"transformers", "safetensors"},
         "adapters/hf_task.py": {"torchmetrics"},
         "adapters/keras_run.py": {"keras"}, "adapters/keras_files.py": {"h5py"}}
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
