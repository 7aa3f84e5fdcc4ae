"""The runner: resolve a target, run the selected checks, and judge every clause.

Every clause of the spec appears in every report: a clause without a check comes out ``error``
("no check yet"), a clause not selected comes out ``n/a`` ("not selected"), and a clause whose
checks all need a capability the target lacks comes out ``n/a`` with that reason. A declared
deviation turns a ``fail`` (or ``timeout``) into ``deviation``; a declared deviation that passes is
flagged so it can be removed.
"""

from __future__ import annotations

import contextlib
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import trainspec
from trainspec.conformance import clauses as registry
from trainspec.conformance.adapter import CAPABILITIES, Capability
from trainspec.conformance.checks import CHECKS, CheckContext, CheckSpec, run_check
from trainspec.conformance.harness import AdapterSpec, Harness
from trainspec.conformance.model import CheckResult, ClauseResult, Report, Verdict, worst_verdict
from trainspec.errors import AdapterError, UsageError

__all__ = [
    "BUILTIN_TARGETS",
    "Target",
    "judge_clauses",
    "open_context",
    "resolve_target",
    "run_checks",
    "selected_checks",
]

BASE_TRAINER_ADAPTER = "trainspec.adapters.base_trainer:BaseTrainerAdapter"

# built-in targets: the reference goes through the same seed-shape path as any base class
BUILTIN_TARGETS: dict[str, AdapterSpec] = {
    "reference": AdapterSpec(factory=BASE_TRAINER_ADAPTER,
                             args=("trainspec.reference:BaseTrainer",)),
    "lightning": AdapterSpec(factory="trainspec.adapters.lightning:LightningAdapter"),
    "hf": AdapterSpec(factory="trainspec.adapters.hf:HFTrainerAdapter"),
    "ignite": AdapterSpec(factory="trainspec.adapters.ignite:IgniteAdapter"),
    "keras": AdapterSpec(factory="trainspec.adapters.keras:KerasAdapter"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    label: str
    adapter: AdapterSpec
    is_base_trainer: bool = False

    @property
    def reproducer_args(self) -> str:
        """How :func:`trainspec.conformance.api.replay` names this target."""
        if self.is_base_trainer:
            return f"base_trainer={self.label!r}"
        return f"{self.label!r}"


def resolve_target(target: str | None = None, base_trainer: str | None = None) -> Target:
    """``reference`` (default), a built-in framework name, ``MODULE:OBJECT`` naming an adapter,
    or ``--base-trainer MODULE:CLASS`` for a class in the seed's shape."""
    if base_trainer is not None:
        if target not in (None, "reference"):
            raise UsageError(f"--base-trainer {base_trainer} and target {target!r} both name a "
                             "trainer: give one of them")
        if ":" not in base_trainer:
            raise UsageError(f"--base-trainer: expected MODULE:CLASS, got {base_trainer!r} "
                             "(e.g. mypkg.trainers:BaseTrainer)")
        return Target(label=base_trainer, is_base_trainer=True,
                      adapter=AdapterSpec(factory=BASE_TRAINER_ADAPTER, args=(base_trainer,)))
    name = target or "reference"
    if name in BUILTIN_TARGETS:
        return Target(label=name, adapter=BUILTIN_TARGETS[name])
    if ":" in name:
        return Target(label=name, adapter=AdapterSpec(factory=name))
    raise UsageError(f"target {name!r}: expected one of {', '.join(BUILTIN_TARGETS)} or "
                     "MODULE:OBJECT naming an adapter")


def open_context(target: Target, harness: Harness, *, world_size: int = 2,
                 max_examples: int = 60) -> tuple[CheckContext, dict[str, Any]]:
    """The context checks of ``target`` run in, and what its adapter said of itself."""
    described = harness.describe(target.adapter)
    capabilities = _capabilities(target, described.get("capabilities", []))
    ctx = CheckContext(harness=harness, adapter=target.adapter, capabilities=capabilities,
                       world_size=world_size, target_args=target.reproducer_args,
                       max_examples=max_examples)
    return ctx, described


def selected_checks(selected: Sequence[str], world_size: int) -> list[CheckSpec]:
    """The checks verifying any of ``selected``; multi-rank ones only with several ranks."""
    return _selected_checks(selected, world_size)


def _selected_checks(selected: Sequence[str], world_size: int) -> list[CheckSpec]:
    chosen = set(selected)
    return [spec for spec in CHECKS.values()
            if chosen.intersection(spec.clauses) and (world_size > 1 or not spec.multi_rank)]


def run_checks(target: Target, *, clauses: str | None = None, world_size: int = 2,
               timeout_s: float = 60.0, deviations: Mapping[str, str] | None = None,
               on_result: Callable[[CheckResult], None] | None = None,
               harness: Harness | None = None, max_examples: int = 60) -> Report:
    """Run every check of the selected clauses on ``target``; one report, every clause.

    A ``harness`` passed in is reused (and left open): several targets can share its workers.
    """
    started = time.monotonic()
    selected = registry.select(clauses)
    if world_size < 1:
        raise UsageError(f"--world-size: expected 1 or more ranks, got {world_size}")
    results: list[CheckResult] = []
    with contextlib.ExitStack() as stack:
        if harness is None:
            harness = stack.enter_context(Harness(target.adapter, timeout_s=timeout_s))
        ctx, described = open_context(target, harness, world_size=world_size,
                                      max_examples=max_examples)
        for spec in _selected_checks(selected, world_size):
            result = run_check(spec, ctx)
            results.append(result)
            if on_result is not None:
                on_result(result)
        environment = _environment(described.get("environment", {}))
    return Report(trainspec=trainspec.__version__, target=target.label, environment=environment,
                  clauses=judge_clauses(results, selected, deviations or {}, world_size),
                  duration_s=round(time.monotonic() - started, 3), selected=tuple(selected))


def _capabilities(target: Target, declared: Sequence[str]) -> frozenset[Capability]:
    unknown = sorted(set(declared) - CAPABILITIES)
    if unknown:
        raise AdapterError(f"{target.label}: capabilities() declared unknown names {unknown}; "
                           f"known: {sorted(CAPABILITIES)}")
    return frozenset(c for c in CAPABILITIES if c in declared)


def _environment(adapter_env: Mapping[str, str | None]) -> dict[str, str | None]:
    env: dict[str, str | None] = {"python": platform.python_version(),
                                  "torch": torch.__version__.split("+")[0]}
    env["framework"] = adapter_env.get("framework")
    env.update({k: v for k, v in adapter_env.items() if k != "framework"})
    return env


def judge_clauses(results: Sequence[CheckResult], selected: Sequence[str],
                  deviations: Mapping[str, str], world_size: int) -> tuple[ClauseResult, ...]:
    """One verdict per clause of the spec, from the check results."""
    out = []
    for clause in registry.CLAUSES:
        mine = [r for r in results if clause.id in r.clauses]
        reason = deviations.get(clause.id)
        verdict: Verdict
        if clause.id not in selected:
            verdict, evidence, note = "n/a", "not selected (--clauses)", ""
        elif not mine and any(clause.id in s.clauses for s in CHECKS.values()):
            verdict, evidence = "n/a", f"its checks need several ranks; ran with {world_size}"
            note = ""
        elif not mine:
            verdict, evidence, note = "error", "no check yet", ""
        else:
            verdict = worst_verdict([r.outcome for r in mine])
            worst = next((r for r in mine if _to(r.outcome) == verdict), mine[0])
            evidence = worst.evidence
            note = ""
            if reason is not None and verdict in ("fail", "timeout"):
                verdict = "deviation"
            elif reason is not None and verdict == "pass":
                note = "declared as a deviation but passes: remove it from the deviations file"
        out.append(ClauseResult(id=clause.id, level=clause.level, title=clause.title,
                                verdict=verdict, evidence=evidence, checks=tuple(mine),
                                deviation_reason=reason, note=note))
    return tuple(out)


def _to(outcome: str) -> str:
    return {"passed": "pass", "failed": "fail"}.get(outcome, outcome)
