"""Judging the files a real run wrote against its config and its decisions (CKPT-1, BEST-3,
CKPT-5, DBG-3).

The logs list the run folder (name, size, modification time) at each epoch's start, after
each validation and at the end: a file whose size or time changed between two listings was
written in between. The files left at the end are loaded weights-only in a subprocess
(:mod:`trainspec.conformance.audit.fileprobe`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path

from trainspec.conformance.audit.decisions import result
from trainspec.conformance.audit.fileprobe import FileSeen, probe_files
from trainspec.conformance.audit.logs import Event, Log
from trainspec.conformance.audit.runs import AuditedRun, Launch
from trainspec.conformance.audit.sequence import Validations
from trainspec.conformance.spec.results import CheckResult

__all__ = ["judge_files"]

_EPOCH_FILE = re.compile(r"epoch_(\d+)\.pt$")
# what a debug run must not write (DBG-3): the checkpoint files of the reference and of every
# framework the ready audit callbacks serve (Keras archives and HDF5 weights, HF's safetensors
# and .bin weights, skorch's pickled parameters)
_CHECKPOINT_SUFFIXES = (".pt", ".ckpt", ".pth", ".safetensors", ".bin", ".keras", ".h5",
                        ".pkl")
_HOLDS = ("epoch", "train_step", "run_id", "config", "model_state_dict")
Listing = Mapping[str, list[int]]


def judge_files(run: AuditedRun, seq: Validations) -> list[CheckResult]:
    cfg = run.first.main.config
    out = _debug_files(run)
    if cfg.debug or not cfg.ckpt_enable:
        why = "debug mode" if cfg.debug else "checkpointing is off (ckpt.enable=false)" \
            if cfg.ckpt_enable is False else "the log does not describe the trainer's " \
            "checkpoint files (ckpt.enable is null: a framework's own file layout)"
        return out + [result("audit_files", c, "n/a", f"not observable from this run: {why}")
                      for c in ("CKPT-1", "BEST-3", "CKPT-5")]
    left = [launch.main.run_dir / name for launch in run.launches
            for name in _last_listing(launch.main) if name.endswith(".pt")]
    seen = probe_files([p.resolve() for p in left])
    out += _ckpt_files(run, seen)
    out.append(_best_file(run, seq, seen))
    out.append(_sigterm(run, seen))
    return out


def _last_listing(log: Log) -> Listing:
    listed = [e for e in log.events if "files" in e.data]
    return listed[-1].files if listed else {}


def _changed(before: Listing, after: Listing, name: str) -> bool:
    return name in after and before.get(name) != after[name]


def _debug_files(run: AuditedRun) -> list[CheckResult]:
    if not run.first.main.config.debug:
        return [result("audit_debug_writes_no_checkpoint", "DBG-3", "n/a",
                       "not observable from this run: not in debug mode")]
    written = sorted(n for launch in run.launches for n in _last_listing(launch.main)
                     if n.endswith(_CHECKPOINT_SUFFIXES))
    if written:
        return [result("audit_debug_writes_no_checkpoint", "DBG-3", "failed",
                       f"a debug run left checkpoint files {written[:6]} in "
                       f"{run.first.main.run_dir} (DBG-3.1)")]
    return [result("audit_debug_writes_no_checkpoint", "DBG-3", "passed",
                   "the debug run wrote no checkpoint file (DBG-3.1; external logging sinks "
                   "are not observable from a log)")]


def _epoch_listings(log: Log) -> list[tuple[int, Listing, Listing]]:
    """(epoch, files at its start, files once its checkpoints are written) for every epoch
    whose end the log shows (the next epoch's start, or the run's end)."""
    marks = [e for e in log.events if e.kind in ("train_start", "end")]
    return [(a.number("epoch"), a.files, b.files) for a, b in pairwise(marks)
            if a.kind == "train_start"]


def _ckpt_files(run: AuditedRun, seen: Mapping[Path, FileSeen]) -> list[CheckResult]:
    cfg = run.first.main.config
    problems: list[str] = []
    epochs = 0
    for launch in run.launches:
        for epoch, start, done in _epoch_listings(launch.main):
            epochs += 1
            where = launch.main.where()
            if cfg.save_last is not False and not _changed(start, done, "last.pt"):
                problems.append(f"CKPT-1.1: last.pt was not written after epoch {epoch} "
                                f"({where})")
            if cfg.save_last is False and "last.pt" in done:
                problems.append(f"CKPT-1.2: last.pt exists after epoch {epoch} with "
                                f"ckpt.save_last=false ({where})")
            every = cfg.ckpt_every_n_epochs
            due = every is not None and epoch % every == 0
            if due != _changed(start, done, f"epoch_{epoch}.pt"):
                problems.append(f"CKPT-1.{3 if every else 4}: epoch_{epoch}.pt "
                                f"{'missing' if due else 'written'} with ckpt.every_n_epochs="
                                f"{every} ({where})")
    for path, file in sorted(seen.items()):
        if file.error is not None:
            problems.append(f"CKPT-1.6: {path} does not load with torch.load(weights_only="
                            f"True): {file.error}")
        elif missing := [k for k in _HOLDS if k not in file.keys]:
            problems.append(f"CKPT-1.5: {path} holds no {', '.join(missing)} (keys "
                            f"{list(file.keys)[:10]})")
    if problems:
        return [result("audit_files_follow_the_config", "CKPT-1", "failed",
                       "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)"
                                                  if len(problems) > 3 else ""))]
    if not epochs and not seen:
        return [result("audit_files_follow_the_config", "CKPT-1", "n/a",
                       "not observable from this run: no epoch ended in the logs")]
    return [result("audit_files_follow_the_config", "CKPT-1", "passed",
                   f"last.pt and epoch_<e>.pt as the config says after {epochs} epoch(s); "
                   f"{len(seen)} file(s) load weights-only and hold {', '.join(_HOLDS)}")]


def _best_file(run: AuditedRun, seq: Validations, seen: Mapping[Path, FileSeen]
               ) -> CheckResult:
    name = "audit_best_file_follows_improvements"
    problems: list[str] = []
    improvements = 0
    for launch in run.launches:
        problems += _best_writes(launch)
        improving = [s for s in seq.steps if s.log is launch.main and s.improved]
        improvements += len(improving)
        best = seen.get((launch.main.run_dir / "best.pt").resolve())
        if not improving or best is None:
            if improving and best is None and launch.has_ended:
                problems.append(f"BEST-3.1: no best.pt in {launch.main.run_dir} after "
                                f"{len(improving)} improvement(s)")
            continue
        last = improving[-1]
        epoch = -1 if last.epoch is None else last.epoch
        if best.error is None and best.weights != last.event.get("weights"):
            problems.append(f"BEST-3.3: best.pt does not hold the weights of {last.name}, "
                            f"the last improvement ({last.where})")
        if best.error is None and best.epoch != epoch:
            problems.append(f"BEST-3.4: best.pt records epoch {best.epoch}; the last "
                            f"improvement was {last.name} (epoch {epoch})")
        step = last.event.get("train_step")
        if best.error is None and isinstance(step, int) and best.step != step:
            problems.append(f"BEST-3.6: best.pt records step {best.step}; {last.name} was "
                            f"at step {step}")
        if best.error is not None:
            problems.append(f"BEST-3: best.pt does not load weights-only: {best.error}")
    if problems:
        return result(name, "BEST-3", "failed", "; ".join(problems[:3]))
    if not improvements:
        return result(name, "BEST-3", "n/a", "not observable from this run: no improvement")
    return result(name, "BEST-3", "passed",
                  f"best.pt written at each of {improvements} improvement(s) and at no other "
                  "validation; it holds the last one's weights, epoch and step")


def _best_writes(launch: Launch) -> list[str]:
    before: Listing = {}
    problems = []
    for e in launch.main.events:
        if e.kind == "val" and e.get("score") is not None:
            written = _changed(before, e.files, "best.pt")
            if written != bool(e.get("improved")):
                problems.append(_write_problem(launch.main, e, written))
        if "files" in e.data:
            before = e.files
    return problems


def _write_problem(log: Log, event: Event, written: bool) -> str:
    what = "val.first validation" if event.get("phase") == "first" else \
        f"validation after epoch {event.get('epoch')}"
    if written:
        return (f"BEST-3.2: the {what} did not improve but best.pt was rewritten "
                f"({log.where(event)})")
    return f"BEST-3.1: the {what} improved but best.pt was not written ({log.where(event)})"


def _sigterm(run: AuditedRun, seen: Mapping[Path, FileSeen]) -> CheckResult:
    name = "audit_sigterm_leaves_a_resumable_checkpoint"
    for launch in run.launches:
        closed = launch.main.closed or {}
        if closed.get("exit") != 143:
            continue
        ends = launch.main.of("train_end")
        last = seen.get((launch.main.run_dir / "last.pt").resolve())
        if last is None or last.error is not None:
            return result(name, "CKPT-5", "failed", f"the launch exited 143 on SIGTERM but "
                          f"left no loadable last.pt in {launch.main.run_dir} (CKPT-5.2)")
        if ends and last.epoch != ends[-1].number("epoch"):
            return result(name, "CKPT-5", "failed", f"after SIGTERM last.pt records epoch "
                          f"{last.epoch}; epoch {ends[-1].number('epoch')} was the last trained")
        return result(name, "CKPT-5", "passed", "the launch stopped by SIGTERM exited 143 and "
                      "left last.pt of its last epoch")
    return result(name, "CKPT-5", "n/a", "not observable from this run: no launch ended by "
                  "SIGTERM")
