"""The adapter for PyTorch Ignite (``trainspec check ignite``).

Engines from ``create_supervised_trainer``/``create_supervised_evaluator``, ``Checkpoint`` and
``EarlyStopping`` handlers, ``ignite.distributed`` on several ranks: configured as Ignite's
docs tell a user to, never bent to pass a check. How and why: ``docs/frameworks/ignite.md``.
Ignite is imported inside the functions only: importing this module never imports it.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from trainspec.adapters.ignite import causes as ignite_causes
from trainspec.adapters.ignite.causes import REMEDIES
from trainspec.adapters.ignite.files import describe_ignite_files
from trainspec.adapters.ignite.run import IgniteRun
from trainspec.conformance.run.adapter import Capability, RunContext, chosen_remedies
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.spec.causes import Remedy, RootCause

__all__ = ["REMEDIES", "IgniteAdapter"]

# Where in Ignite 0.5 the behaviour behind each failing clause comes from (read in the installed
# sources; paths relative to site-packages)
_CK = "ignite/handlers/checkpoint.py, Checkpoint"
_FIRST_SAVED = (f"{_CK}.__call__: saves whenever fewer than n_saved files are kept "
                "(_check_lt_n_saved), whatever the score, NaN or -inf included")
_COMPARE = (f"{_CK}._compare_fn: a later score is kept iff new > the kept priority, with "
            "no finiteness check: +inf beats any best, nothing beats a NaN")
_EVERY = ("ignite/engine/events.py, CallableEventWithFilter.every_event_filter: "
          "EPOCH_COMPLETED(every=n) fires when the 1-based epoch count % n == 0 "
          "(0-based epochs n-1, 2n-1, ...), and not after a final epoch off that grid")
_NAN_STOP = ("ignite/handlers/early_stopping.py, EarlyStopping.__call__: "
             "no_improvement = score <= best_score + threshold is False for NaN (and for "
             "any score once best_score is NaN), so NaN resets the counter and becomes "
             "best_score")
_STALE_REMOVE = (f"{_CK}.__call__ and DiskSaver.remove: a resumed best Checkpoint "
                 "removes the file its restored state lists with path.unlink(), which "
                 "raises FileNotFoundError once the interrupted run replaced that file "
                 "after the checkpoint it resumes from was written")
_SOURCES = {
    "RES-1": _STALE_REMOVE,
    "RES-2": _STALE_REMOVE,
    "RES-3": _STALE_REMOVE,
    "DIST-2": "ignite/handlers/early_stopping.py, EarlyStopping.__call__: decides on "
              "this rank's score_function value and calls trainer.terminate() on this "
              "rank only; nothing makes the ranks' decisions agree",
    "DIST-3": f"{_CK}.__call__: keeps a score iff this rank's score_function value beats "
              "its own kept priority (_compare_fn) and fires SAVED_CHECKPOINT on that "
              "rank; nothing makes the ranks' decisions agree, only the write is rank "
              "0's (DiskSaver.__call__)",
    "DIST-4": f"{_CK}.__call__ removes the old file (save_handler.remove), then "
              "DiskSaver.__call__ writes on save_on_rank only, and neither waits for "
              "the other ranks nor makes them wait (no barrier): they go on to the next "
              "epoch while rank 0 still writes",
    "LOOP-2": f"{_EVERY}; ignite/engine/engine.py, Engine._internal_run_as_gen fires "
              "Events.STARTED on every run() call, a resumed one too",
    "BEST-1": f"{_FIRST_SAVED}; {_COMPARE}",
    "BEST-3": f"{_CK}.__call__: a to_save of one object is written as its bare "
              "state_dict (checkpoint = checkpoint[name]): the step is recorded nowhere, "
              "the epoch only in the file name (global_step_from_engine)",
    "BEST-4": f"{_FIRST_SAVED}; the test pass then loads that file",
    "NAN-1": _COMPARE,
    "NAN-2": _FIRST_SAVED,
    "NAN-3": _NAN_STOP,
    "PAT-1": "ignite/handlers/early_stopping.py, EarlyStopping.__call__: the first "
             "score only initializes best_score (never counted, even NaN), and a NaN "
             "best_score makes every later score an improvement",
    "PAT-5": f"{_FIRST_SAVED}; {_EVERY}",
    "RES-5": f"{_CK}.load_objects: hands each state to the object's load_state_dict "
             "(via ignite/utils.py, _tree_apply2) with no check that the optimizer is "
             "the one the checkpoint was written with; torch then fails in SGD.step",
    "CKPT-1": f"{_CK}.__call__: a to_save of one object (the best model) is written as its "
              f"bare state_dict, with no step, run id or config; {_EVERY}",
    "CKPT-2": f"{_CK}.__call__: with n_saved files kept, the old file is removed "
              "(save_handler.remove) before the new one is written, so a kill during "
              "the write leaves no last checkpoint at all",
    "CKPT-4": f"{_CK}.load_objects: torch.load(checkpoint, weights_only=True) is called "
              "as is; torch's error for a truncated file does not name it",
    "RES-4": "ignite/engine/engine.py, Engine.state_dict: the trainer's state is epoch_length, "
             "iteration and max_epochs, no RNG state, so a resumed run draws the next epoch's "
             "order (RandomSampler) from torch's generator as manual_seed left it at the start "
             "of the new process; ignite/engine/deterministic.py, DeterministicEngine.state_dict "
             "(create_supervised_trainer(deterministic=True), not the default) adds "
             "rng_states, numpy's as an ndarray, which torch.load(weights_only=True) refuses, "
             "as Checkpoint.load_objects and Ignite's resume example load",
    "CKPT-5": "ignite/engine/engine.py, Engine.run: Ignite installs no signal handler "
              "(nothing in ignite/ calls signal.signal), so SIGTERM's default action ends the "
              "process where it is, and no Checkpoint handler runs",
}


class IgniteAdapter:
    """Runs scenarios through Ignite engines and handlers, on one CPU process or on each rank
    of a world launched as torchrun launches one, at Ignite's defaults but for the remedies
    named (:data:`REMEDIES`)."""

    name = "ignite"

    def __init__(self, *remedies: str) -> None:
        self.applied = chosen_remedies("ignite", remedies, REMEDIES)

    def capabilities(self) -> frozenset[Capability]:
        # multi_rank: ignite.distributed joins the launched world (idist.initialize with the
        # timeout), DDP through idist.auto_model, the score pooled by sync_all_reduce.
        # not declared: start_patience (EarlyStopping cannot express it), debug (Ignite has no
        # debug mode: run(epoch_length=...) shortens the training epoch only; evaluation,
        # checkpoint handlers and the schedule are untouched)
        return frozenset({"checkpoint", "resume", "finetune", "early_stopping", "val_first",
                          "val_every_n", "test_pass", "grad_accum", "eval_only",
                          "multi_rank"})

    def environment(self) -> dict[str, str | None]:
        import ignite

        return {"framework": f"pytorch-ignite {ignite.__version__}"}

    def framework_sources(self) -> dict[str, str]:
        """Where in Ignite 0.5 the behaviour behind each failing clause comes from (read in the
        installed sources; paths relative to site-packages)."""
        return dict(_SOURCES)

    def root_causes(self) -> tuple[RootCause, ...]:
        return ignite_causes.ROOT_CAUSES

    def remedies(self) -> tuple[Remedy, ...]:
        return REMEDIES

    def describe_checkpoints(self, root: Path) -> list[FileRecord]:
        """Every file under ``root``: ``best_model_<g>_score=<s>.pt``, ``checkpoint_<i>.pt``
        and ``epoch_checkpoint_<i>.pt`` mapped to the roles "best", "last" and "epoch".

        ``epoch`` is zero-based: from the trainer state a last or periodic file holds
        (``iteration // epoch_length - 1``), from the name of a best file, which holds the
        model's weights only (its ``step`` stays None: Ignite records none there). ``step`` is
        the trainer's ``iteration``.
        """
        # as JSON: the worker sends the entries on as they are (FileRecord.to_json)
        return describe_ignite_files(root)

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        if ctx.world_size == 1:
            IgniteRun(scenario, ctx, self.applied).run()
            return
        # launched as torchrun launches: Ignite joins the world (env://), spawns nothing
        import ignite.distributed as idist

        timeout = datetime.timedelta(seconds=float(scenario.get("ddp.timeout_s")))
        idist.initialize(scenario.get("ddp.backend") or "gloo", timeout=timeout)
        try:
            IgniteRun(scenario, ctx, self.applied).run()
            idist.barrier()  # every rank done before the group goes
        finally:
            idist.finalize()


