"""``python -m trainspec``: the command line, the same as the ``trainspec`` script."""

from __future__ import annotations

from trainspec.conformance.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
