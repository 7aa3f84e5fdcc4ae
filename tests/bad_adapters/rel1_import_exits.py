"""An adapter module that ends its process with ``os._exit`` at import (no exception)."""

from __future__ import annotations

import os

from tests.bad_adapters.common import ShellAdapter

if os.environ.get("TRAINSPEC_REL1_ARMED"):
    os._exit(7)


class Never(ShellAdapter):
    """Never built: importing the module ends the process."""
