"""The README badge: a shields.io endpoint JSON written by ``trainspec check --badge FILE.json``.

::

    {"schemaVersion": 1, "label": "trainspec", "message": "40/42 (2 deviations)", "color": "green"}

The message counts the clauses that pass out of every clause of the spec (a clause not checked,
``n/a`` or failing does not count), with the declared deviations in brackets when there are
any. The color is green when the target is conformant (every checked MUST clause passes or is a
declared deviation) and red when it is not. Serve the file and point shields.io at it:
``https://img.shields.io/endpoint?url=<the file's URL>``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainspec.conformance.report.output import write_text
from trainspec.conformance.spec.results import Report

__all__ = ["badge", "write_badge"]


def badge(report: Report) -> dict[str, Any]:
    """The shields.io endpoint object for ``report``."""
    counts = report.summary
    message = f"{counts['pass']}/{len(report.clauses)}"
    deviations = counts["deviation"]
    if deviations:
        message += f" ({deviations} deviation{'s' if deviations > 1 else ''})"
    return {"schemaVersion": 1, "label": "trainspec", "message": message,
            "color": "green" if report.conformant else "red"}


def write_badge(report: Report, path: str | Path) -> None:
    """Write :func:`badge` to ``path`` as JSON."""
    write_text(path, json.dumps(badge(report)) + "\n", "--badge", "badge")
