"""The generated chains on several ranks, judged against the model (a fresh run, and for a
chain, the run resumed or finetuned on every rank from a file it left), and what judging any
generated run needs: its steps an epoch, and what a run that did not complete breaks."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainspec.conformance.checks.chains import resume_cause, trainer_frame, with_load
from trainspec.conformance.checks.generated_examples import (
    chain_kind,
    decided_score,
    from_file,
    own_score,
)
from trainspec.conformance.checks.generated_runs import run_ranks, stalled
from trainspec.conformance.checks.model_compare import Divergence, rank_divergences
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import RankTrace
from trainspec.conformance.spec.model import (
    Chain,
    ModelConfig,
    RunExpect,
    expect_chain,
    expect_run,
)

__all__ = ["epoch_steps", "judge_ranks", "ranks_run", "run_broke"]


def epoch_steps(r: RankTrace) -> int:
    """Optimizer steps an epoch takes, as the run's first epoch shows."""
    steps = next((e.optimizer_steps for e in r.train_epochs if e.optimizer_steps), None)
    return steps or 1


def run_broke(kind: str, r: RankTrace, start: str | None = None) -> list[Divergence]:
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


def judge_ranks(adapter: Any, example: dict[str, Any], s: Scenario, cfg: ModelConfig,
                scratch: Path) -> list[Divergence]:
    """A run on several ranks against the model, pooled over the ranks: a fresh run, and for
    a chain, the run resumed or finetuned on every rank from one of the files it left (the
    drawn one). Each run is judged as :func:`ranks_run` says."""
    over = from_file(chain_kind(example))
    score = decided_score(s)
    source = expect_run(cfg, score, kind="fresh", steps_per_epoch=1)
    ranks, files = run_ranks(adapter, s, scratch / "run", _decisions(source))
    spe = epoch_steps(ranks[0])
    out = ranks_run(s, expect_run(cfg, score, kind="fresh", steps_per_epoch=spe), ranks,
                    files, lambda k: expect_run(cfg, functools.partial(own_score, s, k),
                                                kind="fresh", steps_per_epoch=spe))
    if out or over is None:
        return out

    def chain(score: Callable[[int | None], float]) -> Chain:
        assert over is not None
        return expect_chain(cfg, score, kind=over, steps_per_epoch=spe, interrupted_at=None,
                            file_index=int(example["file_index"]))

    want = chain(score)
    start = want.start_file
    found = [] if start is None else [f for f in files
                                      if f.role == start.role and f.epoch == start.epoch]
    if want.run is None or not found:
        return []  # the source's files were judged: a missing one is reported there
    second = with_load(s, str(scratch / "run" / found[-1].relpath),
                       resume=over == "resumed", name=f"generated-{over}")
    after, after_files = run_ranks(adapter, second, scratch / "second", _decisions(want.run))
    return ranks_run(s, want.run, after, after_files,
                     lambda k: chain(functools.partial(own_score, s, k)).run,
                     source=ranks[0], start=str(second.get("ckpt.load_from")))


def _decisions(want: RunExpect) -> list[tuple[bool, bool]]:
    """The model's ``(improved, stop)`` of each validation (ranks that part are cut short)."""
    return [(v.improved, v.stop) for v in want.validations]


def ranks_run(s: Scenario, want: RunExpect, ranks: list[RankTrace], files: list[FileRecord],
              own: Callable[[int], RunExpect | None], *, source: RankTrace | None = None,
              start: str | None = None) -> list[Divergence]:
    """One run on several ranks against ``want``: rank 0 as a run of its kind is judged (its
    files included), each other rank on what it shares with rank 0 (the pooled score, DIST-1;
    its decisions and epochs, DIST-2 and DIST-3; its best weights); and the run must end on
    every rank (DIST-2.2). ``own(k)``: the run rank ``k``'s own scores give (handed
    rank-local scores, a rank 0 deciding as another rank does breaks DIST-3.3)."""
    n = s.world_size
    first = ranks[0]
    # rank 0 broke off (a collective failed once the ranks parted), or every rank hung: where
    # a rank departed from the model before, that departure is the cause, not what followed
    hung = all(stalled(r.error) for r in ranks)
    broke = hung or first.status not in ("completed", "timeout")
    # handed rank-local scores, each rank records its own and all decide on rank 0's alone
    local = s.task.metric == "local"
    pooled = range(1) if local else range(n)
    out = rank_divergences(
        want, ranks, files, counted=lambda e: any(s.scores.pairs(e, r)[1] > 0 for r in pooled),
        own_score=functools.partial(own_score, s) if local else None,
        others=lambda: [(f"rank {k}'s own scores", x) for k in range(1, n)
                        if (x := own(k)) is not None], decisions_only=broke, source=source)
    if out or (broke and not hung):
        return out or run_broke(want.kind, first, start)
    if hung:  # not all as far as each other (run_ranks says): the ranks parted and hang
        return [Divergence(sentence="DIST-2.2", crashed=True,
                           cause="the ranks parted and waited on each other",
                           evidence=f"every rank of {n} hung, each somewhere else: " + "; ".join(
                               f"rank {r.rank} {_last_record(r)}" for r in ranks) +
                           f" ({first.error}); expected the run to end on every rank")]
    stuck = [r for r in ranks if r.status != "completed"]
    if stuck:
        r = stuck[0]
        return [Divergence(sentence="DIST-2.2", crashed=True,
                           cause=f"a rank's run {r.status} after rank 0's ended",
                           evidence=f"rank {r.rank} of {n} {r.status}: {r.error}"
                           f"{trainer_frame(r.detail)}; expected the run to end on every "
                           "rank")]
    return []


def _last_record(r: RankTrace) -> str:
    """Where a hung rank last showed itself: its last validation or epoch recorded."""
    v = r.validations[-1] if r.validations else None
    if v is not None and not r.train_epochs:
        return "after validating val.first"
    if v is not None and v.phase != "first" and v.epoch >= r.train_epochs[-1].epoch:
        return f"after validating epoch {v.epoch}"
    if r.train_epochs:
        e = r.train_epochs[-1]
        return f"in epoch {e.epoch} ({'trained' if e.end_step is not None else 'training'})"
    return "before its first epoch"
