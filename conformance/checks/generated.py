"""Generated runs of every kind, judged against the model of the spec next to the trainer.

Hypothesis draws a run kind (fresh; resumed from any file a source run left, interrupted at
any point or run to its final epoch or its early stop; finetuned; debug), the config keys the
spec names, and a score script with ties, non-finite values, gains below 0.01 and values closer
than float32 can tell apart. Each example runs the chain in this process (a forked worker
child, as a property does), interrupting the source run by an exception at the drawn point,
and compares every run's observables, files included, with
:mod:`trainspec.conformance.spec.model`.

The passes that draw, judge and shrink these chains within a budget of trainer runs are
:mod:`trainspec.conformance.checks.generated_passes`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from trainspec.conformance.checks.chains import resume_cause, with_load
from trainspec.conformance.checks.model_compare import (
    Divergence,
    divergences,
    file_divergences,
    schedule_divergences,
)
from trainspec.conformance.run.adapter import CAPABILITIES
from trainspec.conformance.run.describe import describe_files
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.memory import MemoryContext, call_in_fork, run_in_fork
from trainspec.conformance.run.records import Done, Record, TrainEnd, TrainStart
from trainspec.conformance.run.scenario import CrashWhere, Scenario, ScoreScript, Task
from trainspec.conformance.run.trace import RankTrace, parse_rank
from trainspec.conformance.spec.model import (
    Chain,
    Interruption,
    ModelConfig,
    expect_chain,
    expect_run,
)

__all__ = ["DRAW_SEED", "RUNS", "SET_ASIDE_SENTENCES", "Broke", "examples", "feasible",
           "judge_example", "quotas"]

_POINTS: tuple[Interruption, ...] = ("train_start", "train_end", "val_start", "val_after_save")
_MORE_FILES = 3  # a resume is judged from the drawn file and up to this many others
# a crash on a non-finite score is NAN-3's (no model clause): the chains showing it are set
# aside for the model's clauses, and NAN-3's own check judges the trainer on it
SET_ASIDE_SENTENCES = ("NAN-3.1",)
# the draw's seed, fixed, so that the examples do not change when the code drawing them does
# (the seed the derandomized draw took from this module's code when the family's mutants,
# tests/mutants/model.py, were first measured)
DRAW_SEED = int("2080930751183862293938553768689477505901499956361270823129059000608487686"
                 "4423270665686270720599787622790238187042159")

# two optimizer steps an epoch (so step counts show), nothing else: a run takes milliseconds
_TASK = Task(n_train=8, n_val=4, n_test=4, batch_size=4)


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


# ------------------------------------------------------------------------------ drawing


def _score() -> st.SearchStrategy[float]:
    """Values with ties, non-finite ones, gains under 0.01 and gaps float32 cannot show."""
    return st.one_of(st.sampled_from([0.25, 0.5, 0.75]), st.sampled_from([0.5005, 0.503,
                                                                          0.5 + 1e-9]),
                     st.sampled_from([float("nan"), float("inf"), float("-inf")]),
                     st.floats(-1.0, 1.0, allow_nan=False, width=32))


# a walk's gains: better, a relapse, flat, gains below 0.01 and below float32's resolution,
# a NaN; after a relapse the next gain is a new best
_GAINS = (0.125, -0.0625, 0.0, 0.004, 1e-9, math.nan)


@st.composite
def _walk(draw: st.DrawFn, n: int, minimize: bool) -> list[float]:
    """Scores that move by gains in the direction of val.minimize, so improvements,
    plateaus and relapses come in runs."""
    value, out = draw(st.sampled_from([0.25, 0.5])), []
    for gain in draw(st.lists(st.sampled_from(_GAINS), min_size=n, max_size=n)):
        if not math.isnan(gain):
            value += -gain if minimize else gain
        out.append(gain if math.isnan(gain) else value)  # a NaN leaves the walk where it was
    return out


# the kinds of chain and the share of the chains each gets, drawn in this order (a resumed
# chain, judged from up to four files, costs the most runs: it comes last), and what each needs
_KINDS: tuple[tuple[str, int, frozenset[str]], ...] = (
    ("fresh", 3, frozenset()), ("debug", 2, frozenset({"debug"})),
    ("finetuned", 2, frozenset({"checkpoint", "finetune"})),
    ("resumed", 3, frozenset({"checkpoint", "resume"})))


def quotas(caps: frozenset[str], chains: int) -> dict[str, int]:
    """How many of ``chains`` each kind of chain the target can make gets, by its share (a
    draw of its own per kind: a kind hypothesis would draw rarely still gets its chains)."""
    kinds = [(kind, share) for kind, share, needs in _KINDS if needs <= caps]
    total = sum(share for _, share in kinds)
    out = {kind: chains * share // total for kind, share in kinds}
    out[kinds[0][0]] += chains - sum(out.values())  # what rounding left: fresh runs
    return out


@st.composite
def examples(draw: st.DrawFn, *, kind: str, caps: frozenset[str] = CAPABILITIES
             ) -> dict[str, Any]:
    """One generated chain of ``kind``: the fresh scenario, where the source is interrupted and
    which of its files the second run starts from (as JSON, the form a replay takes)."""
    chained = kind in ("resumed", "finetuned")
    # a chain needs epochs before and after its file; a fresh run may train none
    low = 3 if chained else 0 if "eval_only" in caps else 1
    n = draw(st.integers(low, 6 if chained else 5))
    minimize = draw(st.booleans())
    scores = draw(_walk(n, minimize)) if draw(st.booleans()) else draw(
        st.lists(_score(), min_size=n, max_size=n))
    first = draw(st.one_of(st.none(), _score())) if "val_first" in caps else None

    def maybe(capability: str, strategy: st.SearchStrategy[Any], default: Any) -> Any:
        return draw(strategy) if capability in caps else default

    ckpt = "checkpoint" in caps
    save_last = True if not ckpt else draw(st.booleans())
    s = Scenario(name="generated", scores=ScoreScript.of(scores, first),
                 task=_TASK).with_config(**{
        "num_epochs": n, "val.first": first is not None,
        "val.every_n_epochs": maybe("val_every_n", st.integers(1, 3), 1),
        "val.minimize": minimize,
        "val.patience": maybe("early_stopping", st.sampled_from([2, 3, None, 1]), None),
        "val.start_patience": maybe("start_patience", st.sampled_from([0, 1, 2]), 0),
        "test.enable": maybe("test_pass", st.booleans(), False),
        "ckpt.enable": True if chained else ckpt and draw(st.booleans()),
        # a chain always leaves a file to start from: numbered ones when last.pt is off
        "ckpt.every_n_epochs": draw(st.sampled_from([1, 2] if chained and not save_last
                                                    else [None, 1, 2])) if ckpt else None,
        "ckpt.save_last": save_last,
        "grad_accum_steps": maybe("grad_accum", st.sampled_from([1, 2]), 1),
    })
    at = None
    if chained and draw(st.booleans()):
        at = [draw(st.sampled_from(_POINTS)), draw(st.integers(1, max(1, n - 1)))]
    return {"kind": kind, "scenario": s.to_json(), "interrupted_at": at,
            "file_index": draw(st.integers(0, 3)) if chained else 0}


# ------------------------------------------------------------------------------ running


def _run(adapter: Any, s: Scenario, root: Path, at: tuple[CrashWhere, int] | None = None
         ) -> tuple[RankTrace, list[FileRecord]]:
    """One run in a process forked for it (no run sees another's module globals, working
    folder or registries, as in the harness): its rank trace and the files it left under
    ``root``."""
    root.mkdir(parents=True, exist_ok=True)  # the run's own ckpt_root exists, as in the harness
    RUNS[0] += 1
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    run = run_in_fork(adapter, s, root, context=lambda r: _Interrupting(r, at), stop=Interrupted)
    if run.timed_out:
        raise Broke("timeout", f"a generated run ({s.name}) {run.error}")
    if run.ours:
        raise Broke("adapter", f"the adapter's own code raised {run.error}", run.traceback)
    status, error = "completed", ""
    records = list(run.records)
    if run.stopped:
        status = "killed"
    elif run.error is not None:
        status, error = "raised", run.error
    else:
        records.append(Done())
    trace = parse_rank(0, records, status, error, run.traceback)  # type: ignore[arg-type]
    # the files the run wrote (new or changed) are read the trainer's way, as in the worker
    wrote = frozenset(os.path.abspath(p) for p in root.rglob("*")
                      if p.is_file() and before.get(p) != p.stat().st_mtime_ns)
    described, problem, hung = call_in_fork(lambda: describe_files(adapter, root, wrote))
    if problem is not None or not isinstance(described, list):
        raise Broke("adapter", f"describing the checkpoint files {'was ' if hung else ''}"
                     f"{problem or 'gave no list'}")
    return trace, [FileRecord.from_json(f) for f in described]


def _spe(r: RankTrace) -> int:
    """Optimizer steps an epoch takes, as the run's first epoch shows."""
    steps = next((e.optimizer_steps for e in r.train_epochs if e.optimizer_steps), None)
    return steps or 1


