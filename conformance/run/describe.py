"""What an adapter says of itself, and of the files a run left: validated next to it.

The worker calls these (the harness trusts what they return): the adapter's self-description
(:func:`describe_adapter`, the one place that checks it) and the description of the checkpoint
files a run left (:func:`describe_files`), both as JSON-able data.
"""

from __future__ import annotations

import json
import os
import reprlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainspec.conformance.run.adapter import (
    CAPABILITIES,
    Adapter,
    Capability,
    DeclaresRemedies,
    DescribesCheckpoints,
    NamesFrameworkSources,
    NamesRootCauses,
    removed_capability,
)
from trainspec.conformance.run.protocol import JSON, Description
from trainspec.errors import AdapterError

__all__ = ["describe_adapter", "describe_files", "written_paths"]


def describe_adapter(adapter: object) -> Description:
    """The adapter's description, validated: the one place that checks what it says.

    Raises:
        AdapterError: a method is missing, a capability is unknown, the environment is not
            names to version strings, or ``framework_sources()`` is not clause IDs to strings.
        TypeError: ``capabilities()`` returned something that does not sort as names.
    """
    if not isinstance(adapter, Adapter):
        lacking = [m for m in ("name", "capabilities", "environment", "run")
                   if not hasattr(adapter, m)]
        raise AdapterError(f"{type(adapter).__qualname__} is not an adapter: it lacks "
                           f"{', '.join(lacking)}")
    capabilities = _capabilities(adapter.capabilities())
    environment = _environment(adapter.environment())
    sources = _sources(adapter.framework_sources()) \
        if isinstance(adapter, NamesFrameworkSources) else {}
    return Description(name=str(adapter.name), capabilities=capabilities,
                       environment=environment, sources=sources, **_causes(adapter))


def _causes(adapter: object) -> dict[str, Any]:
    """The adapter's root causes and remedies, validated (none when it names none)."""
    from trainspec.conformance.spec import causes
    from trainspec.conformance.spec import clauses as registry

    ids = frozenset(c.id for c in registry.CLAUSES)
    try:
        return {"root_causes": causes.checked_causes(adapter.root_causes(), ids)
                if isinstance(adapter, NamesRootCauses) else (),
                "remedies": causes.checked_remedies(adapter.remedies(), ids)
                if isinstance(adapter, DeclaresRemedies) else ()}
    except ValueError as e:
        raise AdapterError(str(e)) from None


def _capabilities(declared: object) -> frozenset[Capability]:
    # sorted: a set of mixed types or a number raises a TypeError that names the mistake
    names = sorted(declared)  # type: ignore[call-overload]
    unknown = sorted({str(c) for c in names} - CAPABILITIES)
    removed = [f"{c!r} ({removed_capability(c)}: drop it)" for c in unknown
               if removed_capability(c)]
    if removed:
        raise AdapterError(f"capabilities() declared {', '.join(removed)}; a capability is a "
                           "configuration surface the trainer may lack, never a behaviour a "
                           "clause demands")
    if unknown:
        hint = ""
        if all(len(c) == 1 and c.isalpha() for c in unknown):
            hint = (" (single letters: did capabilities() return one name as a string? "
                    "Return a set of names, e.g. frozenset({'checkpoint', 'resume'}))")
        raise AdapterError(f"capabilities() declared unknown names {unknown}{hint}; known: "
                           f"{sorted(CAPABILITIES)}")
    return frozenset(c for c in CAPABILITIES if c in names)


def _environment(declared: object) -> dict[str, str | None]:
    if not isinstance(declared, dict) or not all(
            isinstance(k, str) and isinstance(v, str | None) for k, v in declared.items()):
        raise AdapterError(f"environment() returned {reprlib.repr(declared)}; expected a dict "
                           "of names to version strings or None (reports hold it as JSON), "
                           "e.g. {'framework': 'lightning 2.4.0'}")
    return dict(declared)


def _sources(declared: object) -> dict[str, str]:
    from trainspec.conformance.spec import clauses as registry

    if not isinstance(declared, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in declared.items()):
        raise AdapterError(f"framework_sources() returned {reprlib.repr(declared)}; expected "
                           "a dict of clause IDs to one-line source pointers, e.g. {'NAN-1': "
                           "'pkg/callbacks.py, EarlyStopping.check: NaN compares False'}")
    unknown = sorted(set(declared) - {c.id for c in registry.CLAUSES})
    if unknown:
        raise AdapterError(f"framework_sources() names unknown clauses {unknown}; expected "
                           "clause IDs such as 'NAN-1' (trainspec list prints them)")
    return dict(declared)


def written_paths(events: Path) -> frozenset[str]:
    """The paths a run's records say it wrote (its ``write`` records), resolved."""
    found: set[str] = set()
    try:
        lines = events.read_text(errors="replace").splitlines()
    except OSError:
        return frozenset()
    for line in lines:
        if '"ev": "write"' not in line[:40]:
            continue
        try:
            path = json.loads(line).get("path")
        except (ValueError, AttributeError):
            continue  # a line cut by a kill
        if isinstance(path, str):
            found.add(os.path.abspath(path))
    return frozenset(found)


def describe_files(adapter: object, root: Path,
                   written: frozenset[str] = frozenset()) -> tuple[JSON, ...]:
    """The adapter's description of the files a run left (the seed's names by default);
    ``written``, the paths the run wrote, are read by the trainer's own reader
    (:func:`~trainspec.conformance.run.reading.trusting`).

    Raises:
        TypeError: the description is not JSON (it crosses a process boundary as JSON).
    """
    from trainspec.conformance.run.files import FileRecord, describe_seed_files
    from trainspec.conformance.run.reading import trusting

    def was_written(path: Path) -> bool:
        full = os.path.abspath(path)
        return full in written or any(p.startswith(full + os.sep) for p in written)

    with trusting(was_written):
        entries: Sequence[object] = (
            adapter.describe_checkpoints(root) if isinstance(adapter, DescribesCheckpoints)
            else describe_seed_files(root))
    out = []
    for entry in entries:
        # a FileRecord, or a JSON description validated field by field
        record = entry if isinstance(entry, FileRecord) else FileRecord.from_json(entry)
        out.append(record.to_json())
    json.dumps(out)  # JSON or nothing
    return tuple(out)
