"""CKPT: checkpoint files (docs/spec/ckpt.md): which, when, what they hold, how they fail."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from trainspec.conformance.checks import embedded as _embedded  # noqa: F401 (CKPT-3)
from trainspec.conformance.checks import torn as _torn  # noqa: F401 (registers CKPT-2)
from trainspec.conformance.checks.base import (
    CheckContext,
    CheckFailed,
    RunBroke,
    check,
)
from trainspec.conformance.checks.chains import (
    combined_decisions,
    resume_after,
    source_run,
    with_load,
)
from trainspec.conformance.checks.common import make_scenario
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.records import RunExit, Write
from trainspec.conformance.run.scenario import CrashPoint, Scenario
from trainspec.conformance.run.trace import RankTrace

__all__ = ["exit_status", "exited_143"]

# what every checkpoint carries under the seed shape: progress, identity, config (the seed's
# save_ckpt takes it as cfg), and the state of every registered item as "<name>_state_dict"
REQUIRED_KEYS = ("epoch", "train_step", "run_id")
CONFIG_KEYS = ("config", "cfg")
ITEMS = ("model", "optimizer", "scheduler")


# the same in the spec's terms, for adapters that describe what a file holds (FileRecord.holds)
CONTENTS = ("epoch", "step", "run_id", "config", *ITEMS)


def _content_problem(f: FileRecord) -> str | None:
    if f.error and not f.weights_only_error and "weights only" in f.error.lower():
        # an adapter that reads its files weights-only only says so in ``error``
        return f"does not load with weights_only=True ({f.error})"
    if f.error:
        return f"does not load ({f.error})"
    if f.weights_only_error:
        return f"does not load with weights_only=True ({f.weights_only_error})"
    if f.holds is not None:  # a framework's own format, described by its adapter
        missing = [k for k in CONTENTS if k not in f.holds]
        if missing:
            return f"lacks {', '.join(missing)} (it holds {', '.join(f.holds) or 'nothing'})"
        return None
    keys = set(f.keys)
    missing = [k for k in REQUIRED_KEYS if k not in keys]
    config = next((k for k in CONFIG_KEYS if k in keys), None)
    if config is None:
        missing.append("config")
    missing += [f"{i}_state_dict" for i in ITEMS if f"{i}_state_dict" not in keys]
    if missing:
        return f"lacks {', '.join(missing)}"
    if f.epoch is None or f.step is None:
        return "has a non-integer epoch or train_step"
    config_type = None if config is None else f.types.get(config)
    if f.types.get("run_id") != "str" or config_type not in ("dict", "OrderedDict"):
        return "has a run_id that is not a string or a config that is not a plain mapping"
    return None


@check("CKPT-1", requires={"checkpoint"},
       covers=("CKPT-1.1", "CKPT-1.2", "CKPT-1.3", "CKPT-1.4", "CKPT-1.5", "CKPT-1.6"))
def check_checkpoint_files_and_contents(ctx: CheckContext) -> str:
    """last.pt after every epoch, epoch_<e>.pt on the interval, complete and weights-only."""
    # epochs 2 and 4 do not improve: last.pt is written after every epoch, not only when
    # best.pt is
    s = make_scenario("ckpt-files", [0.1, 0.3, 0.2, 0.4, 0.35],
                      cfg={"ckpt.every_n_epochs": 2})
    trace = ctx.completed(s)
    r: RankTrace = trace.rank0
    # the contents, file by file; a file that does not load reads as no file at all below
    for f in trace.files:
        if f.role is not None:
            with ctx.case(f"the contents of {f.name}"):
                problem = _content_problem(f)
                if problem:
                    refused = f.weights_only_error \
                        if problem.endswith(f"({f.weights_only_error})") else None
                    raise CheckFailed(f"CKPT-1: {f.name} {problem}", cause="" if refused is None
                                      else "a checkpoint that does not load weights-only: "
                                      f"{refused}")
    last_name = _names(trace.with_role("last"), "the last checkpoint")
    with ctx.case("the last checkpoint after every epoch", severity="loss"):
        for e in r.train_epochs[1:]:
            if e.last_file_epoch != e.epoch - 1:
                raise CheckFailed(f"CKPT-1: when epoch {e.epoch} started, {last_name} said epoch "
                                  f"{e.last_file_epoch}; expected {e.epoch - 1} (the last "
                                  "checkpoint is written after every epoch)")
    periodic = trace.with_role("epoch")
    with ctx.case("numbered checkpoints on the interval"):
        epochs = sorted(f.epoch for f in periodic if f.epoch is not None)
        if len(periodic) != 3 or epochs != [0, 2, 4]:
            raise CheckFailed(f"CKPT-1: with ckpt.every_n_epochs=2 over 5 epochs the run wrote "
                              f"{sorted(f.name for f in periodic)} as numbered checkpoints "
                              f"(epochs {epochs}); expected three, holding epochs 0, 2, 4 "
                              "(epoch_0.pt, epoch_2.pt, epoch_4.pt in the spec's names)")
    with ctx.case("the final last checkpoint", severity="loss"):
        last = trace.newest("last")
        if last is None or last.epoch != 4:
            raise CheckFailed(f"CKPT-1: {_NO_LAST}; expected one holding epoch 4" if last is None
                              else f"CKPT-1: the final {last.name} says epoch {last.epoch}, "
                              "expected 4")
    stopped = ""
    if "early_stopping" in ctx.capabilities:
        with ctx.case("the early-stop epoch's file", severity="loss"):
            stopped = _early_stop_file(ctx)
    off = make_scenario("ckpt-no-last", [0.1, 0.2], cfg={"ckpt.save_last": False})
    with ctx.case(off.name):
        written = sorted(f.name for f in ctx.completed(off).files
                         if f.role in ("last", "epoch"))
        if written:
            raise CheckFailed(f"CKPT-1: with ckpt.save_last=false and every_n_epochs unset the "
                              f"run wrote {written}; expected no last and no numbered "
                              "checkpoint")
    return f"{last_name} after each epoch; {_names(periodic, 'numbered checkpoints')} of " \
        "epochs 0, 2, 4 at every_n_epochs=2; none when off; each loads weights-only with " \
        f"epoch, step, run id, config and every item{stopped}"


_NO_LAST = "no file the run left is described as its last checkpoint"


def _names(files: list[FileRecord], what: str) -> str:
    """The files, named as the trainer names them: the one name they share, else ``what``
    with their names."""
    names = sorted({f.name for f in files})
    if len(names) == 1:
        return names[0]
    return f"{what} ({', '.join(names) if names else 'none described'})"


def _early_stop_file(ctx: CheckContext) -> str:
    """The epoch at which early stopping triggers is checkpointed like any other: the run's
    final last.pt holds it. Judged at the trainer's own stop (when it stops is PAT's matter)."""
    s = make_scenario("ckpt-early-stop", [0.3, 0.5, 0.4, 0.35, 0.3, 0.2],
                      cfg={"val.patience": 2})
    trace = ctx.completed(s)
    stop = next((v.epoch for v in trace.rank0.validations if v.stop and v.phase == "epoch"),
                None)
    if stop is None:
        ctx.notes.append("the early-stop epoch's file: the trainer never stopped early")
        return ""
    last = trace.newest("last")
    if last is None or last.epoch != stop:
        said = _NO_LAST if last is None else \
            f"the final {last.name} says epoch {last.epoch}"
        raise CheckFailed(f"CKPT-1: early stopping triggered at epoch {stop}, but {said}; "
                          f"expected {stop}: the epoch a run stops at is checkpointed like any "
                          "other")
    return f"; {last.name} of the early-stop epoch {stop}"


def _error_text(r: RankTrace) -> str:
    return f"{r.error}\n{r.detail}"


@check("CKPT-4", requires={"checkpoint", "resume"},
       covers=("CKPT-4.1", "CKPT-4.2", "CKPT-4.3", "CKPT-4.4"))
def check_checkpoint_errors_name_the_file(ctx: CheckContext) -> str:
    """A missing checkpoint names the locations tried (as given and under ckpt.dir); a
    corrupt one names the file. Both halves run to the end, each corrupt file a case of its
    own, each failing case reported."""
    base = make_scenario("ckpt-errors", [0.1, 0.2])
    with ctx.case("a missing path"):
        _missing_path_fails_clearly(ctx, base)
    made = _corrupt_files(ctx, base)
    for what, corrupt in made.items():
        with ctx.case(f"a corrupt file: {what}"):
            r = ctx.run(with_load(base, str(corrupt), resume=True,
                                  name=f"ckpt-corrupt-{corrupt.stem}")).rank0
            if r.status == "completed":
                raise CheckFailed(f"CKPT-4: {what} ({corrupt.name}) did not raise; the run "
                                  f"trained {r.epochs_trained}")
            if corrupt.name not in _error_text(r):
                raise CheckFailed(f"CKPT-4: {what} ({corrupt.name}) raised without naming the "
                                  f"file: {r.error}")
    return f"missing path: error names it as given and under ckpt.dir; {' and '.join(made)}: " \
        "each error names the file"


def _missing_path_fails_clearly(ctx: CheckContext, base: Scenario) -> None:
    """The error of a run whose ckpt.load_from names no file names the path as given and
    under ckpt.dir."""
    missing = with_load(base, "nowhere/missing-ckpt.pt", resume=True, name="ckpt-missing")
    missing_root = ctx.runs.new_ckpt_root("ckpt-missing")  # the run's ckpt.dir
    r = ctx.runs.run(missing, ckpt_root=missing_root).rank0
    said = _error_text(r)
    if r.status == "completed":
        raise CheckFailed("CKPT-4: ckpt.load_from=nowhere/missing-ckpt.pt (no such file) did "
                          f"not raise; the run trained {r.epochs_trained} from scratch")
    if "missing-ckpt.pt" not in said:
        raise CheckFailed(f"CKPT-4: a missing checkpoint raised without naming the path tried: "
                          f"{r.error}")
    under_dir = missing_root / "nowhere" / "missing-ckpt.pt"
    if not any(str(p) in said for p in (under_dir, under_dir.resolve())):
        raise CheckFailed("CKPT-4: a missing checkpoint (ckpt.load_from=nowhere/missing-ckpt.pt) "
                          "raised without naming the location relative to ckpt.dir "
                          f"({under_dir}): {_first_line(said)}")


def _corrupt_files(ctx: CheckContext, base: Scenario) -> dict[str, Path]:
    """The corrupt files the check makes itself, by what each is: the trainer's own last
    checkpoint truncated to half (where a source run leaves one), and a file of garbage
    bytes."""
    root = ctx.runs.new_ckpt_root("ckpt-corrupt")
    made: dict[str, Path] = {}
    try:
        path = source_run(ctx, "CKPT-4", base).path
    except (CheckFailed, RunBroke) as e:  # a source run that failed is judged elsewhere
        ctx.notes.append(f"a truncated copy of the trainer's own checkpoint: {e}")
    else:
        made["a checkpoint truncated to half its size"] = _truncated_copy(path, root)
    garbage = root / "garbage-last.pt"
    garbage.write_bytes(b"not a checkpoint: garbage bytes " * 8)
    made["a file of garbage bytes"] = garbage
    return made


def _truncated_copy(path: str, root: Path) -> Path:
    """A copy of the checkpoint at ``path`` (a file, or a framework's folder) under ``root``
    with every file in it cut to half its size."""
    corrupt = root / "corrupt-last.pt"
    if os.path.isdir(path):  # a framework's checkpoint folder: every file in it is damaged
        shutil.copytree(path, corrupt)
        damaged = [p for p in corrupt.rglob("*") if p.is_file()]
    else:
        shutil.copyfile(path, corrupt)
        damaged = [corrupt]
    for part in damaged:
        with part.open("r+b") as f:
            f.truncate(part.stat().st_size // 2)
    return corrupt


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"


@check("CKPT-5", requires={"checkpoint", "resume"},
       covers=("CKPT-5.1", "CKPT-5.2", "CKPT-5.3", "CKPT-5.4"))
def check_sigterm_leaves_a_resumable_checkpoint(ctx: CheckContext) -> str:
    """SIGTERM mid-epoch: a checkpoint is written, the process exits with 143, and resuming
    decides as the run that was never interrupted; with ckpt.save_last=false too."""
    s = make_scenario("ckpt-sigterm", [0.3, 0.8, 0.5, 0.4, 0.35], cfg={"val.patience": 3})
    whole = ctx.completed(s).rank0
    root = ctx.runs.new_ckpt_root("ckpt-sigterm")
    crash = CrashPoint(where="train_end", epoch=1, how="sigterm")
    interrupted = ctx.runs.run(s.replace(name="ckpt-sigterm-term", crash=crash),
                               ckpt_root=root)
    r = interrupted.rank0
    saved, epoch = False, None
    with ctx.case("a checkpoint written on SIGTERM", severity="loss"):
        if r.status == "completed" and r.epochs_trained == whole.epochs_trained:
            raise CheckFailed("CKPT-5: after SIGTERM during epoch 1 the run went on to the end; "
                              "expected it to checkpoint and exit")
        kinds = r.kinds
        signalled = kinds.index("crash") if "crash" in kinds else len(kinds)
        writes = [e for e in r.records[signalled:] if isinstance(e, Write)]
        if not writes:
            last = interrupted.newest("last")
            raise CheckFailed(f"CKPT-5: after SIGTERM during epoch 1 the process ended "
                              f"({r.status}: {r.error}) without writing a checkpoint; last.pt "
                              f"says epoch {None if last is None else last.epoch}. Handle "
                              "SIGTERM: finish or cut the epoch, save, exit.")
        saved = True
    with ctx.case("exit status 143"):
        _exits_143(r)
    if saved:  # a resume from what SIGTERM left
        with ctx.case("the resume decides as the uninterrupted run"):
            pair = resume_after(ctx, "CKPT-5", s, interrupted, root,
                                "after SIGTERM during epoch 1")
            want = [(v.epoch, v.improved, v.stop) for v in whole.validations]
            seen = combined_decisions(pair)
            epoch = pair.ckpt_epoch
            if seen != want or pair.resumed.rank0.epochs_trained[:1] != [pair.ckpt_epoch + 1]:
                raise CheckFailed(f"CKPT-5: resumed from the checkpoint written on SIGTERM "
                                  f"(epoch {pair.ckpt_epoch}), the run decided {seen} and "
                                  f"trained {pair.resumed.rank0.epochs_trained}; "
                                  f"uninterrupted: {want}")
    with ctx.case("ckpt.save_last=false"):
        _sigterm_writes_last_despite_save_last(ctx)
    return f"SIGTERM in epoch 1: checkpoint of epoch {epoch} written, exit status 143, " \
        "resume decided as the uninterrupted run; last.pt written with ckpt.save_last=false"


def exit_status(r: RankTrace) -> str:
    """How the process ended, in the words of an exit status."""
    if r.status == "completed":
        return "exited with status 0"
    if r.status == "raised":
        return f"raised {r.error} (exit status 1)"
    exits = [e for e in r.records if isinstance(e, RunExit)]
    if r.status == "exited" and exits:  # sys.exit(code): the code is the status
        return f"exited with status {exits[-1].code}"
    return r.error or r.status


def exited_143(r: RankTrace) -> bool:
    """Whether the process exited with 143 (128 + SIGTERM), as a preempted run does."""
    return r.status == "exited" and exit_status(r) == "exited with status 143"


def _exits_143(r: RankTrace) -> None:
    """A preempted run exits with 143: a scheduler tells it from a crash."""
    if exited_143(r):
        return
    raise CheckFailed(f"CKPT-5: after SIGTERM during epoch 1 the process {exit_status(r)}, "
                      "expected 143 (128 + SIGTERM), so that a scheduler tells a preemption "
                      "from a finished run or a crash: raise SystemExit(143) after the save")


def _sigterm_writes_last_despite_save_last(ctx: CheckContext) -> None:
    """With ckpt.save_last=false, SIGTERM still leaves the resumable last.pt (CKPT-5.2)."""
    s = make_scenario("ckpt-sigterm-no-last", [0.3, 0.8, 0.5],
                      cfg={"ckpt.save_last": False})
    crash = CrashPoint(where="train_end", epoch=1, how="sigterm")
    trace = ctx.run(s.replace(crash=crash))
    if trace.newest("last") is None:
        raise CheckFailed(f"CKPT-5: with ckpt.save_last=false, after SIGTERM during epoch 1 "
                          f"the process {exit_status(trace.rank0)} leaving no last.pt; "
                          "expected the resumable last.pt: on SIGTERM write it whatever "
                          "save_last says")
