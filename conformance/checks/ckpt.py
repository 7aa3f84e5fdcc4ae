"""CKPT: checkpoint files (docs/spec/ckpt.md): which, when, what they hold, how they fail."""

from __future__ import annotations

import shutil

from trainspec.conformance.checks.base import CheckContext, CheckFailed, check
from trainspec.conformance.checks.chains import source_checkpoint, with_load
from trainspec.conformance.checks.common import make_scenario
from trainspec.conformance.trace import FileRecord, RankTrace

__all__: list[str] = []

# what every checkpoint carries under the seed shape: progress, identity, config, and the
# state of every registered item as "<name>_state_dict"
REQUIRED_KEYS = ("epoch", "train_step", "run_id", "config")
ITEMS = ("model", "optimizer", "scheduler")


def _content_problem(f: FileRecord) -> str | None:
    if f.error:
        return f"does not load with weights_only=True ({f.error})"
    content = f.content or {}
    missing = [k for k in REQUIRED_KEYS if k not in content]
    missing += [f"{i}_state_dict" for i in ITEMS if f"{i}_state_dict" not in content]
    if missing:
        return f"lacks {', '.join(missing)}"
    if not isinstance(content["epoch"], int) or not isinstance(content["train_step"], int):
        return "has a non-integer epoch or train_step"
    if not isinstance(content["run_id"], str) or not isinstance(content["config"], dict):
        return "has a run_id that is not a string or a config that is not a plain mapping"
    return None


@check("CKPT-1", requires={"checkpoint"})
def check_checkpoint_files_and_contents(ctx: CheckContext) -> str:
    """last.pt after every epoch, epoch_<e>.pt on the interval, complete and weights-only."""
    s = make_scenario("ckpt-files", [0.1, 0.2, 0.3, 0.4, 0.5],
                      cfg={"ckpt.every_n_epochs": 2})
    trace = ctx.completed(s)
    r: RankTrace = trace.rank0
    for e in r.train_epochs[1:]:
        if e.last_file_epoch != e.epoch - 1:
            raise CheckFailed(f"CKPT-1: when epoch {e.epoch} started, last.pt said epoch "
                              f"{e.last_file_epoch}; expected {e.epoch - 1} (last.pt is written "
                              "after every epoch)")
    epochs = sorted(f.epoch for f in trace.files if f.name.startswith("epoch_")
                    and f.epoch is not None)
    names = sorted(f.name for f in trace.files if f.name.startswith("epoch_"))
    if names != ["epoch_0.pt", "epoch_2.pt", "epoch_4.pt"] or epochs != [0, 2, 4]:
        raise CheckFailed(f"CKPT-1: with ckpt.every_n_epochs=2 over 5 epochs the run wrote "
                          f"{names} (epochs {epochs}); expected epoch_0.pt, epoch_2.pt, "
                          "epoch_4.pt holding epochs 0, 2, 4")
    for f in trace.files:
        if f.name.endswith(".pt"):
            problem = _content_problem(f)
            if problem:
                raise CheckFailed(f"CKPT-1: {f.name} {problem}")
    last = trace.newest("last.pt")
    if last is None or last.epoch != 4:
        raise CheckFailed(f"CKPT-1: the final last.pt says epoch "
                          f"{None if last is None else last.epoch}, expected 4")
    off = make_scenario("ckpt-no-last", [0.1, 0.2], cfg={"ckpt.save_last": False})
    written = sorted(f.name for f in ctx.completed(off).files
                     if f.name == "last.pt" or f.name.startswith("epoch_"))
    if written:
        raise CheckFailed(f"CKPT-1: with ckpt.save_last=false and every_n_epochs unset the "
                          f"run wrote {written}; expected no last.pt and no epoch_<e>.pt")
    return "last.pt after each epoch; epoch_0/2/4.pt at every_n_epochs=2; none when off; " \
        "each loads weights-only with epoch, step, run id, config and every item"


def _error_text(r: RankTrace) -> str:
    return f"{r.error}\n{r.detail}"


@check("CKPT-4", requires={"checkpoint", "resume"})
def check_checkpoint_errors_name_the_file(ctx: CheckContext) -> str:
    """A missing checkpoint names the locations tried; a corrupt one names the file."""
    base = make_scenario("ckpt-errors", [0.1, 0.2])
    missing = with_load(base, "nowhere/missing-ckpt.pt", resume=True, name="ckpt-missing")
    r = ctx.run(missing).rank0
    if r.status == "completed":
        raise CheckFailed("CKPT-4: ckpt.load_from=nowhere/missing-ckpt.pt (no such file) "
                          f"did not raise; the run trained {r.epochs_trained} from scratch")
    if "missing-ckpt.pt" not in _error_text(r):
        raise CheckFailed(f"CKPT-4: a missing checkpoint raised without naming the path "
                          f"tried: {r.error}")
    _, path = source_checkpoint(ctx, "CKPT-4", base)
    root = ctx.harness.new_ckpt_root("ckpt-corrupt")
    corrupt = root / "corrupt-last.pt"
    shutil.copyfile(path, corrupt)
    with corrupt.open("r+b") as f:
        f.truncate(corrupt.stat().st_size // 2)
    r = ctx.run(with_load(base, str(corrupt), resume=True, name="ckpt-corrupt")).rank0
    if r.status == "completed":
        raise CheckFailed("CKPT-4: a checkpoint truncated to half its size did not raise; the "
                          f"run trained {r.epochs_trained}")
    if "corrupt-last.pt" not in _error_text(r):
        raise CheckFailed(f"CKPT-4: a truncated checkpoint raised without naming the file: "
                          f"{r.error}")
    return "missing path: error names it; truncated file: error names it"
