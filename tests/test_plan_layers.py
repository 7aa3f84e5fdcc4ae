"""The layering of the plan and the reports, enforced from the source.

Configuration enters at the top: the command line and the pytest plugin read the environment
and put what they read in the plan; nothing below them reads ``os.environ`` for
configuration. The runner depends on no report writer (the layers themselves are in
test_layout.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "conformance"
ENTRY_POINTS = {"cli.py", "plugin.py", "audit_cli.py", "command.py"}
# modules below the entry points that touch os.environ for something other than configuration
PROCESS_ENV = {
    "run/session.py": "passes its own environment on to the worker processes it starts",
    "run/template.py": "sets, in a worker forked from the template, the environment its "
                       "harness gave it",
    "run/child.py": "applies a run's torchrun variables (RANK, ...) inside the forked child",
    "run/memory.py": "applies a generated multi-rank run's torchrun variables in each rank's fork",
    "launching.py": "reads the launcher's own variables (torchrun's, SLURM's) to serve its rank",
    "run/launched.py": "the launch's rendezvous address, as the launcher set it",
    "run/world.py": "passes NCCL's error handling on to the ranks, beside what the user set",
    "run/profiling.py": "where the benchmark's run times go, set by the benchmark itself",
    "run/audithooks.py": "a real run's shared run id, from the launcher's own job variables",
}


def modules() -> list[tuple[str, ast.Module]]:
    return [(p.relative_to(ROOT).as_posix(), ast.parse(p.read_text(encoding="utf-8")))
            for p in sorted(ROOT.rglob("*.py"))]


def reads_environment(tree: ast.Module) -> list[int]:
    """Lines that use ``os.environ`` or ``os.getenv``."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "os" and node.attr in ("environ", "getenv")]


def imported(tree: ast.Module) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
    return out


def test_no_module_below_the_entry_points_reads_configuration_from_the_environment() -> None:
    found = [f"{rel}:{line}" for rel, tree in modules()
             if rel not in ENTRY_POINTS and rel not in PROCESS_ENV
             for line in reads_environment(tree)]
    assert found == []


@pytest.mark.parametrize("rel", sorted(PROCESS_ENV))
def test_the_process_environment_exceptions_still_exist(rel: str) -> None:
    assert (ROOT / rel).is_file()


def test_the_runner_imports_no_report_writer() -> None:
    (tree,) = [t for rel, t in modules() if rel == "runner.py"]
    assert not [m for m in imported(tree) if m.startswith("trainspec.conformance.report")]
