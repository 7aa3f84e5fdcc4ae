"""A wrong target is a usage error, found before any check: never a verdict, nothing left behind.

``--base-trainer`` naming a class of another shape, or a module that does not import, exits 2
with the missing members or the import error named, and no check runs. The property checks'
Hypothesis caches go to a scratch folder, never into the user's working directory.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainspec", "check", *args, "--world-size",
                           "1", "--report", str(tmp_path / "r.json")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)


@pytest.mark.parametrize(("ref", "named"), [
    ("json:JSONDecoder", "not in the seed's shape, it lacks setup, train_epoch, val_epoch"),
    ("no_such_module_here:Trainer", "cannot import module 'no_such_module_here'"),
    ("json:NoSuchClass", "module 'json' has no attribute 'NoSuchClass'"),
    ("json:dumps", "expected a class, got function"),
])
def test_a_wrong_base_trainer_exits_2_before_any_check(tmp_path: Path, ref: str,
                                                       named: str) -> None:
    proc = _check(tmp_path, "--base-trainer", ref, "--clauses", "LOOP-1,PAT-5")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"trainspec: error: target {ref}: "), proc.stderr
    assert named in proc.stderr
    assert not re.search(r"\[ *1/\d+\]", proc.stdout)  # no check started
    assert not (tmp_path / "r.json").exists() or '"complete": true' not in \
        (tmp_path / "r.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "r.json") == []


def test_a_property_check_leaves_no_hypothesis_folder(tmp_path: Path) -> None:
    # in an interpreter of its own, as in a worker: a property forks a process per example,
    # which a process running threads (a pytest-xdist worker's) must not do
    code = ("import json; from trainspec.conformance.checks.properties import run_property; "
            "from trainspec.adapters.base_trainer import BaseTrainerAdapter; "
            "print(json.dumps(run_property('decisions', BaseTrainerAdapter(), max_examples=3)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["examples"] == 3
    assert json.dumps(outcome)  # JSON-able, as the worker sends it
    assert list(tmp_path.iterdir()) == []
