"""The few Ignite behaviours behind the ignite target's fails (read in Ignite 0.5's sources; paths
relative to site-packages), and the documented switch, off by default, that should fix one.

The matrix pages list the causes behind failing clauses above the clause-by-clause table; each
clause's own pointer is ``IgniteAdapter.framework_sources()``. ``trainspec check ignite
--remedies NAME`` runs with a remedy on; the matrix verifies each.
"""

from __future__ import annotations

from trainspec.conformance.spec.causes import Remedy, RootCause

__all__ = ["REMEDIES", "ROOT_CAUSES"]

_CK = "ignite/handlers/checkpoint.py, Checkpoint"
_ES = "ignite/handlers/early_stopping.py, EarlyStopping.__call__"

ROOT_CAUSES: tuple[RootCause, ...] = (
    RootCause(summary="EPOCH_COMPLETED(every=n) fires after epochs n-1, 2n-1, ... (1-based "
                      "multiples), not after a final epoch off that grid, and STARTED fires "
                      "again on a resumed run()",
              source="ignite/engine/events.py, CallableEventWithFilter.every_event_filter; "
                     "ignite/engine/engine.py, Engine._internal_run_as_gen",
              clauses=("LOOP-2", "PAT-5", "CKPT-1")),
    RootCause(summary="the best Checkpoint saves any score, NaN or -inf included, while fewer "
                      "than n_saved files are kept, and keeps a later score iff it is greater: "
                      "no finiteness check, so +inf beats any best and nothing beats a NaN",
              source=f"{_CK}.__call__ (_check_lt_n_saved), Checkpoint._compare_fn",
              clauses=("BEST-1", "BEST-4", "NAN-1", "NAN-2", "PAT-5")),
    RootCause(summary="EarlyStopping's first score only initializes its best (never counted), "
                      "and a NaN is never a non-improvement: it resets the counter and becomes "
                      "the best",
              source=_ES,
              clauses=("PAT-1", "NAN-3", "PAT-5")),
    RootCause(summary="a one-object Checkpoint writes the bare state_dict: the step, run id "
                      "and config are recorded nowhere, the epoch only in the file name",
              source=f"{_CK}.__call__",
              clauses=("BEST-3", "CKPT-1")),
    RootCause(summary="a resumed best Checkpoint removes the file its restored state lists, "
                      "which the interrupted run may already have replaced: DiskSaver.remove "
                      "raises FileNotFoundError",
              source=f"{_CK}.__call__ and DiskSaver.remove",
              clauses=("RES-1", "RES-2", "RES-3")),
    RootCause(summary="at its defaults the trainer's state holds no RNG state, so a resumed "
                      "run shuffles the next epoch from a freshly seeded generator; "
                      "DeterministicEngine saves it, but numpy's as an ndarray that a "
                      "weights-only load (Checkpoint.load_objects) refuses",
              source="ignite/engine/engine.py, Engine.state_dict; "
                     "ignite/engine/deterministic.py, DeterministicEngine.state_dict",
              clauses=("RES-4",)),
    RootCause(summary="load_objects hands each state to load_state_dict with no check that it "
                      "fits the object",
              source=f"{_CK}.load_objects",
              clauses=("RES-5",)),
    RootCause(summary="EarlyStopping and the best Checkpoint decide on each rank's own score: "
                      "nothing makes the ranks agree",
              source=f"{_ES}; {_CK}.__call__",
              clauses=("DIST-2", "DIST-3")),
    RootCause(summary="Checkpoint removes the old file before it writes the new one, and "
                      "DiskSaver writes on rank 0 with no barrier after",
              source=f"{_CK}.__call__ and DiskSaver.__call__",
              clauses=("CKPT-2", "DIST-4")),
    RootCause(summary="a damaged checkpoint raises torch.load's own error, which does not name "
                      "the file",
              source=f"{_CK}.load_objects",
              clauses=("CKPT-4",)),
    RootCause(summary="Ignite installs no SIGTERM handler: SIGTERM ends the process where it "
                      "is, with no checkpoint",
              source="ignite/engine/engine.py, Engine.run (no signal handling anywhere in "
                     "ignite/)",
              clauses=("CKPT-5",)),
)

# documented switches, off by default, that should fix failing clauses
REMEDIES: tuple[Remedy, ...] = (
    Remedy(name="deterministic", setting="create_supervised_trainer(..., deterministic=True)",
           clauses=("RES-4",),
           docs="ignite/engine/__init__.py, create_supervised_trainer: \"deterministic: if "
                "True, returns deterministic engine of type DeterministicEngine\"; "
                "ignite/engine/deterministic.py, DeterministicEngine: \"can produce exactly the "
                "same dataflow when resuming the run from an epoch\""),
)
