"""The adapter kit: everything an adapter imports, from one module.

An adapter drives a trainer through the suite's scenarios and reports what it did (see the
guide "Check your trainer in five minutes" and "The adapter contract"). This module gathers,
typed and documented, what every adapter needs:

- the protocol: :class:`Adapter`, :class:`RunContext`, :data:`Capability` and the optional
  protocols (:class:`DescribesCheckpoints`, ...), with what two of them return:
  :class:`RootCause` (``root_causes()``: one behaviour of the trainer behind failing clauses,
  and where its code lives) and :class:`Remedy` (``remedies()``: a documented switch that
  should fix them);
- the scenario: :class:`Scenario`, :class:`Task`, :class:`ScoreScript`, :class:`CrashPoint`;
- the task every target trains: :func:`task_data`, :func:`task_model`, :func:`task_optimizer`,
  :func:`task_param_groups`, :func:`task_schedulers`;
- the records a run reports (:class:`Setup`, :class:`TrainStart`, :class:`TrainEnd`,
  :class:`Validation`, :class:`TestPass`, :class:`RunEnd`, ...);
- state and files: :func:`plain_weights`, :func:`rng_digests`, :func:`trainer_state`,
  :func:`snapshot_file`, :func:`newest_file`, :class:`FileRecord`, :func:`describe_files`,
  :func:`load_dict`; the trainer's own reader, :func:`read_checkpoint` (weights-only, else
  the file's own classes, else, for a file the run wrote, the adapter's ``load`` or a full
  unpickle in a process of its own), with :func:`lookup` for nested keys (``"meta.epoch"``);
- helpers for the common shapes of trainers: :class:`Recorder` (any shape: hooks, callbacks,
  wrapped methods; 1-based epochs), :class:`FileLayout` (own file names or folders, nested
  keys, epoch numbering, and how its files are read), :func:`observe` and
  :func:`frame_locals` (decisions a trainer keeps to itself),
  :class:`PendingValidation` (verdicts settled by later callbacks), :class:`HookBracket`
  (hooks before and after a framework runner's own);
- audit mode for a team's real runs (``trainspec audit``): :func:`audited` (a seed-shaped
  trainer), :class:`AuditLog` (a ``RunContext`` a :class:`Recorder` reports into, writing the
  run folder's audit log), :class:`AuditHooks` (a framework's hooks: a validation held until its
  callbacks decided; the base of the ready callbacks in ``trainspec.adapters.<framework>.audit``),
  :func:`shared_run_id`, :class:`AuditConfig`, :func:`audit_config`, :func:`weights_digest`.

Importing it imports torch; adapters run in the suite's worker processes, next to the trainer.
"""

from __future__ import annotations

from trainspec.conformance.run.adapter import (
    CAPABILITIES,
    Adapter,
    Capability,
    DeclaresRemedies,
    DescribesCheckpoints,
    NamesFrameworkSources,
    NamesRootCauses,
    RunContext,
)
from trainspec.conformance.run.audithooks import AuditHooks, shared_run_id
from trainspec.conformance.run.auditlog import AuditConfig, AuditLog, weights_digest
from trainspec.conformance.run.auditseed import audit_config, audited
from trainspec.conformance.run.files import (
    ROLES,
    FileRecord,
    Role,
    describe_files,
    describe_seed_files,
    file_record,
    load_dict,
    top_level,
)
from trainspec.conformance.run.hooks import HookBracket
from trainspec.conformance.run.layout import CONTENTS, FileLayout, Progress
from trainspec.conformance.run.reading import CheckpointRead, Loader, lookup, read_checkpoint
from trainspec.conformance.run.recording import (
    FileContent,
    PendingValidation,
    newest_file,
    snapshot_file,
    trainer_state,
)
from trainspec.conformance.run.records import (
    ConfigSeen,
    FileSnapshot,
    ItemsOnRaise,
    Phase,
    Record,
    RunEnd,
    Setup,
    TestPass,
    TrainEnd,
    TrainerState,
    TrainStart,
    Validation,
    Weights,
)
from trainspec.conformance.run.scenario import (
    CrashPoint,
    CrashWhere,
    Scenario,
    ScoreScript,
    Task,
    default_config,
)
from trainspec.conformance.run.shapes import (
    Recorder,
    StepCounter,
    frame_locals,
    observe,
    scripted_score,
)
from trainspec.conformance.run.task import (
    plain_weights,
    pool_with_torchmetrics,
    rng_digests,
    task_data,
    task_model,
    task_optimizer,
    task_param_groups,
    task_schedulers,
)
from trainspec.conformance.spec.causes import Remedy, RootCause
from trainspec.errors import AdapterError

__all__ = [
    "CAPABILITIES",
    "CONTENTS",
    "ROLES",
    "Adapter",
    "AdapterError",
    "AuditConfig",
    "AuditHooks",
    "AuditLog",
    "Capability",
    "CheckpointRead",
    "ConfigSeen",
    "CrashPoint",
    "CrashWhere",
    "DeclaresRemedies",
    "DescribesCheckpoints",
    "FileContent",
    "FileLayout",
    "FileRecord",
    "FileSnapshot",
    "HookBracket",
    "ItemsOnRaise",
    "Loader",
    "NamesFrameworkSources",
    "NamesRootCauses",
    "PendingValidation",
    "Phase",
    "Progress",
    "Record",
    "Recorder",
    "Remedy",
    "Role",
    "RootCause",
    "RunContext",
    "RunEnd",
    "Scenario",
    "ScoreScript",
    "Setup",
    "StepCounter",
    "Task",
    "TestPass",
    "TrainEnd",
    "TrainStart",
    "TrainerState",
    "Validation",
    "Weights",
    "audit_config",
    "audited",
    "default_config",
    "describe_files",
    "describe_seed_files",
    "file_record",
    "frame_locals",
    "load_dict",
    "lookup",
    "newest_file",
    "observe",
    "plain_weights",
    "pool_with_torchmetrics",
    "read_checkpoint",
    "rng_digests",
    "scripted_score",
    "shared_run_id",
    "snapshot_file",
    "task_data",
    "task_model",
    "task_optimizer",
    "task_param_groups",
    "task_schedulers",
    "top_level",
    "trainer_state",
    "weights_digest",
]
