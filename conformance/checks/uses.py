"""What the checks read of a scenario, found in their code: the scenario reference's facts.

For every registered check: the config keys its scenarios set (string constants of the check's
code and of the helpers of ``checks/`` it calls) and the capabilities it needs (``requires``, for
every case) or gates one case on (``ctx.can(...)``). The scenario reference page
(``docs/spec/scenario.md``) is written from these facts, the key defaults of
:func:`~trainspec.conformance.run.scenario.default_config` and the fields of the records, so it
follows the code.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from trainspec.conformance.checks.base import CHECKS
from trainspec.conformance.run import records
from trainspec.conformance.run.adapter import CAPABILITIES
from trainspec.conformance.run.scenario import default_config

__all__ = ["ADAPTER_RECORDS", "ScenarioUses", "flat_defaults", "record_fields", "scenario_uses"]

# the records an adapter reports (or its Recorder reports for it), and the values they carry
ADAPTER_RECORDS = ("Setup", "ConfigSeen", "TrainStart", "TrainEnd", "TrainerState",
                   "Validation", "TestPass", "RunEnd", "FileSnapshot")
# helpers that set a key for every scenario they make whatever the check asks: their
# constants say nothing of one check (make_scenario sets val.first only when given ``first``)
_GENERIC = frozenset({"make_scenario"})
_KEYWORD_KEYS = {"first": "val.first"}  # make_scenario(first=...) sets val.first


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioUses:
    """Config key -> the clauses whose checks set it; capability -> the checks it gates."""

    key_clauses: Mapping[str, tuple[str, ...]]
    # capability -> (check name, its clauses, "every case" or "some cases")
    capability_checks: Mapping[str, tuple[tuple[str, tuple[str, ...], str], ...]]


def flat_defaults(config: Mapping[str, Any] | None = None, prefix: str = "") -> dict[str, Any]:
    """``default_config()`` as dotted keys (``ddp`` gives ``ddp.backend``, ...)."""
    out: dict[str, Any] = {}
    for key, value in (default_config() if config is None else config).items():
        if isinstance(value, Mapping):
            out.update(flat_defaults(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def record_fields() -> dict[str, tuple[tuple[str, str], ...]]:
    """Record name -> its (field, type) pairs, for the records an adapter reports."""
    return {name: tuple((f.name, str(f.type)) for f in dataclasses.fields(getattr(records, name)))
            for name in ADAPTER_RECORDS}


def _constants(code: types.CodeType) -> Iterator[object]:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _constants(const)
        elif isinstance(const, tuple):
            yield from const  # keyword names of a call (``first=...``)
        else:
            yield const


def _names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def _reached(func: types.FunctionType, depth: int = 4) -> Iterator[types.FunctionType]:
    """``func`` and the functions of ``checks/`` it calls, ``depth`` calls deep."""
    seen: set[int] = set()
    todo = [(func, 0)]
    while todo:
        f, d = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        yield f
        if d == depth:
            continue
        for name in _names(f.__code__):
            found = f.__globals__.get(name)
            if (isinstance(found, types.FunctionType) and name not in _GENERIC
                    and found.__module__.startswith("trainspec.conformance.checks")):
                todo.append((found, d + 1))


def scenario_uses() -> ScenarioUses:
    keys = set(flat_defaults()) | {k.split(".")[0] for k in flat_defaults()}
    key_clauses: dict[str, set[str]] = {}
    gates: dict[str, list[tuple[str, tuple[str, ...], str]]] = {c: [] for c in CAPABILITIES}
    for spec in CHECKS.values():
        consts: set[str] = set()
        for f in _reached(spec.func):  # type: ignore[arg-type]
            consts.update(c for c in _constants(f.__code__) if isinstance(c, str))
        read = {_KEYWORD_KEYS.get(c, c) for c in consts} & keys
        for key in read | {"num_epochs"}:  # every scenario sets num_epochs
            key_clauses.setdefault(key, set()).update(spec.clauses)
        for cap in sorted(CAPABILITIES):
            if cap in spec.requires:
                gates[cap].append((spec.name, spec.clauses, "every case"))
            elif cap in consts:
                gates[cap].append((spec.name, spec.clauses, "some cases"))
    return ScenarioUses(key_clauses={k: tuple(sorted(v)) for k, v in key_clauses.items()},
                        capability_checks={c: tuple(v) for c, v in gates.items()})
