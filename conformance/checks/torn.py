"""CKPT-2: a checkpoint write interrupted by a crash (docs/spec/ckpt.md), judged path by path.

Each run is killed part-way through a write (run/writewatch.py tears it); what each path held
before the write comes from the same run killed as that epoch begins, before any of its writes.
"""

from __future__ import annotations

import os

from trainspec.conformance.checks.base import CheckContext, CheckFailed, NotApplicable, check
from trainspec.conformance.checks.chains import unreachable
from trainspec.conformance.checks.common import make_scenario
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.records import Crash, Write
from trainspec.conformance.run.scenario import CrashPoint, Scenario
from trainspec.conformance.run.trace import Trace

__all__: list[str] = []


@check("CKPT-2", requires={"checkpoint"}, covers=("CKPT-2.1", "CKPT-2.2", "CKPT-2.4"))
def check_interrupted_write_keeps_the_previous_file(ctx: CheckContext) -> str:
    """SIGKILL part-way through a checkpoint write leaves the previous file at that path
    intact and loadable: the epoch's first write, and the write of the best file on an
    improvement. Every case runs.

    Judged is the path the write was going to (the target of a rename, else the file torn)
    when it held a complete file before the write: that file lost or damaged is the fault. A
    torn new path (a numbered file written anew) has no previous version to keep. The write
    is seen whatever library makes it (run/writewatch.py): torch.save onto a path, bytes
    serialized in memory then written, safetensors, a framework's own writer.
    """
    cases = [(make_scenario("ckpt-torn", [0.9, 0.1, 0.1, 0.1]), "")]  # the first write
    improves = make_scenario("ckpt-torn-best", [0.1, 0.2, 0.9, 0.3])  # epoch 2 improves
    best = ctx.completed(improves).newest("best")
    if best is not None:
        cases.append((improves, best.name))
    else:
        ctx.notes.append("the run wrote no best file, so none could be interrupted")
    done = [what for s, name in cases if (what := _torn_writes(ctx, s, name)) is not None]
    if not done and not ctx.log.failing:
        raise NotApplicable("; ".join([*ctx.log.inapplicable, *ctx.notes]))
    return f"killed at 0%, 50% and 100% of {' and of '.join(done)}: each path that held a " \
        "complete file still loads"


_TORN_EPOCH = 2


def _torn_writes(ctx: CheckContext, s: Scenario, name: str) -> str | None:
    """Kill ``s`` inside its first write of epoch 2 (of ``name``, when given) at three
    points, each a case of its own; the write judged, or None when the run made no such
    write (the case says so, and the other points, the same write, are not tried)."""
    before = _files_before(ctx, s)
    judged: list[str] = []  # the path each kill was judged at
    what = f"the write of {name}" if name else "the epoch's first write"
    for fraction in (0.0, 0.5, 1.0):
        crash = CrashPoint(where="write", epoch=_TORN_EPOCH, fraction=fraction, file=name)
        trace = None
        with ctx.case(f"{what}, killed at {fraction:.0%}", severity="loss"):
            trace = ctx.run(s.replace(name=f"{s.name}-{fraction}", crash=crash))
            torn = trace.rank0.crashes
            if not torn:
                raise NotApplicable(unreachable(crash, trace))
            target = _write_target(trace, torn[0], before)
            judged.append(os.path.basename(target))
            _judge_tear(torn[0], target, before, trace.files, fraction)
        if trace is not None and not trace.rank0.crashes:
            return None  # the run made no such write: nor will it at the other points
    return f"the write of {name}" if name else \
        f"the first checkpoint write of an epoch ({', '.join(dict.fromkeys(judged))})"


def _judge_tear(torn: Crash, target: str, before: list[FileRecord] | None,
                after: tuple[FileRecord, ...], fraction: float) -> None:
    """One kill inside a write, judged at ``target``: CheckFailed with what was lost or
    damaged; NotApplicable when the path held no complete file before."""
    torn_name = os.path.basename(torn.path or "") or "a checkpoint"
    written = f"killed after writing {fraction:.0%} of {torn_name} in epoch {_TORN_EPOCH} " \
        f"({torn.bytes} bytes)"
    problems = _kept(target, before, after)
    found = [p for p in problems if not p.startswith("(")]
    if found:
        raise CheckFailed(f"CKPT-2: {written}, {'; '.join(found)}: write to a temporary file in "
                          "the same folder, fsync, then os.replace it over the old one")
    if problems:  # not judged: the path held no complete file before
        raise NotApplicable(f"{written}: {os.path.basename(target)} {problems[0][1:-1]}")


