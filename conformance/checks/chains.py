"""Runs that chain through a checkpoint: interrupt-then-resume, and train-then-finetune."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from trainspec.conformance.checks.base import CheckContext, CheckFailed, NotApplicable, RunBroke
from trainspec.conformance.checks.carried_out import shortfall
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.scenario import CrashPoint, Scenario
from trainspec.conformance.run.trace import Trace

__all__ = ["ResumePair", "SourceRun", "Unreachable", "from_checkpoint", "interrupt_and_resume",
           "reachable_pairs", "resume_after", "resume_cause", "source_checkpoint", "source_run",
           "trainer_frame", "unreachable", "with_load"]

# what each crash point means, for the reason a trainer without it is not judged there
_MEANING = {"train_start": "entering an epoch's training",
            "train_end": "leaving an epoch's training",
            "val_start": "entering the validation after an epoch",
            "val_after_save": "between best-model selection and the patience step",
            "write": "inside a checkpoint write"}


class Unreachable(NotApplicable):
    """The run completed without reaching the crash point: not judged there (never a fail)."""


def unreachable(crash: CrashPoint, interrupted: Trace) -> str:
    """Why a completed run never reached ``crash``: the trainer stopped before that epoch,
    wrote nothing there, or has no such point the suite can see."""
    r = interrupted.ranks[min(crash.rank, len(interrupted.ranks) - 1)]
    at = f"{crash.where} of epoch {crash.epoch}"
    trained = r.epochs_trained
    if crash.epoch not in trained:
        stop = next((v.epoch for v in r.validations if v.stop), None)
        how = "stopped early after epoch " + str(stop) if stop is not None else "completed"
        return f"{at} not reached: the run trained epochs {trained} and {how}"
    if crash.where == "write":
        named = f" of {crash.file}" if crash.file else ""
        return (f"{at} not reached: the run made no checkpoint write{named} under its folder "
                f"in epoch {crash.epoch}, so none could be interrupted")
    return (f"{at}, a point the trainer does not have ({_MEANING[crash.where]}; its adapter "
            f"never calls ctx.crash_point({crash.where!r}, ...))")


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumePair:
    """An interrupted run, the checkpoint it left, and the run resumed from it."""

    interrupted: Trace
    checkpoint: FileRecord
    resumed: Trace
    resumed_scenario: Scenario

    @property
    def ckpt_epoch(self) -> int:
        """The epoch the checkpoint records; where the suite could not read it, the epoch
        before the one the resumed run trained first (the resume point as the trainer took
        it: whether that is right is RES-1's matter, said there); -1 when neither is known."""
        epoch = self.checkpoint.epoch
        if epoch is not None:
            return epoch
        trained = self.resumed.rank0.epochs_trained
        return trained[0] - 1 if trained else -1

    @property
    def unread(self) -> str | None:
        """Why the suite could not read the checkpoint (None when it could): what a content
        comparison needing the file then leaves not judged."""
        if self.checkpoint.error is None and self.checkpoint.epoch is not None:
            return None
        why = self.checkpoint.error or "it records no epoch"
        return f"{self.checkpoint.name} could not be read ({why})"


def with_load(s: Scenario, path: str, *, resume: bool, model_only: bool = False,
              name: str | None = None) -> Scenario:
    """``s`` starting from the checkpoint at ``path``."""
    out = s.with_config(**{"ckpt.load_from": path, "ckpt.resume": resume,
                           "ckpt.model_only": model_only})
    return out.replace(name=name or f"{s.name}-from-ckpt", crash=None)


def interrupt_and_resume(ctx: CheckContext, clause: str, s: Scenario,
                         crash: CrashPoint) -> ResumePair:
    """Run ``s`` until ``crash`` really interrupts it, then resume from its newest last.pt."""
    key = "resume:" + json.dumps([s.to_json(), str(crash)], sort_keys=True)
    cached = ctx.memo.get(key)
    if isinstance(cached, ResumePair):
        return cached
    if isinstance(cached, Unreachable):
        raise cached
    root = ctx.runs.new_ckpt_root(f"{s.name}-{crash.where}-{crash.epoch}")
    first = s.replace(name=f"{s.name}-crash-{crash.where}-{crash.epoch}", crash=crash)
    interrupted = ctx.runs.run(first, ckpt_root=root)
    hit = [r for r in interrupted.ranks if r.crashes]
    if not hit:
        if not interrupted.completed:
            raise RunBroke(interrupted, first)
        ctx.memo[key] = Unreachable(unreachable(crash, interrupted))
        raise Unreachable(unreachable(crash, interrupted))
    pair = resume_after(ctx, clause, s, interrupted, root,
                        f"interrupted at {crash.where} of epoch {crash.epoch}")
    ctx.memo[key] = pair
    return pair


def reachable_pairs(ctx: CheckContext, clause: str, s: Scenario,
                    crashes: tuple[CrashPoint, ...]) -> list[tuple[CrashPoint, ResumePair]]:
    """:func:`interrupt_and_resume` at each point the run reaches, each a case of the running
    check (named ``killed at <where> of epoch <e>``, as the check's own case for that point);
    a point it never reaches is not judged (``n/a`` for the check when no point is)."""
    pairs, skipped = [], []
    for crash in crashes:
        # one case per point: a chain that fails there is reported, and the others still run
        with ctx.case(f"killed at {crash.where} of epoch {crash.epoch}"):
            try:
                pairs.append((crash, interrupt_and_resume(ctx, clause, s, crash)))
            except Unreachable as e:
                skipped.append(str(e))
                raise  # the case is not judged, and says why
    if not pairs and not ctx.log.failing:
        raise NotApplicable("; ".join(skipped))
    return pairs


def resume_after(ctx: CheckContext, clause: str, s: Scenario, interrupted: Trace, root: Path,
                 how: str) -> ResumePair:
    """Resume ``s`` from the newest last checkpoint an interrupted run left under ``root``.

    The trainer's own resume always runs, whatever the suite could read of the file: when it
    raises, its error is the evidence (:func:`from_checkpoint`)."""
    last = interrupted.newest("last")
    if last is None:
        raise CheckFailed(f"{clause}: {how}, the run left no last checkpoint to resume from "
                          "(CKPT-1 asks for one every epoch)", cause="no last checkpoint written")
    second = with_load(s, str(root / last.relpath), resume=True, name=f"{s.name}-resumed")
    resumed = from_checkpoint(ctx, clause, second, last, f"{how}, the trainer's resume from",
                              ckpt_root=root)
    return ResumePair(interrupted=interrupted, checkpoint=last, resumed=resumed,
                      resumed_scenario=second)


def from_checkpoint(ctx: CheckContext, clause: str, s: Scenario, file: FileRecord, how: str,
                    *, ckpt_root: Path | None = None) -> Trace:
    """The run of ``s``, which starts from the trainer's own checkpoint ``file``, ended
    normally on every rank. When the trainer raised, that error is the evidence, with the
    trainer's frame: ``"<how> <file> raised <error> (<frame>)"``, grouped under "the trainer's
    resume raised ..."; a run that broke otherwise (hung, killed, the suite's own fault) is
    :class:`RunBroke`."""
    trace = ctx.runs.run(s, ckpt_root=ckpt_root) if ckpt_root is not None else ctx.run(s)
    if trace.completed:
        return trace
    broke = RunBroke(trace, s)
    bad = broke.rank
    if bad.status != "raised" or bad.is_ours:
        raise broke
    raise CheckFailed(f"{clause}: {how} {file.name} raised {bad.error}"
                      f"{trainer_frame(bad.detail)}", broke.detail,
                      cause=resume_cause(bad.error, bad.detail, str(s.get("ckpt.load_from"))))


def resume_cause(error: str, traceback: str, path: str) -> str:
    """The cause every run the trainer's resume raised in shares: "the trainer's resume
    raised <error>", the file it started from written ``<the checkpoint>`` (one cause,
    whichever file), the message whole as the traceback's last line has it (the error line is
    cut at 300 characters, path included, so its cut would move with the path's length)."""
    kind = error.partition(":")[0]
    whole = next((line.partition(": ")[2] for line in reversed(traceback.splitlines())
                  if ": " in line and line.partition(": ")[0].rpartition(".")[2] == kind), None)
    said = error if whole is None else f"{kind}: {whole}"
    return f"the trainer's resume raised {said.replace(path, '<the checkpoint>')}"


# a traceback's frame: its file, line and function, then the source line shown under it
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)\n(?:[ \t]+([^\n]*\S))?', re.M)
# frames that are not the trainer's: libraries (torch's load), the standard library, the suite
_NOT_TRAINER = re.compile(r"/(?:site|dist)-packages/|/lib/python3\.\d+/|<frozen |"
                          r"/trainspec/conformance/")