def _broke(kind: str, r: RankTrace, start: str | None = None) -> list[Divergence]:
    """A run that did not complete; ``start``: the path of the file it started from (the
    trainer's resume raising is the cause the hand-written resume checks give it)."""
    if r.status in ("completed", "killed"):
        return []
    sentence = {"resumed": "RES-1.1", "finetuned": "FT-1.1"}.get(kind, "LOOP-1.1")
    cause = f"the run {r.status}: {r.error}"
    if start is not None and r.status == "raised" and not r.is_ours:
        cause = resume_cause(r.error, r.detail, start)
    return [Divergence(sentence=sentence, evidence=f"the {kind} run {r.status}: {r.error}; "
                       "expected it to complete", cause=cause, crashed=True)]


def judge_example(adapter: Any, example: dict[str, Any], scratch: Path) -> list[Divergence]:
    """Every divergence of one generated chain from the model, gravest first."""
    kind = example["kind"]
    base = Scenario.from_json(example["scenario"])
    cfg = ModelConfig.from_mapping(base.config)

    def score(epoch: int | None) -> float:
        return base.scores.pooled(epoch, 1)

    if kind in ("fresh", "debug"):
        s = base.with_config(debug=True) if kind == "debug" else base
        r, files = _run(adapter, s, scratch / "run")
        if r.status != "completed":
            return _broke(kind, r)
        return divergences(expect_run(cfg, score, kind=kind, steps_per_epoch=_spe(r)), r, files)
    at = example["interrupted_at"]
    point = None if at is None else (at[0], int(at[1]))
    src, src_files = _run(adapter, base, scratch / "source", point)
    chain = expect_chain(cfg, score, kind=kind, steps_per_epoch=_spe(src),
                         interrupted_at=point, file_index=int(example["file_index"]))
    out = _broke("fresh", src)
    if out:
        return out
    if src.status == "completed":  # not interrupted: judged as a whole fresh run
        out = divergences(chain.source, src, src_files)
    else:
        assert point is not None
        out = schedule_divergences("interrupted source", chain.source, src,
                                   cut_in_validation=point[0] == "val_after_save")
        out += file_divergences("interrupted source", chain.source, src_files)
    if out or chain.run is None:
        return out
    # a resume is judged from every file the source left (the drawn one first), a
    # finetune from the drawn one
    first = int(example["file_index"]) % len(chain.resumable)
    order = [first] + ([i for i in range(len(chain.resumable)) if i != first][:_MORE_FILES]
                       if kind == "resumed" else [])
    for i in order:
        at_file = expect_chain(cfg, score, kind=kind, steps_per_epoch=_spe(src),
                               interrupted_at=point, file_index=i)
        out = _second(adapter, kind, base, at_file, src, src_files, scratch / f"second-{i}")
        if out:
            return out
    return []


