"""The adapter protocol: how the suite drives a trainer it does not know.

An adapter turns a :class:`~trainspec.conformance.run.scenario.Scenario` into one run of its
trainer, on one rank, and reports what happened through a :class:`RunContext` as events (the
probe in ``trainspec.conformance.run.probe`` records them for seed-shaped trainers). It declares
what its trainer can do; clauses needing an undeclared capability come out ``n/a`` with the
reason, never ``pass``.

Adapters run inside worker processes: the process running the suite never imports the trainer.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.records import Record
from trainspec.conformance.run.scenario import CrashWhere, Scenario
from trainspec.conformance.spec.causes import Remedy, RootCause
from trainspec.errors import AdapterError

__all__ = [
    "CAPABILITIES",
    "Adapter",
    "Capability",
    "DeclaresRemedies",
    "DescribesCheckpoints",
    "NamesFrameworkSources",
    "NamesRootCauses",
    "RunContext",
    "chosen_remedies",
    "load_object",
    "removed_capability",
]

#: What a trainer can be asked to do; an adapter declares the ones its trainer has, and a check
#: (or a case of one) whose scenario needs one it lacks is ``n/a`` (the scenario reference lists
#: the keys and clauses each opens).
Capability = Literal[
    "checkpoint",  # writes last.pt / best.pt / epoch_<e>.pt in the run directory
    "resume",  # ckpt.resume continues an interrupted run
    "finetune",  # loads weights only and starts a new run
    "early_stopping",  # val.patience
    "start_patience",  # val.start_patience
    "val_first",  # val.first
    "val_every_n",  # val.every_n_epochs
    "test_pass",  # test.enable
    "debug",  # debug mode
    "grad_accum",  # grad_accum_steps
    "multi_rank",  # runs on several ranks of a torch.distributed group
    "eval_only",  # num_epochs = 0
]
# A capability is a configuration surface the trainer may lack (no debug mode, no
# start_patience key), never a behaviour a clause demands of a feature it has: exact resume
# (RES-4) is judged for every target that resumes, SIGTERM (CKPT-5) for every target that
# checkpoints and resumes.
_REMOVED = {"sigterm": "CKPT-5 is judged for every target that checkpoints and resumes",
            "rng_state": "RES-4 is judged for every target that resumes"}

#: Every :data:`Capability`.
CAPABILITIES: frozenset[Capability] = frozenset(Capability.__args__)  # type: ignore[attr-defined]


class RunContext(Protocol):
    """What an adapter's run sees of the harness."""

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def ckpt_root(self) -> Path:
        """The folder to use as ``ckpt.dir``; empty at the start of the first run of a check."""
        ...

    def record(self, record: Record) -> None:
        """Report one record (:mod:`trainspec.conformance.run.records`) in this rank's trace."""
        ...

    def crash_point(self, where: CrashWhere, epoch: int) -> None:
        """Call at each crash point; interrupts the run there when the scenario says so."""
        ...


@runtime_checkable
class Adapter(Protocol):
    """Drives one trainer or framework through scenarios."""

    @property
    def name(self) -> str: ...

    def capabilities(self) -> frozenset[Capability]: ...

    def environment(self) -> dict[str, str | None]:
        """Versions worth reporting, e.g. ``{"framework": "lightning 2.6.6"}``."""
        ...

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        """One run of the scenario on ``ctx.rank``; what happened goes through ``ctx.record``."""
        ...


@runtime_checkable
class DescribesCheckpoints(Protocol):
    """Optional: an adapter whose trainer names or fills its checkpoint files its own way.

    Run in a worker right after each run, it describes every file under ``root`` for the
    checkpoint clauses (role "last", "best" or "epoch", epoch, step, top-level keys and types,
    load error; see ``trainspec.conformance.run.files.describe_files``, which builds them for a
    framework's own names and format). Without it the seed's names and keys
    are assumed (``describe_seed_files``): last.pt, best.pt, epoch_<e>.pt holding epoch and
    train_step.
    """

    def describe_checkpoints(self, root: Path) -> Sequence[FileRecord]: ...


@runtime_checkable
class NamesFrameworkSources(Protocol):
    """Optional: an adapter that points at the framework code behind each clause.

    Clause IDs to a one-line pointer (a path relative to site-packages and a function, e.g.
    "lightning/pytorch/callbacks/model_checkpoint.py, ModelCheckpoint._save_topk_checkpoint:
    ..."). A clause that fails carries it in the report, so a framework maintainer can go
    straight to the code.
    """

    def framework_sources(self) -> Mapping[str, str]: ...


@runtime_checkable
class NamesRootCauses(Protocol):
    """Optional: an adapter that names the few framework behaviours behind its fails.

    Each :class:`~trainspec.conformance.spec.causes.RootCause` is one behaviour, the source it
    comes from and the clauses it breaks; the matrix pages list those behind failing clauses
    above the clause-by-clause table.
    """

    def root_causes(self) -> Sequence[RootCause]: ...


@runtime_checkable
class DeclaresRemedies(Protocol):
    """Optional: an adapter whose framework has documented non-default switches that should
    make failing clauses pass.

    The adapter runs the framework at its defaults; its factory takes remedy names
    (``MyAdapter(*names)``) and turns each one on (``trainspec check TARGET --remedies NAME``).
    ``trainspec matrix`` runs each remedy's failing clauses again with it on and shows whether
    it fixes them.
    """

    def remedies(self) -> Sequence[Remedy]: ...


def chosen_remedies(adapter: str, names: Sequence[str], declared: Sequence[Remedy]
                    ) -> frozenset[str]:
    """The remedy ``names`` an adapter's factory was given, checked against those it declares.

    Raises:
        AdapterError: a name the adapter does not declare; the message lists those it does.
    """
    known = sorted(r.name for r in declared)
    unknown = sorted(set(names) - set(known))
    if unknown:
        expected = f"expected some of {known}" if known else (
            "it declares none (no documented switch, off by default, known to fix a failing "
            "clause)")
        raise AdapterError(f"{adapter} adapter: unknown remedies {unknown}; {expected}")
    return frozenset(names)


def removed_capability(name: str) -> str | None:
    """Why a capability name no longer exists (for the error that names it), or None."""
    return _REMOVED.get(name)


def load_object(ref: str) -> Any:
    """Import ``module:attribute`` (dotted attributes allowed)."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise AdapterError(f"{ref!r}: expected MODULE:OBJECT, e.g. mypkg.trainers:BaseTrainer")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise AdapterError(f"{ref!r}: cannot import module {module_name!r} ({e}). Make it "
                           "importable from the current directory or the environment.") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AdapterError(f"{ref!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj
