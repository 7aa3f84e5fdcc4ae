"""Shared setup of the reference trainer's tests.

The scripted trainer and its tools live in ``reference_helpers.py`` next to this file; test
modules import it by name. pytest's default import mode puts this folder on ``sys.path``; the
insert below makes the import work under ``--import-mode=importlib`` too, and in the children
that the distributed tests spawn (they inherit the parent's ``sys.path``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(*ids): the spec clauses a test exercises")

