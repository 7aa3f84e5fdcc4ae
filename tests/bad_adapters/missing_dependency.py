"""An adapter module whose import fails: it needs a framework that is not installed."""

from __future__ import annotations

import importlib

importlib.import_module("trainspec_no_such_framework")


class NeverDefined:
    """Never reached: the import above raises ModuleNotFoundError."""