def _files_before(ctx: CheckContext, s: Scenario) -> list[FileRecord] | None:
    """The files ``s`` leaves when killed as epoch 2 begins, before any of its writes: what
    each path held before the interrupted write; None when the trainer has no such point."""
    crash = CrashPoint(where="train_start", epoch=_TORN_EPOCH)
    trace = ctx.run(s.replace(name=f"{s.name}-before", crash=crash))
    return list(trace.files) if trace.rank0.crashes else None


def _same(files: list[FileRecord] | tuple[FileRecord, ...], name: str) -> FileRecord | None:
    """The checkpoint at ``name`` (a path relative to the run's folder) among ``files`` of
    another run: the checkpoint folder holding it, the same relative path, else the one file
    of the same name (a trainer that writes into a folder of its own per run names it anew
    each time)."""
    holder = [f for f in files if f.role is not None and name.startswith(f.relpath + "/")]
    exact = [f for f in files if f.relpath == name]
    named = [f for f in files if f.name == os.path.basename(name)]
    found = holder or exact or (named if len(named) == 1 else [])
    return max(found, key=lambda f: len(f.relpath)) if found else None


def _write_target(trace: Trace, torn: Crash, before: list[FileRecord] | None) -> str:
    """The path (relative to the run's folder) the interrupted write was going to: the
    target of the rename torn, the checkpoint a temporary file torn before its rename stands
    for (its name holds the checkpoint's: ``.last.pt.1234.tmp``), else the file torn."""
    records = trace.rank0.records
    at = records.index(torn)
    previous = next((r for r in reversed(records[:at]) if isinstance(r, Write)), None)
    if isinstance(previous, Write) and previous.via == "rename":
        found = [f.relpath for f in trace.files if previous.path.endswith("/" + f.relpath)]
        return max(found, key=len, default=os.path.basename(previous.path))
    path = torn.path or ""
    if before is None or _same(before, path) is not None:
        return path
    # a checkpoint whose name the temporary file's holds, in this run's folder (a trainer
    # that writes into a folder of its own per run named the one of the run before anew)
    folder = os.path.dirname(path)
    within = [f.name for f in before if f.role is not None and f.name in os.path.basename(path)]
    return os.path.join(folder, max(within, key=len)) if within else path


def _kept(target: str, before: list[FileRecord] | None,
          after: tuple[FileRecord, ...]) -> list[str]:
    """What went wrong after the kill: at ``target`` (lost or damaged), and at each other
    checkpoint that held a complete file before the write (damaged; one gone may have been
    removed on purpose, a trainer keeping its newest files only). "(...)": not judged."""
    old = None if before is None else _same(before, target)
    if before is not None and old is None:
        return ["(is a new path, torn with no previous version to keep: not CKPT-2's matter)"]
    if old is not None and old.error:
        return [f"(did not load before the write either ({old.error}): not judged)"]
    now = _same(after, target if old is None else old.relpath)
    inside = old is not None and target.startswith(old.relpath + "/")  # a checkpoint folder
    shown = f"{old.name} (holding {os.path.basename(target)})" if old is not None and inside \
        else os.path.basename(target)
    found = []
    held = "" if old is None or old.epoch is None else f" of epoch {old.epoch}"
    if now is None:
        found.append(f"{shown}, which held a complete checkpoint{held} before the write, "
                     "is gone")
    elif now.error:
        found.append(f"{shown}, which held a complete checkpoint{held} before the write, no "
                     f"longer loads ({now.error})")
    elif old is not None and None not in (old.epoch, now.epoch) \
            and now.epoch not in (old.epoch, _TORN_EPOCH):
        found.append(f"{shown} says epoch {now.epoch}; expected {old.epoch} (the previous "
                     f"file) or {_TORN_EPOCH} (the new one, complete)")
    for other in before or []:
        later = _same(after, other.relpath)
        if other.role is not None and other is not old and not other.error \
                and later is not None and later.error:
            found.append(f"{other.name}, which held a complete checkpoint before the write, "
                         f"no longer loads ({later.error})")
    return found
