"""An adapter module whose import never returns (a network call at import, a lock)."""

from __future__ import annotations

import os
import time

from tests.bad_adapters.common import ShellAdapter


def import_that_never_returns() -> None:
    """The frame the stack dump of a hung import must show."""
    while True:
        time.sleep(0.05)


if os.environ.get("TRAINSPEC_REL1_ARMED"):
    import_that_never_returns()


class Never(ShellAdapter):
    """Never built: its module does not finish importing."""
