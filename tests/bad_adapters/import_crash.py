"""An adapter module whose import raises something other than ImportError."""

from __future__ import annotations

CONFIG: dict[str, str] = {}
FRAMEWORK_HOME = CONFIG["framework_home"]  # KeyError at import


class NeverDefined:
    """Never reached: the module-level lookup above raises KeyError."""
