"""Runs that chain through a checkpoint: interrupt-then-resume, and train-then-finetune."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trainspec.conformance.checks.base import CheckContext, CheckFailed, RunBroke
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.scenario import CrashPoint, Scenario
from trainspec.conformance.run.trace import Trace

__all__ = ["ResumePair", "interrupt_and_resume", "resume_after", "source_checkpoint",
           "with_load"]


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
    root = ctx.runs.new_ckpt_root(f"{s.name}-{crash.where}-{crash.epoch}")
    first = s.replace(name=f"{s.name}-crash-{crash.where}-{crash.epoch}", crash=crash)
    interrupted = ctx.runs.run(first, ckpt_root=root)
    hit = [r for r in interrupted.ranks if r.crashes]
    if not hit:
        if not interrupted.completed:
            raise RunBroke(interrupted, first)
        raise CheckFailed(f"{clause}: the run never reached the interruption point "
                          f"({crash.where} of epoch {crash.epoch}); it trained "
                          f"{interrupted.rank0.epochs_trained}")
    pair = resume_after(ctx, clause, s, interrupted, root,
                        f"interrupted at {crash.where} of epoch {crash.epoch}")
    ctx.memo[key] = pair
    return pair


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
