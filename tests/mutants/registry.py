"""What each mutant proves: the checks it must fail, and the evidence that shows the reason.

A mutant declares itself next to its code, once per check it must fail::

    @mutant_of("check_resume_keeps_best_and_patience",
               expect="killed at val_start of epoch 2 and resumed from epoch 2")
    class CheckpointsBeforeValidation(BaseTrainer): ...

``expect`` is a fragment of the evidence the check gives for this mutant, specific to its
flaw: the meta-test (tests/test_mutants.py) passes only when the check fails *and* says so.
``proves`` names the normative sentences (conformance/spec/sentences.py) the flaw breaks, as
that failure shows: ``proves=("RES-3.1", "RES-3.3")``. They feed the coverage map; the records
the package reads are generated from these declarations into
conformance/spec/mutant_proofs.json (``python -m tests.mutants.registry`` writes it again;
tests/test_coverage.py fails while it is stale).
A run that crashes counts only for a mutant whose flaw is the crash and whose ``expect``
quotes it ("the run raised: ...").
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

__all__ = ["MutantOf", "declarations", "main", "mutant_of", "render_proofs"]

PACKAGE = __name__.rpartition(".")[0]  # tests.mutants

_Class = TypeVar("_Class", bound=type)


@dataclass(frozen=True, slots=True, kw_only=True)
class MutantOf:
    """One declaration: ``mutant`` must fail ``check`` with ``expect`` in the evidence."""

    check: str
    mutant: str  # "<family>:<Class>", the family being the module in tests/mutants/
    expect: str
    clauses: tuple[str, ...]  # the check's clauses; () when no check has that name
    proves: tuple[str, ...] = ()  # the sentences its flaw breaks, e.g. ("RES-5.2",)
    slip: str = ""  # the first line of the mutant's docstring

    @property
    def base_trainer(self) -> str:
        """The mutant as ``--base-trainer`` names it."""
        return f"{PACKAGE}.{self.mutant}"

    @property
    def id(self) -> str:
        return f"{self.check}[{self.mutant}]"


_DECLARED: dict[tuple[str, str], MutantOf] = {}


def mutant_of(check: str, *, expect: str,
              proves: str | Iterable[str] = ()) -> Callable[[_Class], _Class]:
    """Declare that the decorated mutant fails ``check`` with ``expect`` in its evidence, and
    that its flaw breaks the sentences ``proves`` names.

    Stack it when one mutant proves several checks, each with its own fragment.
    """
    sentences = (proves,) if isinstance(proves, str) else tuple(proves)

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
        slip = (cls.__doc__ or "").strip().split("\n\n")[0]
        declared = MutantOf(check=check, mutant=f"{family}:{cls.__qualname__}", expect=expect,
                            clauses=spec.clauses if spec is not None else (),
                            proves=sentences, slip=" ".join(slip.split()))
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


# ------------------------------------------------------------ the generated records

PROOFS_MODULE = (Path(__file__).resolve().parents[2] / "conformance" / "spec"
                 / "mutant_proofs.json")


def render_proofs(pairs: Sequence[MutantOf]) -> str:
    """The text of conformance/spec/mutant_proofs.json: every declaration as an object."""
    records = [{"mutant": p.mutant, "check": p.check, "proves": list(p.proves),
                "expect": p.expect, "slip": p.slip} for p in pairs]
    return json.dumps(records, indent=1, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write conformance/spec/mutant_proofs.json from the declarations (``--check``: only say
    whether it is stale, exit 1 if so)."""
    text = render_proofs(declarations())
    if list(argv if argv is not None else sys.argv[1:]) == ["--check"]:
        stale = not PROOFS_MODULE.is_file() or PROOFS_MODULE.read_text(encoding="utf-8") != text
        print(f"{PROOFS_MODULE.name} is {'stale' if stale else 'up to date'}")
        return int(stale)
    PROOFS_MODULE.write_text(text, encoding="utf-8")
    print(PROOFS_MODULE)
    return 0


if __name__ == "__main__":
    # the declarations register into tests.mutants.registry, not into this __main__ copy
    from tests.mutants import registry

    raise SystemExit(registry.main())
