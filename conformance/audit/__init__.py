"""The audit of a team's real, recorded training run (``trainspec audit RUN_DIR``).

Between the ``run`` layer (the log's writer) and the entry points: it reads the logs a run in
audit mode left (``logs``, ``runs``), lines its validations up for the oracle (``sequence``),
and judges each clause that one run can show (``decisions``, ``loop``, ``files``, ``judge``),
loading the trainer's files only in a subprocess (``fileprobe``).
"""

from __future__ import annotations

from trainspec.conformance.audit.judge import NOT_OBSERVABLE, audit, audit_run
from trainspec.conformance.audit.logs import AuditLogError

__all__ = ["NOT_OBSERVABLE", "AuditLogError", "audit", "audit_run"]
