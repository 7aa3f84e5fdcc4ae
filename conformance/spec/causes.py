"""What a framework adapter says of its framework beyond the verdicts: root causes and remedies.

A :class:`RootCause` names one framework behaviour and the clauses it breaks ("NaN counts as an
improvement in its checkpoint handler: NAN-1, NAN-2, BEST-1"), with the source it comes from;
the matrix pages list the causes behind a target's fails above the clause-by-clause table.

A :class:`Remedy` is a documented, non-default switch of the framework that should make failing
clauses pass (HF's ``restore_callback_states_from_checkpoint=True`` for RES-3). Targets are
judged at the framework's defaults; ``trainspec matrix`` runs each remedy's failing clauses again
with the remedy on (``trainspec check TARGET --remedies NAME``) and shows whether it fixes them.

Pure data with a JSON form: adapters build them in their worker, the suite's process reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Remedy", "RootCause", "checked_causes", "checked_remedies"]


def _text(data: Mapping[str, Any], key: str, what: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what}: {key!r} should be a non-empty string, got {value!r}")
    return value


def _clause_ids(data: Mapping[str, Any], what: str) -> tuple[str, ...]:
    value = data.get("clauses")
    if not isinstance(value, list | tuple) or not value or not all(
            isinstance(c, str) and c for c in value):
        raise ValueError(f"{what}: 'clauses' should be a non-empty list of clause IDs, got "
                         f"{value!r}")
    return tuple(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class RootCause:
    """One framework behaviour behind failing clauses, and where in the framework it lives."""

    summary: str  # one line, e.g. "NaN counts as an improvement in its checkpoint handler"
    source: str  # a path relative to site-packages and a function
    clauses: tuple[str, ...]  # the clauses it makes fail

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary, "source": self.source, "clauses": list(self.clauses)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RootCause:
        what = "root cause"
        return cls(summary=_text(data, "summary", what), source=_text(data, "source", what),
                   clauses=_clause_ids(data, what))


@dataclass(frozen=True, slots=True, kw_only=True)
class Remedy:
    """A documented non-default switch that should make ``clauses`` pass; ``name`` turns it on
    (the adapter's factory takes it: ``MyAdapter(*remedy_names)``)."""

    name: str  # e.g. "restore_callback_states"
    setting: str  # what a user writes, e.g. "TrainingArguments(...=True)"
    clauses: tuple[str, ...]  # the clauses it should fix
    docs: str  # where the framework documents the switch

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "setting": self.setting, "clauses": list(self.clauses),
                "docs": self.docs}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Remedy:
        what = f"remedy {data.get('name')!r}"
        return cls(name=_text(data, "name", what), setting=_text(data, "setting", what),
                   clauses=_clause_ids(data, what), docs=_text(data, "docs", what))


def checked_causes(declared: object, clause_ids: frozenset[str]) -> tuple[RootCause, ...]:
    """An adapter's ``root_causes()``, validated.

    Raises:
        ValueError: not a sequence of :class:`RootCause`, or one names an unknown clause.
    """
    return tuple(_checked(declared, RootCause, "root_causes()", clause_ids))


def checked_remedies(declared: object, clause_ids: frozenset[str]) -> tuple[Remedy, ...]:
    """An adapter's ``remedies()``, validated (names unique).

    Raises:
        ValueError: not a sequence of :class:`Remedy`, a name twice, or an unknown clause.
    """
    remedies = _checked(declared, Remedy, "remedies()", clause_ids)
    names = [r.name for r in remedies]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"remedies() names {twice} more than once; give each remedy one name")
    return tuple(remedies)


_T = TypeVar("_T", Remedy, RootCause)


def _checked(declared: object, kind: type[_T], what: str, clause_ids: frozenset[str]
             ) -> list[_T]:
    if not isinstance(declared, list | tuple) or not all(isinstance(d, kind) for d in declared):
        raise ValueError(f"{what} returned {declared!r:.200}; expected a list of "
                         f"trainspec.conformance.spec.causes.{kind.__name__}")
    unknown = sorted({c for d in declared for c in d.clauses} - clause_ids)
    if unknown:
        raise ValueError(f"{what} names unknown clauses {unknown}; expected clause IDs such as "
                         "'NAN-1' (trainspec list prints them)")
    return list(declared)
