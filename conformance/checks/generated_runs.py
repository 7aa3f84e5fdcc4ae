"""The generated runs themselves: each in a process forked for it (a run on several ranks, one
process a rank), interrupted where the draw says, its records parsed into a rank's trace and
the files it left read the trainer's way; the runs this process made are counted, for the
engine's budgets (:mod:`trainspec.conformance.checks.generated_passes`)."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainspec.conformance.run.describe import describe_files
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.memory import (
    STALLED,
    ForkedRun,
    MemoryContext,
    call_in_fork,
    run_in_fork,
    run_ranks_in_fork,
)
from trainspec.conformance.run.records import Done, Record, TrainEnd, TrainStart
from trainspec.conformance.run.scenario import CrashWhere, Scenario
from trainspec.conformance.run.trace import RankTrace, parse_rank
from trainspec.conformance.run.world import grace_s, store_in_fork

__all__ = ["RUNS", "Broke", "Interrupted", "run", "run_ranks", "stalled"]

# once a rank's run has ended, the others end within this or are cut short (a rank left in a
# collective after another left the loop waits for nothing: DIST-2.2 judges it)
_RANKS_GRACE_S = 5.0


class Interrupted(BaseException):
    """The drawn interruption: raised through the trainer as a kill would end it."""


# the trainer runs this process has made: the engine's budgets are counted in them
RUNS = [0]


class Broke(BaseException):
    """A generated run hung past its bound, or the adapter's own code raised: no example can
    be judged, and the engine stops at once (not an Exception: hypothesis does not shrink
    it)."""

    def __init__(self, status: str, error: str, detail: str = "") -> None:
        super().__init__(error)
        self.status, self.error, self.detail = status, error, detail


class _Interrupting(MemoryContext):
    """A memory context that interrupts the run at one point (and at the epoch boundaries
    it sees in the records, as the harness does)."""

    def __init__(self, root: Path, at: tuple[CrashWhere, int] | None) -> None:
        super().__init__(root)
        self.at, self.fired = at, False

    def record(self, record: Record) -> None:
        if isinstance(record, TrainStart):
            self.crash_point("train_start", record.epoch)
        super().record(record)
        if isinstance(record, TrainEnd):
            self.crash_point("train_end", record.epoch)

    def crash_point(self, where: CrashWhere, epoch: int) -> None:
        if self.at == (where, epoch) and not self.fired:
            self.fired = True
            raise Interrupted(f"interrupted at {where} of epoch {epoch}")


def run(adapter: Any, s: Scenario, root: Path, at: tuple[CrashWhere, int] | None = None
        ) -> tuple[RankTrace, list[FileRecord]]:
    """One run in a process forked for it (no run sees another's module globals, working
    folder or registries, as in the harness): its rank trace and the files it left under
    ``root``."""
    before = _begin(root)
    forked = run_in_fork(adapter, s, root, context=lambda r: _Interrupting(r, at),
                         stop=Interrupted)
    if forked.timed_out:
        raise Broke("timeout", f"a generated run ({s.name}) {forked.error}")
    return _trace(0, forked), _described(adapter, root, before)


def run_ranks(adapter: Any, s: Scenario, root: Path,
              decisions: Sequence[tuple[bool, bool]] | None = None
              ) -> tuple[list[RankTrace], list[FileRecord]]:
    """One run on ``s.world_size`` ranks, each in a process forked for it, rendezvousing
    through a store hosted in a process of its own (torchrun's agent store, as the suite's
    own worlds do): every rank's trace (a rank still running at the bound, or cut short:
    ``timeout``), and the files the ranks left under ``root``. Every rank hung: :class:`Broke`.

    ``decisions``: the model's ``(improved, stop)`` of each validation. Once a rank records
    another, the run's first departure is known, and ranks that parted in a collective would
    only wait out their group's timeout: a rank still running a moment later is cut short."""
    before = _begin(root)
    n = s.world_size
    # none of the store's threads in the process the ranks fork from (world.store_in_fork)
    with store_in_fork("127.0.0.1", n) as env:
        forked = run_ranks_in_fork(
            adapter, s, root, env=lambda rank: {**env, "RANK": str(rank),
                                               "LOCAL_RANK": str(rank),
                                               "LOCAL_WORLD_SIZE": str(n)},
            context=lambda r, rank: MemoryContext(r, rank=rank, world_size=n),
            grace_s=_RANKS_GRACE_S,
            settled=None if decisions is None else functools.partial(_departed, decisions),
            shown=None if decisions is None else functools.partial(_shown, decisions),
            # ranks that parted and wait on each other in collectives whose bound the
            # trainer does not honour: cut short once none has recorded anything for a while,
            # as the harness's worlds do
            stall_s=grace_s(s))
    if all(f.timed_out and not f.cut for f in forked) or (
            all(stalled(f.error) for f in forked) and len({len(f.records) for f in forked}) == 1):
        # every rank hung, each as far as the others: the trainer's hang, not the ranks'
        raise Broke("timeout", f"a generated run ({s.name}, {n} ranks) {forked[0].error}")
    return [_trace(rank, f) for rank, f in enumerate(forked)], _described(adapter, root, before)


