"""CKPT-3: loading a checkpoint never runs code embedded in it (docs/spec/ckpt.md).

The crafted checkpoint is a copy of the trainer's own (its whole folder, one file the trainer
may unpickle crafted at a time: :mod:`~trainspec.conformance.checks.planted`), handed to the
trainer's resume and to its finetune. Each (resume or finetune, crafted file) is a case of its
own, and every one runs.
"""

from __future__ import annotations

from pathlib import Path

from trainspec.conformance.checks import planted
from trainspec.conformance.checks.base import CheckContext, CheckFailed, NotApplicable, check
from trainspec.conformance.checks.chains import SourceRun, source_run, with_load
from trainspec.conformance.checks.common import make_scenario

__all__: list[str] = []


@check("CKPT-3", requires={"checkpoint"}, covers=("CKPT-3.1", "CKPT-3.2"))
def check_loading_never_runs_embedded_code(ctx: CheckContext) -> str:
    """A copy of the trainer's own checkpoint, crafted to run code when unpickled, never runs
    it, resume or finetune.

    The copy is the trainer's own format (its whole folder, one file the trainer may unpickle
    crafted at a time: :mod:`~trainspec.conformance.checks.planted`). The marker is looked at
    first: code that ran is the finding, whatever the run did next; "never ran" is judged
    only where the trainer opened the crafted file.
    """
    source = source_run(ctx, "CKPT-3", make_scenario("ckpt-malicious", [0.1, 0.2]))
    checkpoint = source.root / source.file.relpath
    candidates = planted.pickled_files(source.root, checkpoint)
    if not candidates:
        raise NotApplicable(f"no file the trainer wrote beside {source.file.name} is a pickle "
                            "(a torch archive, a pickle): nothing it loads can embed code")
    tells = planted.atime_tells(ctx.runs.new_ckpt_root("ckpt-malicious-probe"))
    opened: dict[str, list[str]] = {}
    beside = Path(source.file.relpath).parent
    for resume in (True, False):
        how = "resume" if resume else "finetune"
        for crafted in candidates:
            shown = (crafted.relative_to(beside) if crafted.is_relative_to(beside)
                     else crafted).as_posix()
            with ctx.case(f"the {how} from a copy with {shown} crafted"):
                found, then = _plant_and_load(ctx, source, crafted, resume=resume, tells=tells)
                if found is True:
                    raise CheckFailed(
                        f"CKPT-3: the embedded code ran: the {how} from a copy of "
                        f"{source.file.name} executed code embedded in {shown} (it created a "
                        f"marker folder{then}): load with torch.load(weights_only=True)")
                if found is None:
                    raise NotApplicable(f"the {how} opened no crafted {shown}")
                opened.setdefault(how, []).append(shown)
    if not opened and not ctx.log.failing:
        with ctx.case("a crafted file opened"):
            raise CheckFailed(f"CKPT-3: neither the resume nor the finetune from a crafted copy "
                              f"of {source.file.name} opened a crafted file "
                              f"({', '.join(p.as_posix() for p in candidates)}): nothing shows "
                              "a load was attempted")
    seen = "; ".join(f"{how}: {', '.join(files)}" for how, files in opened.items())
    return f"copies of its own checkpoint whose pickles call os.mkdir, opened by the trainer " \
        f"({seen}): the code never ran"


def _plant_and_load(ctx: CheckContext, source: SourceRun, crafted: Path, *, resume: bool,
                    tells: bool) -> tuple[bool | None, str]:
    """Start a run from a copy of ``source``'s folder with ``crafted`` crafted: True when
    the embedded code ran (whatever the run did next), False when the trainer opened the
    crafted file and the code did not run, None when it never opened it; and how the run
    ended, when it did not complete (", then the run raised ...")."""
    how = "resume" if resume else "finetune"
    which = "-".join(crafted.parts)
    copy = planted.plant(source.root, ctx.runs.new_ckpt_root(f"ckpt-malicious-{which}"),
                         crafted)
    load = copy.root / source.file.relpath
    # epochs beyond the source run's: a resume has some left to train
    s = with_load(make_scenario("ckpt-malicious", [0.1, 0.2, 0.3, 0.4]), str(load),
                  resume=resume, name=f"ckpt-malicious-{how}-{which}")
    trace = ctx.runs.run(s)
    bad = next((r for r in trace.ranks if r.status != "completed"), None)
    then = "" if bad is None else f", then the run {bad.status}: {bad.error}"
    if copy.has_run:  # the marker first: the code ran, whatever the run did next
        return True, then
    if tells:
        return (False if copy.was_read() else None), then
    said = "\n".join(f"{r.error}\n{r.detail}" for r in trace.ranks if r.status != "completed")
    if trace.completed or planted.reads_show(said, crafted):
        return False, then
    return None, then
