"""Every mutant declaration of tests/mutants/, as data for the coverage map.

The mutants live in the tests; ``python -m tests.mutants.registry`` writes their declarations
to ``mutant_proofs.json`` beside this module (data, shipped with the package), and
tests/test_coverage.py fails while that file is stale. :data:`PROOFS` reads it once.
"""

from __future__ import annotations

import json
from importlib import resources

from trainspec.conformance.spec.sentences import MutantProof

__all__ = ["DATA_FILE", "PROOFS", "read_proofs"]

DATA_FILE = "mutant_proofs.json"


def read_proofs(text: str) -> tuple[MutantProof, ...]:
    """The records of a ``mutant_proofs.json`` text (a list of objects, one per declaration)."""
    return tuple(MutantProof(mutant=str(p["mutant"]), check=str(p["check"]),
                             expect=str(p["expect"]), proves=tuple(map(str, p["proves"])),
                             slip=str(p["slip"]))
                 for p in json.loads(text))


PROOFS: tuple[MutantProof, ...] = read_proofs(
    resources.files(__package__).joinpath(DATA_FILE).read_text(encoding="utf-8"))
