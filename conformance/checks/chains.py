"""Runs that chain through a checkpoint: interrupt-then-resume, and train-then-finetune."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trainspec.conformance.checks.base import CheckContext, CheckFailed, NotApplicable, RunBroke
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.scenario import CrashPoint, Scenario
from trainspec.conformance.run.trace import Trace

__all__ = ["ResumePair", "Unreachable", "interrupt_and_resume", "reachable_pairs",
           "resume_after", "source_checkpoint", "unreachable", "with_load"]

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
        epoch = self.checkpoint.epoch
        return -1 if epoch is None else epoch


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
    """Resume ``s`` from the newest last.pt an interrupted run left under ``root``."""
    last = interrupted.newest("last")
    if last is None:
        raise CheckFailed(f"{clause}: {how}, the run left no last.pt to resume from (CKPT-1 "
                          "asks for one every epoch)", cause="no last.pt written")
    if last.error:  # not at all, as its trainer loads it (weights-only is CKPT-1's matter)
        raise CheckFailed(f"{clause}: {how}, the last.pt left does not load: {last.error}",
                          cause=f"a last.pt that does not load: {last.error}")
    second = with_load(s, str(root / last.relpath), resume=True, name=f"{s.name}-resumed")
    resumed = ctx.runs.run(second, ckpt_root=root)
    if not resumed.completed:
        raise RunBroke(resumed, second)
    return ResumePair(interrupted=interrupted, checkpoint=last, resumed=resumed,
                      resumed_scenario=second)


def source_checkpoint(ctx: CheckContext, clause: str, s: Scenario) -> tuple[Trace, str]:
    """A completed run of ``s`` and the path of the last.pt it left (for finetunes)."""
    key = "source:" + json.dumps(s.to_json(), sort_keys=True)
    cached = ctx.memo.get(key)
    if isinstance(cached, tuple):
        trace, path = cached
        return trace, path
    root = ctx.runs.new_ckpt_root(f"{s.name}-source")
    trace = ctx.runs.run(s, ckpt_root=root)
    if not trace.completed:
        raise RunBroke(trace, s)
    last = trace.newest("last")
    if last is None or last.error:
        raise CheckFailed(f"{clause}: the source run left no loadable last.pt "
                          f"({'missing' if last is None else last.error})",
                          cause="no last.pt written" if last is None else
                          f"a last.pt that does not load: {last.error}")
    ctx.memo[key] = (trace, str(root / last.relpath))
    return trace, str(root / last.relpath)


def combined_decisions(pair: ResumePair, rank: int = 0) -> list[tuple[int, bool, bool]]:
    """(epoch, improved, stop) of the validations up to the checkpoint, then of the resume."""
    k = pair.ckpt_epoch
    before = [(v.epoch, v.improved, v.stop) for v in pair.interrupted.ranks[rank].validations
              if v.epoch <= k]
    return before + [(v.epoch, v.improved, v.stop) for v in pair.resumed.ranks[rank].validations]
