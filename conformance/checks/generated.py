"""Generated runs of every kind, judged against the model of the spec next to the trainer.

Hypothesis draws a run kind (fresh; resumed from any file a source run left, interrupted at
any point or run to its final epoch or its early stop; finetuned; debug; on 2 to 4 ranks, a
fresh run, or one run to its end then resumed or finetuned on every rank), the config keys
the spec names, and a score script with ties, non-finite values, gains below 0.01 and values
closer than float32 can tell apart (on several ranks, a
``(total, count)`` per rank: a NaN or an empty shard on any rank, uneven counts). Each
example runs the chain in this process (a forked worker child, as a property does; on
several ranks, one forked process a rank), interrupting the source run by an exception at
the drawn point, and compares every run's observables, files included, with
:mod:`trainspec.conformance.spec.model`.

The passes that draw, judge and shrink these chains within a budget of trainer runs are
:mod:`trainspec.conformance.checks.generated_passes`.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from trainspec.conformance.checks.chains import with_load
from trainspec.conformance.checks.generated_examples import chain_kind, decided_score, from_file
from trainspec.conformance.checks.generated_ranks import epoch_steps, judge_ranks, run_broke
from trainspec.conformance.checks.generated_runs import run
from trainspec.conformance.checks.model_compare import (
    MULTI_RANK,
    Divergence,
    divergences,
    file_divergences,
    schedule_divergences,
)
from trainspec.conformance.run.adapter import CAPABILITIES
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.scenario import RankScores, Scenario, ScoreScript, Task
from trainspec.conformance.run.trace import RankTrace
from trainspec.conformance.spec.model import (
    Chain,
    Interruption,
    ModelConfig,
    expect_chain,
    expect_run,
)

__all__ = ["DRAW_SEED", "SET_ASIDE_SENTENCES", "examples", "feasible", "judge_example",
           "quotas"]

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
# on several ranks: every rank holds training batches and validation samples (a framework
# that deals samples to ranks can stage each rank's scripted pair)
_RANKS_TASK = Task(n_train=16, n_val=16, n_test=8, batch_size=2)
# a rank left alone in a collective ends by its group's timeout, well inside the run's bound
_RANKS_TIMEOUT_S = 10.0


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
def _rank_row(draw: st.DrawFn, n: int) -> RankScores:
    """One validation's ``(total, count)`` on each of ``n`` ranks: uneven counts, an empty
    shard (nothing counted) on any rank, a non-finite total on some ranks only, scores
    closer than float32 can tell apart."""
    if draw(st.sampled_from([False, False, False, False, True])):
        return ((0.0, 0.0),) * n  # no rank counted a sample: the pooled score is NaN
    row = []
    for _ in range(n):
        count = draw(st.sampled_from([1.0, 1.0, 3.0, 0.0]))
        row.append((0.0, 0.0) if count == 0 else (draw(_score()) * count, count))
    return tuple(row)


# the kinds of chain and the share of the chains each gets, drawn in this order (a resumed
# chain, judged from up to four files, costs the most runs: it comes last), and what each needs
_KINDS: tuple[tuple[str, int, frozenset[str]], ...] = (
    ("fresh", 3, frozenset()), ("debug", 2, frozenset({"debug"})),
    ("finetuned", 2, frozenset({"checkpoint", "finetune"})),
    ("resumed", 3, frozenset({"checkpoint", "resume"})))


def quotas(caps: frozenset[str], chains: int, *, multi_rank: bool = False
           ) -> dict[str, int]:
    """How many of ``chains`` each kind of chain the target can make gets, by its share (a
    draw of its own per kind: a kind hypothesis would draw rarely still gets its chains);
    with ``multi_rank`` (a check of several ranks, a target that runs on several), a fifth
    of that again in multi-rank chains on 2 to 4 ranks, drawn last."""
    kinds = [(kind, share) for kind, share, needs in _KINDS if needs <= caps]
    total = sum(share for _, share in kinds)
    out = {kind: chains * share // total for kind, share in kinds}
    out[kinds[0][0]] += chains - sum(out.values())  # what rounding left: fresh runs
    if multi_rank and "multi_rank" in caps:
        out[MULTI_RANK] = max(4, chains // 5)
    return out


@st.composite
def examples(draw: st.DrawFn, *, kind: str, caps: frozenset[str] = CAPABILITIES
             ) -> dict[str, Any]:
    """One generated chain of ``kind``: the fresh scenario, where the source is interrupted and
    which of its files the second run starts from (as JSON, the form a replay takes)."""
    ranks = kind == MULTI_RANK
    # on several ranks, a third of the chains resume or finetune from the run's own files
    over = draw(st.sampled_from(["fresh", "fresh", *_chains(caps)])) if ranks else kind
    chained = over in ("resumed", "finetuned")
    # a chain needs epochs before and after its file; a fresh run may train none
    low = 3 if chained else 0 if "eval_only" in caps else 1
    n = draw(st.integers(low, 4 if ranks else 6 if chained else 5))
    minimize = draw(st.booleans())
    if ranks:
        world = draw(st.integers(2, 4))
        script = ScoreScript(epochs=tuple(draw(st.lists(_rank_row(world), min_size=n,
                                                        max_size=n))),
                             first=draw(st.one_of(st.none(), _rank_row(world)))
                             if "val_first" in caps else None)
        base = Scenario(name="generated", scores=script, task=_RANKS_TASK, world_size=world
                        ).with_config(**{"ddp.timeout_s": _RANKS_TIMEOUT_S})
    else:
        scores = draw(_walk(n, minimize)) if draw(st.booleans()) else draw(
            st.lists(_score(), min_size=n, max_size=n))
        first = draw(st.one_of(st.none(), _score())) if "val_first" in caps else None
        base = Scenario(name="generated", scores=ScoreScript.of(scores, first), task=_TASK)

    def maybe(capability: str, strategy: st.SearchStrategy[Any], default: Any) -> Any:
        return draw(strategy) if capability in caps else default

    ckpt = "checkpoint" in caps
    save_last = True if not ckpt else draw(st.booleans())
    s = base.with_config(**{
        "num_epochs": n, "val.first": base.scores.first is not None,
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
    if ranks and draw(st.sampled_from([False, False, True])):
        # a third hand the trainer rank-local scores (unpooled): all decide on rank 0's
        s = s.replace(task=dataclasses.replace(s.task, metric="local"))
    at = None
    if chained and not ranks and draw(st.booleans()):
        at = [draw(st.sampled_from(_POINTS)), draw(st.integers(1, max(1, n - 1)))]
    example = {"kind": kind, "scenario": s.to_json(), "interrupted_at": at,
               "file_index": draw(st.integers(0, 3)) if chained else 0}
    if ranks and chained:
        example["chain"] = over  # the source runs to its end on every rank, then this
    return example


def _chains(caps: frozenset[str]) -> list[str]:
    """The kinds of chain from a file that a target can make (on one rank or several)."""
    return [kind for kind, _, needs in _KINDS
            if kind in ("resumed", "finetuned") and needs <= caps]


# ------------------------------------------------------------------------------ running


def judge_example(adapter: Any, example: dict[str, Any], scratch: Path) -> list[Divergence]:
    """Every divergence of one generated chain from the model, gravest first."""
    kind = example["kind"]
    base = Scenario.from_json(example["scenario"])
    cfg = ModelConfig.from_mapping(base.config)

    def score(epoch: int | None) -> float:
        return base.scores.pooled(epoch, 1)

    if kind == MULTI_RANK:
        return judge_ranks(adapter, example, base, cfg, scratch)
    if kind in ("fresh", "debug"):
        s = base.with_config(debug=True) if kind == "debug" else base
        r, files = run(adapter, s, scratch / "run")
        if r.status != "completed":
            return run_broke(kind, r)
        want = expect_run(cfg, score, kind=kind, steps_per_epoch=epoch_steps(r))
        return divergences(want, r, files)
    at = example["interrupted_at"]
    point = None if at is None else (at[0], int(at[1]))
    src, src_files = run(adapter, base, scratch / "source", point)
    chain = expect_chain(cfg, score, kind=kind, steps_per_epoch=epoch_steps(src),
                         interrupted_at=point, file_index=int(example["file_index"]))
    out = run_broke("fresh", src)
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
        at_file = expect_chain(cfg, score, kind=kind, steps_per_epoch=epoch_steps(src),
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
    r, files = run(adapter, second, scratch)
    if r.status != "completed":
        return run_broke(kind, r, str(second.get("ckpt.load_from")))
    return divergences(chain.run, r, files, source=src)


def feasible(example: dict[str, Any]) -> bool:
    """Whether the chain has a file to start from (the model says, before any run)."""
    kind = from_file(chain_kind(example))
    if kind is None:
        return True
    base = Scenario.from_json(example["scenario"])
    at = example["interrupted_at"]
    chain = expect_chain(ModelConfig.from_mapping(base.config),
                         decided_score(base), kind=kind,
                         steps_per_epoch=1, file_index=int(example["file_index"]),
                         interrupted_at=None if at is None else (at[0], int(at[1])))
    return chain.run is not None
