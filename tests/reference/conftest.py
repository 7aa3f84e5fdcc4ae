"""Shared setup of the reference trainer's tests.

The scripted trainer and its tools live in ``reference_helpers.py`` next to this file; test
modules import it as ``tests.reference.reference_helpers``, the name mypy knows it by. The
repository root goes on ``sys.path`` for that, whatever the import mode; the children that the
distributed tests spawn inherit it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # last: nothing installed is shadowed


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(*ids): the spec clauses a test exercises")

