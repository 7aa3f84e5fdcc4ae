"""Project-wide test configuration: hypothesis profiles, and the reference's harness."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.harnesses import repo_harness
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.runner import resolve_target

# dev: fast feedback; ci: more examples, derandomized so a red CI is reproducible
settings.register_profile("dev", max_examples=30, deadline=None)
settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(scope="module")
def harness_timeout_s() -> float:
    """The bound on each run of the module's :func:`harness`, in seconds; a module that
    needs another bound defines a fixture of this name."""
    return 60.0


@pytest.fixture(scope="module")
def harness(harness_timeout_s: float) -> Iterator[Harness]:
    """One warm harness per module for the reference target, whose workers import the
    repository's tests (mutants, seed-shape trainers, bad adapters) as ``tests.*``; a test
    names its own target through ``open_context`` or ``run_checks(harness=...)``. A module
    that needs a harness of another target defines its own fixture of this name."""
    with repo_harness(resolve_target("reference").adapter, timeout_s=harness_timeout_s) as h:
        yield h
