"""From log files to one audited run: its launches in order, each with one log per rank.

A run is launched once, then again for each resume (each launch writes one log per rank). The
logs of one launch share its run id; the launches are ordered by rank 0's start and every one
after the first must say where it resumed from. Anything else (ranks whose logs disagree on the
run id, a rank missing or logged twice, two runs given together) is an :class:`AuditLogError`
naming the files.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainspec.conformance.audit.logs import AuditLogError, Log, find_logs, read_log

__all__ = ["AuditedRun", "Launch", "load_run"]

_RANK = re.compile(r"\.rank\d+\.jsonl$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """One launch of the run: a log per rank, rank 0 first."""

    run_id: str
    logs: tuple[Log, ...]

    @property
    def main(self) -> Log:
        return self.logs[0]

    @property
    def world_size(self) -> int:
        return self.main.world_size

    @property
    def is_resume(self) -> bool:
        return self.main.resumed_from is not None

    @property
    def has_ended(self) -> bool:
        """The trainer's run returned (not killed, not raised)."""
        return bool(self.main.of("end"))


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditedRun:
    launches: tuple[Launch, ...]

    @property
    def first(self) -> Launch:
        return self.launches[0]

    @property
    def last(self) -> Launch:
        return self.launches[-1]

    @property
    def paths(self) -> tuple[Path, ...]:
        return tuple(log.path for launch in self.launches for log in launch.logs)


def load_run(paths: Sequence[Path]) -> AuditedRun:
    """The run the given folders and log files hold.

    Raises:
        AuditLogError: no log, a log that does not read, or logs that are not one run.
    """
    logs = [read_log(p) for p in find_logs(list(paths))]
    groups: dict[tuple[str, str], list[Log]] = {}
    for log in logs:
        key = (log.run_id, str(log.path.parent / _RANK.sub("", log.path.name)))
        groups.setdefault(key, []).append(log)
    launches = [_launch(group, logs) for group in groups.values()]
    launches.sort(key=lambda launch: launch.main.started_ns)
    for launch in launches[1:]:
        if not launch.is_resume:
            raise AuditLogError(
                f"audit: {launch.main.path} starts a run of its own (run {launch.run_id}, "
                f"not a resume), and {launches[0].main.path} another: give the logs of one "
                "run (its first launch and its resumes)")
    return AuditedRun(launches=tuple(launches))


def _launch(group: list[Log], every: list[Log]) -> Launch:
    run_id = group[0].run_id
    sizes = {log.world_size for log in group}
    if len(sizes) > 1:
        raise AuditLogError(f"audit: the logs of run {run_id} disagree on the world size "
                            f"({', '.join(f'{log.path}: {log.world_size}' for log in group)})")
    world = sizes.pop()
    by_rank: dict[int, Log] = {}
    for log in group:
        if log.rank in by_rank:
            raise AuditLogError(f"audit: rank {log.rank} of run {run_id} is logged twice: "
                                f"{by_rank[log.rank].path} and {log.path}")
        by_rank[log.rank] = log
    missing = [r for r in range(world) if r not in by_rank]
    if missing:
        others = [log for log in every if log.run_id != run_id and log.rank in missing
                  and log.world_size == world]
        if others:
            raise AuditLogError(
                f"audit: the ranks disagree on the run id: {group[0].path} (rank "
                f"{group[0].rank}) names run {run_id!r} but {others[0].path} (rank "
                f"{others[0].rank}) names {others[0].run_id!r}. Every rank of a launch must "
                "log the run id rank 0 chose (broadcast it)")
        raise AuditLogError(f"audit: run {run_id} ran on {world} ranks but no log of rank(s) "
                            f"{missing} was given (next to {group[0].path}); give every "
                            "rank's log")
    return Launch(run_id=run_id, logs=tuple(by_rank[r] for r in range(world)))
