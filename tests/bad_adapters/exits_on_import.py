"""An adapter module that ends the process when imported (a licence check, a bad ``main``)."""

from __future__ import annotations

import os
import sys

from tests.bad_adapters.common import ShellAdapter

if os.environ.get("TRAINSPEC_TEST_FRAMEWORK_LICENCE") is None:
    sys.exit("no framework licence found: exiting")


class ExitsOnImport(ShellAdapter):
    """Never built: importing the module exits the process."""
