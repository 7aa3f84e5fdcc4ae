"""What each mutant proves: the checks it must fail, and the evidence that shows the reason.

A mutant declares itself next to its code, once per check it must fail::

    @mutant_of("check_resume_keeps_best_and_patience",
               expect="killed at val_start of epoch 2 and resumed from epoch 2")
    class CheckpointsBeforeValidation(BaseTrainer): ...

``expect`` is a fragment of the evidence the check gives for this mutant, specific to its
flaw: the meta-test (tests/test_mutants.py) passes only when the check fails *and* says so.
A run that crashes counts only for a mutant whose flaw is the crash and whose ``expect``
quotes it ("the run raised: ...").
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["MutantOf", "declarations", "mutant_of"]

PACKAGE = __name__.rpartition(".")[0]  # tests.mutants

_Class = TypeVar("_Class", bound=type)


@dataclass(frozen=True, slots=True, kw_only=True)
class MutantOf:
    """One declaration: ``mutant`` must fail ``check`` with ``expect`` in the evidence."""

    check: str
    mutant: str  # "<family>:<Class>", the family being the module in tests/mutants/
    expect: str
    clauses: tuple[str, ...]  # the check's clauses; () when no check has that name

    @property
    def base_trainer(self) -> str:
        """The mutant as ``--base-trainer`` names it."""
        return f"{PACKAGE}.{self.mutant}"

    @property
    def id(self) -> str:
        return f"{self.check}[{self.mutant}]"


_DECLARED: dict[tuple[str, str], MutantOf] = {}


def mutant_of(check: str, *, expect: str) -> Callable[[_Class], _Class]:
    """Declare that the decorated mutant fails ``check`` with ``expect`` in its evidence.

    Stack it when one mutant proves several checks, each with its own fragment.
    """

    def register(cls: _Class) -> _Class:
        family, dot, rest = cls.__module__.removeprefix(f"{PACKAGE}.").partition(".")
        if not cls.__module__.startswith(f"{PACKAGE}.") or dot or rest:
            raise ValueError(f"{cls.__qualname__}: a mutant lives in {PACKAGE}.<family>, "
                             f"not in {cls.__module__}")
        if not expect.strip():
            raise ValueError(f"{cls.__qualname__}: expect must quote the evidence of {check}")
        # imported here, at declaration: the package itself stays light for the workers
        from trainspec.conformance.checks import CHECKS

        spec = CHECKS.get(check)
        declared = MutantOf(check=check, mutant=f"{family}:{cls.__qualname__}", expect=expect,
                            clauses=spec.clauses if spec is not None else ())
        key = (check, declared.mutant)
        if key in _DECLARED:
            raise ValueError(f"{declared.id}: declared twice")
        _DECLARED[key] = declared
        return cls

    return register


def declarations() -> tuple[MutantOf, ...]:
    """Every declaration of every family module, grouped by check in registration order."""
    package = importlib.import_module(PACKAGE)
    for info in pkgutil.iter_modules(package.__path__):
        if info.name != __name__.rpartition(".")[2]:
            importlib.import_module(f"{PACKAGE}.{info.name}")
    from trainspec.conformance.checks import CHECKS

    order = {name: i for i, name in enumerate(CHECKS)}
    return tuple(sorted(_DECLARED.values(),
                        key=lambda d: (order.get(d.check, len(order)), d.check, d.mutant)))