def _parted_at(decisions: Sequence[tuple[bool, bool]], rank: list[dict[str, Any]]
               ) -> int | None:
    """The first of one rank's validations so far (JSON records) that decided other than the
    model (or that the model does not have), or None."""
    taken = [(x.get("improved"), x.get("stop")) for x in rank if x.get("ev") == "val"]
    return next((i for i, d in enumerate(taken) if i >= len(decisions) or d != decisions[i]),
                None)


def _departed(decisions: Sequence[tuple[bool, bool]],
              records: list[list[dict[str, Any]]]) -> bool:
    """Whether some rank's validations so far (JSON records) decided other than the model."""
    return any(_parted_at(decisions, rank) is not None for rank in records)


def stalled(error: str | None) -> bool:
    """Whether a rank was cut short because no rank had recorded anything for a while."""
    return error is not None and STALLED in error


def _shown(decisions: Sequence[tuple[bool, bool]], records: list[list[dict[str, Any]]],
           running: list[bool]) -> bool:
    """Whether every rank still running has recorded the validation where the first rank
    departed from the model. The run is judged on what each rank decided there (the first
    departure is the one charged): whatever any rank does after it cannot change the verdict,
    and ranks that parted only wait on each other in collectives."""
    first = min((i for rank in records if (i := _parted_at(decisions, rank)) is not None),
                default=None)
    return first is not None and all(
        sum(x.get("ev") == "val" for x in rank) > first
        for rank, alive in zip(records, running, strict=True) if alive)


def _begin(root: Path) -> dict[Path, int]:
    """A run is counted, its own ckpt_root made (as in the harness); the files already there,
    with their modification times."""
    root.mkdir(parents=True, exist_ok=True)
    RUNS[0] += 1
    return {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def _trace(rank: int, forked: ForkedRun) -> RankTrace:
    if forked.ours:
        raise Broke("adapter", f"the adapter's own code raised {forked.error}", forked.traceback)
    status, error = "completed", ""
    records = list(forked.records)
    if forked.timed_out:
        status, error = "timeout", str(forked.error)
    elif forked.stopped:
        status = "killed"
    elif forked.error is not None:
        status, error = "raised", forked.error
    else:
        records.append(Done())
    return parse_rank(rank, records, status, error, forked.traceback)  # type: ignore[arg-type]


def _described(adapter: Any, root: Path, before: dict[Path, int]) -> list[FileRecord]:
    # the files the run wrote (new or changed) are read the trainer's way, as in the worker
    wrote = frozenset(os.path.abspath(p) for p in root.rglob("*")
                      if p.is_file() and before.get(p) != p.stat().st_mtime_ns)
    described, problem, hung = call_in_fork(lambda: describe_files(adapter, root, wrote))
    if problem is not None or not isinstance(described, list):
        raise Broke("adapter", f"describing the checkpoint files {'was ' if hung else ''}"
                     f"{problem or 'gave no list'}")
    return [FileRecord.from_json(f) for f in described]
