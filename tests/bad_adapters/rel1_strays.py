"""Adapters that leave processes behind or hang where ``--timeout`` must still reach them.

The processes they start carry the marker of ``$TRAINSPEC_REL1_MARKER`` in their argv, so a
test can look for survivors (tests/test_reliability.py). The import-time misbehaviours live in
``rel1_import_*`` modules, armed by ``$TRAINSPEC_REL1_ARMED`` so that importing them elsewhere
(a linter, a collector) does nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.bad_adapters.common import ShellAdapter
from tests.bad_adapters.hangs import wait_for_a_trainer_that_never_comes
from trainspec.conformance.run.adapter import Capability, RunContext
from trainspec.conformance.run.scenario import Scenario


def start_stray(*, new_session: bool) -> subprocess.Popen[bytes]:
    """A sleeping process whose argv carries the marker; in a new session when asked (it then
    leaves its parent's process group, which the harness kills)."""
    marker = os.environ.get("TRAINSPEC_REL1_MARKER", "rel1-stray")
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker],
                            start_new_session=new_session, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class StartsASetsidStray(ShellAdapter):
    """Each run starts a process in a new session (``setsid``) and returns."""

    name = "starts a setsid stray"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        start_stray(new_session=True)


class HangsAfterASetsidStray(ShellAdapter):
    """Each run starts a process in a new session, then hangs (SIGTERM arrives meanwhile)."""

    name = "hangs after a setsid stray"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        start_stray(new_session=True)
        wait_for_a_trainer_that_never_comes()


class CapabilitiesHang(ShellAdapter):
    """``capabilities()`` never returns."""

    name = "capabilities hang"

    def capabilities(self) -> frozenset[Capability]:
        while True:
            time.sleep(0.05)


def describe_files_forever() -> None:
    """The frame a hanging ``describe_checkpoints`` is stuck in."""
    while True:
        time.sleep(0.05)


class DescribeCheckpointsHangs(ShellAdapter):
    """Runs return at once; describing the files they left never returns."""

    name = "describe_checkpoints hangs"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        return None

    def describe_checkpoints(self, root: Path) -> list[object]:
        describe_files_forever()
        return []
