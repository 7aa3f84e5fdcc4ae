"""What every built-in framework adapter promises, checked without importing any framework.

Each declares known capabilities, and each pointer it gives at framework source names a real
clause that the adapter's capabilities let some check judge, in words a reader can follow on any
machine (a path relative to site-packages, never one of ours).
"""

from __future__ import annotations

import re

import pytest

from trainspec.conformance.checks import CHECKS
from trainspec.conformance.run.adapter import CAPABILITIES, load_object
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.targets import BUILTIN_TARGETS

FRAMEWORKS = [name for name in BUILTIN_TARGETS if name != "reference"]


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_a_framework_adapter_describes_itself_consistently(name: str) -> None:
    adapter = load_object(BUILTIN_TARGETS[name].factory)()
    assert adapter.name == name
    capabilities = set(adapter.capabilities())
    assert capabilities <= CAPABILITIES
    sources = adapter.framework_sources()
    known = {c.id for c in registry.CLAUSES}
    assert set(sources) <= known, sorted(set(sources) - known)
    for clause_id, pointer in sources.items():
        judged = [spec for spec in CHECKS.values()
                  if clause_id in spec.clauses and spec.requires <= capabilities]
        assert judged, f"{name}: a source for {clause_id}, which no check can judge on it"
        assert re.match(r"^[a-z_]+/[\w/]+\.py", pointer), (clause_id, pointer)
        assert "site-packages" not in pointer
        assert "\n" not in pointer
