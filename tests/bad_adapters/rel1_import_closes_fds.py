"""An adapter module that closes every file descriptor at import (a careless daemoniser),
the worker's protocol pipes included."""

from __future__ import annotations

import os

from tests.bad_adapters.common import ShellAdapter

if os.environ.get("TRAINSPEC_REL1_ARMED"):
    os.closerange(0, 256)


class Never(ShellAdapter):
    """Never built: its module closed the pipes the worker answers on."""
