"""Generated runs of every kind, judged against the model of the spec next to the trainer.

Hypothesis draws a run kind (fresh; resumed from any file a source run left, interrupted at
any point or run to its final epoch or its early stop; finetuned; debug), the config keys the
spec names, and a score script with ties, non-finite values, gains below 0.01 and values closer
than float32 can tell apart. Each example runs the chain in this process (a forked worker
child, as a property does), interrupting the source run by an exception at the drawn point,
and compares every run's observables, files included, with
:mod:`trainspec.conformance.spec.model`. A failure is shrunk and comes back with the sentence it
breaks and the example as JSON, which :func:`replay_example` runs again.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.errors import Flaky, Unsatisfiable

from trainspec.conformance.checks.base import SCRATCH
from trainspec.conformance.checks.chains import resume_cause, with_load
from trainspec.conformance.checks.model_compare import (
    Divergence,
    describe_example,
    divergences,
    file_divergences,
    speaks_for,
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

__all__ = ["examples", "judge_example", "run_generated"]

_POINTS: tuple[Interruption, ...] = ("train_start", "train_end", "val_start", "val_after_save")
_MORE_FILES = 3  # a resume is judged from the drawn file and up to this many others
_SET_ASIDE = 2  # runs showing a slip already charged, per example asked, before giving up
# shrinking keeps the smallest failure found after this many candidates (a count: a loaded
# machine reports the example a quiet one does), or these seconds (a bound for slow runs)
_SHRINK_RUNS, _SHRINK_S = 80, 20.0
# the draw's seed, fixed, so that the examples do not change when the code drawing them does
# (the seed the derandomized draw took from this module's code when the family's mutants,
# tests/mutants/model.py, were measured against its first 30 chains)
_DRAW_SEED = int("2080930751183862293938553768689477505901499956361270823129059000608487686"
                 "4423270665686270720599787622790238187042159")

# two optimizer steps an epoch (so step counts show), nothing else: a run takes milliseconds
_TASK = Task(n_train=8, n_val=4, n_test=4, batch_size=4)


class Interrupted(BaseException):
    """The drawn interruption: raised through the trainer as a kill would end it."""


class _Broke(BaseException):
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


@st.composite
def examples(draw: st.DrawFn, *, caps: frozenset[str] = CAPABILITIES) -> dict[str, Any]:
    """One generated chain: its kind, the fresh scenario, where the source is interrupted and
    which of its files the second run starts from (as JSON, the form a replay takes)."""
    kinds = ["fresh"] + [k for k, needs in (
        ("resumed", {"checkpoint", "resume"}), ("finetuned", {"checkpoint", "finetune"}),
        ("debug", {"debug"})) if needs <= caps]
    kind = draw(st.sampled_from(kinds))
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
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    run = run_in_fork(adapter, s, root, context=lambda r: _Interrupting(r, at), stop=Interrupted)
    if run.timed_out:
        raise _Broke("timeout", f"a generated run ({s.name}) {run.error}")
    if run.ours:
        raise _Broke("adapter", f"the adapter's own code raised {run.error}", run.traceback)
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
        raise _Broke("adapter", f"describing the checkpoint files {'was ' if hung else ''}"
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
                       "expected it to complete", cause=cause)]


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
        out = file_divergences("interrupted source", chain.source, src_files)
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


def run_generated(name: str, adapter: Any, *, max_examples: int) -> dict[str, Any]:
    """The property runner (``name``: ``exclude=<clauses>;budget_s=<seconds>`` or
    ``replay=<example JSON>``).

    Examples showing a divergence of an excluded clause (one already charged) are skipped, so
    the rest is judged on runs free of that slip. Past ``budget_s`` no new example runs (a
    failure found keeps shrinking, within its own bound); the result says so.
    """
    if name.startswith("replay="):
        example = json.loads(name.removeprefix("replay="))
        found = _judged(adapter, example)
        return _result(found[0], example, 1) if found else {"passed": True, "examples": 1}
    asked = dict(part.partition("=")[::2] for part in name.split(";"))
    exclude = set(filter(None, asked.get("exclude", "").split(",")))
    deadline = time.monotonic() + float(asked.get("budget_s") or "inf")
    failure: dict[str, Any] = {}
    failing: set[str] = set()
    judged: dict[str, int] = {}
    count, since, set_aside, out_of_time, clean, shrinks = 0, [0.0], [0], [False], [0], [0]

    def once(example: dict[str, Any]) -> None:
        nonlocal count
        if not failing and time.monotonic() > deadline:
            out_of_time[0] = True  # the budget is spent: draw on, run nothing more
            assume(False)
        assume(feasible(example))
        # past this many runs set aside, the rest would be too: draw on, run nothing more
        assume(set_aside[0] < _SET_ASIDE * max_examples or bool(failing))
        key = json.dumps(example, sort_keys=True)
        if failing and key not in failing:
            if shrinks[0] >= _SHRINK_RUNS or time.monotonic() - since[0] > _SHRINK_S:
                return  # shrunk enough: keep the smallest failure found
            shrinks[0] += 1
        count += 1
        found = _judged(adapter, example)
        if any(d.clause in exclude for d in found):
            set_aside[0] += 1
            assume(False)
        if not found:  # matched the model throughout: evidence for each clause it speaks of
            clean[0] += 1
            for clause in speaks_for(example):
                judged[clause] = judged.get(clause, 0) + 1
            return
        if not failing:
            since[0] = time.monotonic()
        failing.add(key)
        failure.clear()
        failure.update(_result(found[0], example, count))
        raise AssertionError(found[0].evidence)

    try:
        failed = _draw(once, adapter, max_examples)
    except _Broke as broke:
        return {"broke": broke.status, "error": broke.error, "detail": broke.detail,
                "examples": count}
    if failed and not failure:
        raise AssertionError("a generated run failed, and its failure was not kept")
    # clean: the runs that matched the model (none: every run made showed a slip set aside)
    return {**(failure if failed else {"passed": True, "out_of_time": out_of_time[0]}),
            "examples": count, "judged": judged, "clean": clean[0]}


def _draw(once: Any, adapter: Any, max_examples: int) -> bool:
    """Run ``once`` on up to ``max_examples`` derandomized examples; whether one failed."""
    test = seed(_DRAW_SEED)(settings(
        max_examples=max_examples, derandomize=True, database=None, deadline=None,
        suppress_health_check=list(HealthCheck), print_blob=False)(
        given(examples(caps=frozenset(adapter.capabilities())))(once)))
    home = tempfile.mkdtemp(prefix="trainspec-hypothesis-")
    set_hypothesis_home_dir(home)
    try:
        test()
    except (AssertionError, BaseExceptionGroup, Flaky):  # Flaky: it failed, then not
        return True
    except Unsatisfiable:  # every draw set aside (out of budget, or a slip charged): none ran
        return False
    finally:
        set_hypothesis_home_dir(None)
        shutil.rmtree(home, ignore_errors=True)
    return False


def _judged(adapter: Any, example: dict[str, Any]) -> list[Divergence]:
    """The example's divergences, its scratch folder named as the suite names it."""
    with tempfile.TemporaryDirectory(prefix="trainspec-gen-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        return [replace(d, evidence=d.evidence.replace(str(root), SCRATCH))
                for d in judge_example(adapter, example, root)]


def _result(d: Divergence, example: dict[str, Any], count: int) -> dict[str, Any]:
    return {"passed": False, "examples": count, "sentence": d.sentence,
            "evidence": f"{d.sentence}: {d.evidence} [{describe_example(example)}]",
            "cause": d.cause, "scenario": example}
