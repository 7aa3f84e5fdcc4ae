"""The pytest plugin (entry point ``trainspec``): costs nothing until its options are used."""

from __future__ import annotations

import pytest

__all__ = ["pytest_addoption"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("trainspec", "trainspec conformance checks")
    group.addoption("--trainspec-target", default=None,
                    help="check this target: reference, lightning, hf, ignite, keras, or "
                    "MODULE:OBJECT naming an adapter")
