"""What a property run (or a generated-runs engine run) found, as its runner's JSON says."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["PropertyOutcome"]

JSON = dict[str, object]


def _str(data: Mapping[str, object], key: str) -> str:
    value = data.get(key, "")
    return value if isinstance(value, str) else str(value)


def _int(data: Mapping[str, object], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _counts(data: Mapping[str, object], key: str) -> dict[str, int]:
    raw = data.get(key)
    return {str(k): v for k, v in raw.items() if isinstance(v, int)} \
        if isinstance(raw, dict) else {}


@dataclass(frozen=True, slots=True, kw_only=True)
class PropertyOutcome:
    """What a property run found: ``passed``, ``failed`` (with the shrunk falsifying example),
    or ``broke`` (the run did not finish: ``status`` says how, ``error`` and ``detail`` why)."""

    verdict: Literal["passed", "failed", "broke"]
    examples: int = 0  # generated runs
    evidence: str = ""  # failed: the evidence line of the shrunk example
    scenario: JSON | None = None  # failed: the falsifying scenario's JSON
    status: str = ""  # broke: timeout, exited, killed, lost
    error: str = ""
    detail: str = ""  # broke: the stacks at the deadline, or the child's log
    cause: str = ""  # failed: the words the same fault is grouped under elsewhere, if any
    # generated runs: clause -> examples judged (not set aside) that gave it something to judge
    judged: Mapping[str, int] = field(default_factory=dict)
    out_of_budget: bool = False  # generated runs: the budget of runs ended the draw
    clean: int | None = None  # generated runs: the chains that matched the model throughout
    runs: int = 0  # generated runs: the trainer runs the pass made
    spoke: Mapping[str, int] = field(default_factory=dict)  # clause -> chains speaking of it
    # generated runs' judge pass: clause -> the first chain charged to it (failed, unshrunk)
    found: Mapping[str, PropertyOutcome] = field(default_factory=dict)
    # properties: clause -> examples set aside as that clause's fault (its own check judges it)
    set_aside: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, result: Mapping[str, object]) -> PropertyOutcome:
        """The property runner's JSON result (``checks.properties.run_property``)."""
        examples = _int(result, "examples") or 0
        clean = _int(result, "clean")
        judged, set_aside = _counts(result, "judged"), _counts(result, "set_aside")
        broke = result.get("broke")
        if isinstance(broke, str):  # the runner could not judge: a run hung, the adapter broke
            return cls(verdict="broke", examples=examples, status=broke,
                       error=_str(result, "error"), detail=_str(result, "detail"))
        if result.get("passed") is True:
            found = result.get("found")
            return cls(verdict="passed", examples=examples, judged=judged, set_aside=set_aside,
                       clean=clean, out_of_budget=result.get("out_of_budget") is True,
                       runs=_int(result, "runs") or 0, spoke=_counts(result, "spoke"),
                       found={str(k): cls.from_json(v) for k, v in found.items()
                              if isinstance(v, dict)} if isinstance(found, dict) else {})
        scenario = result.get("scenario")
        return cls(verdict="failed", examples=examples, evidence=_str(result, "evidence"),
                   cause=_str(result, "cause"), scenario={str(k): v for k, v in scenario.items()}
                   if isinstance(scenario, dict) else None, judged=judged,
                   set_aside=set_aside, clean=clean)
