"""One way for a test module to open a harness whose workers import the repository's tests."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from trainspec.conformance.run.harness import AdapterSpec, Harness

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def repo_harness(adapter: AdapterSpec, *, timeout_s: float = 60.0) -> Iterator[Harness]:
    """A :class:`Harness` for ``adapter`` whose workers find ``tests.*`` (mutants, seed-shape
    trainers, bad adapters) on their path: the repository root is put on ``PYTHONPATH`` for the
    harness's lifetime, and the variable is restored after."""
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), previous) if p)
    try:
        with Harness(adapter, timeout_s=timeout_s) as h:
            yield h
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous
