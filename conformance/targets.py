"""Targets: what ``trainspec check TARGET`` (or ``--base-trainer``) names, resolved without torch.

A :class:`Target` is a label and the adapter factory a worker process builds for it. Resolving
one reads strings only: the pytest plugin and the CLI resolve (and reject) a target before
anything imports torch or the trainer. :attr:`Target.adapter` gives the worker protocol's
:class:`~trainspec.conformance.run.protocol.AdapterSpec` when a run needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainspec.errors import UsageError

if TYPE_CHECKING:
    from trainspec.conformance.run.protocol import AdapterSpec

__all__ = ["BASE_TRAINER_ADAPTER", "BUILTIN_TARGETS", "Target", "resolve_target", "with_remedies"]

BASE_TRAINER_ADAPTER = "trainspec.adapters.base_trainer:BaseTrainerAdapter"


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """A trainer to check: ``factory(*args)`` (``MODULE:OBJECT``) builds its adapter."""

    label: str
    factory: str
    args: tuple[str, ...] = ()
    is_base_trainer: bool = False
    remedies: tuple[str, ...] = ()  # remedy names, passed to the factory after ``args``

    @property
    def adapter(self) -> AdapterSpec:
        """How a worker builds the adapter (imports the harness, hence torch)."""
        from trainspec.conformance.run.protocol import AdapterSpec

        return AdapterSpec(factory=self.factory, args=(*self.args, *self.remedies))

    @property
    def reproducer_args(self) -> str:
        """How :func:`trainspec.conformance.api.replay` names this target."""
        remedies = f", remedies={','.join(self.remedies)!r}" if self.remedies else ""
        if self.is_base_trainer:
            return f"base_trainer={self.label!r}"
        return f"{self.label!r}{remedies}"


# built-in targets: the reference goes through the same seed-shape path as any base class
BUILTIN_TARGETS: dict[str, Target] = {
    "reference": Target(label="reference", factory=BASE_TRAINER_ADAPTER,
                        args=("trainspec.reference:BaseTrainer",)),
    "lightning": Target(label="lightning",
                        factory="trainspec.adapters.lightning:LightningAdapter"),
    "hf": Target(label="hf", factory="trainspec.adapters.hf:HFTrainerAdapter"),
    "ignite": Target(label="ignite", factory="trainspec.adapters.ignite:IgniteAdapter"),
    "keras": Target(label="keras", factory="trainspec.adapters.keras:KerasAdapter"),
    "poutyne": Target(label="poutyne", factory="trainspec.adapters.poutyne:PoutyneAdapter"),
    "skorch": Target(label="skorch", factory="trainspec.adapters.skorch:SkorchAdapter"),
}


def resolve_target(target: str | None = None, base_trainer: str | None = None) -> Target:
    """``reference`` (default), a built-in framework name, ``MODULE:OBJECT`` naming an adapter,
    or ``--base-trainer MODULE:CLASS`` for a class in the seed's shape."""
    if base_trainer is not None:
        if target not in (None, "reference"):
            raise UsageError(f"--base-trainer {base_trainer} and target {target!r} both name a "
                             "trainer: give one of them")
        if not _is_module_object(base_trainer):
            raise UsageError(f"--base-trainer: expected MODULE:CLASS, got {base_trainer!r} "
                             "(e.g. mypkg.trainers:BaseTrainer)")
        return Target(label=base_trainer, factory=BASE_TRAINER_ADAPTER, args=(base_trainer,),
                      is_base_trainer=True)
    name = target or "reference"
    if name in BUILTIN_TARGETS:
        return BUILTIN_TARGETS[name]
    if _is_module_object(name):
        return Target(label=name, factory=name)
    raise UsageError(f"target {name!r}: expected one of {', '.join(BUILTIN_TARGETS)} or "
                     "MODULE:OBJECT naming an adapter (e.g. mypkg.adapters:MyAdapter)")


def with_remedies(target: Target, names: str) -> Target:
    """``target`` with the comma-separated remedies ``names`` on (its adapter's factory gets
    them; an adapter that declares none rejects them when the worker builds it).

    Raises:
        UsageError: a name is empty, or the target is a seed-shaped base class (its trainer
            is the user's own code, with no framework switches to turn on).
    """
    chosen = tuple(n.strip() for n in names.split(","))
    if not all(chosen):
        raise UsageError(f"--remedies: expected comma-separated remedy names, got {names!r}")
    if target.is_base_trainer or target.factory == BASE_TRAINER_ADAPTER:
        raise UsageError(f"--remedies {names}: {target.label} is a base class in the seed's "
                         "shape, which declares no remedies; remedies are framework switches "
                         "a framework adapter declares (e.g. trainspec check hf --remedies "
                         "restore_callback_states)")
    return Target(label=target.label, factory=target.factory, args=target.args,
                  is_base_trainer=target.is_base_trainer, remedies=tuple(dict.fromkeys(chosen)))


def _is_module_object(ref: str) -> bool:
    """``MODULE:OBJECT`` with both parts present (the worker imports it, not this process)."""
    module, sep, obj = ref.partition(":")
    return bool(sep and module.strip() and obj.strip())