def trainer_frame(traceback: str) -> str:
    """Where the trainer raised, from the traceback of the run: its innermost frame outside
    libraries, the standard library and the suite, as " (at FILE:LINE in FUNC: CODE)"; ""
    when the traceback shows no frame."""
    frames = _FRAME.findall(traceback)
    if not frames:
        return ""
    own = [f for f in frames if not _NOT_TRAINER.search(f[0])]
    file, line, func, code = (own or frames)[-1]
    shown = f": {code.strip()}" if code.strip() and not set(code.strip()) <= set("^~ ") else ""
    return f" (at {file}:{line} in {func}{shown})"


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceRun:
    """A completed run, the folder it wrote in, and the newest last checkpoint it left there
    (named as the trainer named it: ``file.relpath``)."""

    trace: Trace
    root: Path
    file: FileRecord

    @property
    def path(self) -> str:
        return str(self.root / self.file.relpath)


def source_run(ctx: CheckContext, clause: str, s: Scenario) -> SourceRun:
    """A completed run of ``s`` and the last checkpoint it left (for finetunes and for the
    files CKPT-3 and CKPT-4 make from it), whatever the suite could read of that file."""
    key = "source:" + json.dumps(s.to_json(), sort_keys=True)
    cached = ctx.memo.get(key)
    if isinstance(cached, SourceRun):
        return cached
    root = ctx.runs.new_ckpt_root(f"{s.name}-source")
    trace = ctx.runs.run(s, ckpt_root=root)
    if not trace.completed:
        raise RunBroke(trace, s)
    last = trace.newest("last")
    if last is None:
        lacking = shortfall(s, trace)  # a run that did nothing says so, not what it left
        if lacking is not None:
            raise CheckFailed(f"{clause}: scenario {s.name!r}: the source run {lacking}, and "
                              "left no last checkpoint")
        raise CheckFailed(f"{clause}: the source run left no last checkpoint (CKPT-1 asks for "
                          "one every epoch)", cause="no last checkpoint written")
    found = SourceRun(trace=trace, root=root, file=last)
    ctx.memo[key] = found
    return found


def source_checkpoint(ctx: CheckContext, clause: str, s: Scenario) -> tuple[Trace, str]:
    """A completed run of ``s`` and the path of the last checkpoint it left (for finetunes)."""
    found = source_run(ctx, clause, s)
    return found.trace, found.path


def combined_decisions(pair: ResumePair, rank: int = 0) -> list[tuple[int, bool, bool]]:
    """(epoch, improved, stop) of the validations up to the checkpoint, then of the resume."""
    k = pair.ckpt_epoch
    before = [(v.epoch, v.improved, v.stop) for v in pair.interrupted.ranks[rank].validations
              if v.epoch <= k]
    return before + [(v.epoch, v.improved, v.stop) for v in pair.resumed.ranks[rank].validations]
