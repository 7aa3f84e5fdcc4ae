"""Adapters whose description shows what their worker process holds: a process-wide registry
(as real trainers keep one), the environment the worker was given, and its parent."""

from __future__ import annotations

import os

from tests.bad_adapters.common import ShellAdapter

REGISTRY: list[str] = []  # every adapter built in this process, in order


class Probe(ShellAdapter):
    """Registers itself when built, and describes the process it was built in."""

    name = "forked probe"

    def __init__(self) -> None:
        REGISTRY.append(type(self).__name__)

    def environment(self) -> dict[str, str | None]:
        return {"framework": None, "registry": ",".join(REGISTRY),
                "probe_var": os.environ.get("FORKED_PROBE_VAR"),
                "parent": str(os.getppid())}


class OtherProbe(Probe):
    """A second adapter of the same module, bound in another worker."""