def _second(adapter: Any, kind: str, base: Scenario, chain: Chain, src: RankTrace,
            src_files: list[FileRecord], scratch: Path) -> list[Divergence]:
    """The run from the chain's start file, against the model."""
    want = chain.start_file
    if want is None or chain.run is None:
        return []
    found = [f for f in src_files if f.role == want.role and f.epoch == want.epoch]
    if not found:
        return []  # the source's files were judged: a missing one is reported there
    second = with_load(base, str(scratch.parent / "source" / found[-1].relpath),
                       resume=kind == "resumed", name=f"generated-{kind}")
    r, files = _run(adapter, second, scratch)
    if r.status != "completed":
        return _broke(kind, r, str(second.get("ckpt.load_from")))
    return divergences(chain.run, r, files, source=src)


def feasible(example: dict[str, Any]) -> bool:
    """Whether the chain has a file to start from (the model says, before any run)."""
    if example["kind"] not in ("resumed", "finetuned"):
        return True
    base = Scenario.from_json(example["scenario"])
    at = example["interrupted_at"]
    chain = expect_chain(ModelConfig.from_mapping(base.config),
                         lambda e: base.scores.pooled(e, 1), kind=example["kind"],
                         steps_per_epoch=1, file_index=int(example["file_index"]),
                         interrupted_at=None if at is None else (at[0], int(at[1])))
    return chain.run is not None
