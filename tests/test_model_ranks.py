"""The generated runs on several ranks: their draw, their forked ranks, and how a departure on
one rank is charged (the rank's own run, or the DIST sentence it breaks by parting from rank 0).
"""

from __future__ import annotations

import datetime
import functools
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from trainspec.conformance.api import replay_generated
from trainspec.conformance.checks.base import CheckFailed
from trainspec.conformance.checks.generated import examples, feasible, quotas
from trainspec.conformance.checks.generated_examples import (
    chain_kind,
    decided_score,
    describe_example,
    own_score,
    speaks_for,
)
from trainspec.conformance.checks.generated_ranks import ranks_run
from trainspec.conformance.checks.model_compare import MULTI_RANK, rank_divergences
from trainspec.conformance.run import memory
from trainspec.conformance.run.adapter import CAPABILITIES
from trainspec.conformance.run.memory import MemoryContext, run_ranks_in_fork
from trainspec.conformance.run.records import (
    Done,
    Record,
    TrainEnd,
    TrainerState,
    TrainStart,
    Validation,
)
from trainspec.conformance.run.scenario import Scenario, ScoreScript, Task
from trainspec.conformance.run.trace import RankTrace, parse_rank
from trainspec.conformance.run.world import store_in_fork
from trainspec.conformance.spec.model import ModelConfig, expect_run

NAN = math.nan
ROOT = Path(__file__).resolve().parent.parent


def test_a_check_of_several_ranks_draws_multi_rank_runs_on_top_of_the_others() -> None:
    alone = quotas(CAPABILITIES, 30)
    several = quotas(CAPABILITIES, 30, multi_rank=True)
    assert MULTI_RANK not in alone
    assert several == {**alone, MULTI_RANK: 6}
    assert quotas(CAPABILITIES, 125, multi_rank=True)[MULTI_RANK] == 25
    # a target that cannot run on several ranks draws none
    assert MULTI_RANK not in quotas(CAPABILITIES - {"multi_rank"}, 30, multi_rank=True)


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(examples(kind=MULTI_RANK))
def test_a_multi_rank_draw_scripts_a_total_and_count_on_each_of_two_to_four_ranks(
        example: dict[str, Any]) -> None:
    s = Scenario.from_json(example["scenario"])
    assert 2 <= s.world_size <= 4
    assert s.get("ddp.timeout_s") < 60  # a rank left in a collective ends well inside the bound
    rows = [*s.scores.epochs, *([s.scores.first] if s.scores.first is not None else [])]
    assert len(s.scores.epochs) == s.get("num_epochs")
    for row in rows:
        assert len(row) == s.world_size
        assert all(total == 0.0 for total, count in row if count == 0)  # an empty shard
    assert f"{s.world_size} ranks" in describe_example(example)
    spoken = speaks_for(example)
    trains = bool(expect_run(ModelConfig.from_mapping(s.config), decided_score(s),
                             kind="fresh", steps_per_epoch=1).epochs_trained)
    assert ("DIST-2" in spoken) == trains  # ranks that train end together
    # handed rank-local scores, the trainer pools nothing: DIST-1 has nothing to judge there
    assert ("DIST-1" in spoken) == (bool(s.get("num_epochs") or s.get("val.first"))
                                    and s.task.metric != "local")
    assert ("DIST-3" in spoken) == bool(s.get("num_epochs") or s.get("val.first"))


def test_the_multi_rank_draw_reaches_every_shape_the_issue_names() -> None:
    seen: dict[str, bool] = {"4 ranks": False, "nothing counted": False,
                             "an empty shard on a rank past 1": False,
                             "a non-finite total on some ranks only": False,
                             "scores handed rank-local (DIST-3.3)": False,
                             "resumed on every rank": False, "finetuned on every rank": False}

    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(examples(kind=MULTI_RANK))
    def look(example: dict[str, Any]) -> None:
        s = Scenario.from_json(example["scenario"])
        seen["4 ranks"] |= s.world_size == 4
        seen["scores handed rank-local (DIST-3.3)"] |= s.task.metric == "local"
        for over in ("resumed", "finetuned"):
            seen[f"{over} on every rank"] |= example.get("chain") == over
        for row in s.scores.epochs:
            counts = [c for _, c in row]
            finite = [math.isfinite(t) for t, _ in row]
            seen["nothing counted"] |= not any(counts)
            seen["an empty shard on a rank past 1"] |= any(c == 0 for c in counts[2:]) \
                and any(counts)
            seen["a non-finite total on some ranks only"] |= any(finite) and not all(finite)

    look()
    assert all(seen.values()), seen


def test_a_multi_rank_chain_resumes_or_finetunes_every_rank_from_a_file_of_its_fresh_run(
        ) -> None:
    rows = tuple(((0.25 * e, 1.0), (0.25 * e, 1.0)) for e in range(4))
    s = Scenario(name="generated", scores=ScoreScript(epochs=rows), world_size=2).with_config(
        **{"num_epochs": 4, "val.patience": None, "ckpt.enable": True,
           "ckpt.every_n_epochs": 1})
    for over, clauses in (("resumed", {"RES-1", "RES-3"}), ("finetuned", {"FT-1"})):
        example = {"kind": MULTI_RANK, "scenario": s.to_json(), "interrupted_at": None,
                   "file_index": 1, "chain": over}
        assert feasible(example)
        assert clauses <= speaks_for(example)
        assert {"DIST-1", "DIST-2", "DIST-3"} <= speaks_for(example)
        assert describe_example(example).startswith(
            f"multi-rank; 2 ranks; {over}; from a source run run to its end; its resumable "
            "file #1;")
    # without the chain key (a replay drawn before chains on several ranks): a fresh run
    fresh = {"kind": MULTI_RANK, "scenario": s.to_json(), "interrupted_at": None,
             "file_index": 0}
    assert chain_kind(fresh) == "fresh"
    assert not {"RES-1", "RES-3", "FT-1"} & speaks_for(fresh)


# ---------------------------------------------------------------- charging a departure


def _script() -> Scenario:
    # rank 1 counts three samples, rank 0 one: a mean of rank means differs from sum/sum
    rows = (((1.0, 1.0), (0.0, 3.0)), ((1.0, 1.0), (3.0, 3.0)), ((0.0, 0.0), (0.0, 0.0)))
    s = Scenario(name="ranks", scores=ScoreScript(epochs=rows), world_size=2)
    return s.with_config(**{"num_epochs": 3, "val.patience": None, "ckpt.enable": False,
                            "test.enable": False})


def _want(s: Scenario) -> Any:
    return expect_run(ModelConfig.from_mapping(s.config), lambda e: s.scores.pooled(e, 2),
                      kind="fresh", steps_per_epoch=1)


def _rank(rank: int, s: Scenario, *, scores: Sequence[float] | None = None,
          improved: Sequence[bool] | None = None) -> RankTrace:
    """A completed rank that validated after every epoch as the model says, unless told."""
    want = _want(s)
    got = [v.score for v in want.validations] if scores is None else scores
    took = [v.improved for v in want.validations] if improved is None else improved
    records: list[Record] = []
    for v, x, i in zip(want.validations, got, took, strict=True):
        e = int(v.epoch or 0)
        records += [TrainStart(epoch=e, train_step=e, state=TrainerState(weights={})),
                    TrainEnd(epoch=e, train_step=e + 1, batches=1, optimizer_steps=1,
                             loader_len=1),
                    Validation(epoch=e, phase="epoch", score=x, improved=i, stop=v.stop,
                               weights={})]
    return parse_rank(rank, [*records, Done()], "completed", "", "")


def _charged(s: Scenario, ranks: Sequence[RankTrace]) -> list[str]:
    found = rank_divergences(_want(s), ranks, [], counted=lambda e: any(
        s.scores.pairs(e, r)[1] > 0 for r in range(s.world_size)))
    return [f"{d.sentence} {d.evidence.partition(':')[0]}" for d in found]


def test_ranks_that_follow_the_model_show_no_departure() -> None:
    s = _script()
    assert _want(s).validations[2].score != _want(s).validations[2].score  # NaN: none counted
    assert _charged(s, [_rank(0, s), _rank(1, s)]) == []


def test_rank_zero_pooling_wrongly_is_the_pooled_means_own_sentence() -> None:
    s = _script()
    assert _charged(s, [_rank(0, s, scores=[0.5, 1.0, NAN]), _rank(1, s)]) == \
        ["DIST-1.1 rank 0 of 2"]


def test_another_rank_parting_from_rank_zero_breaks_the_sentence_of_what_it_does_not_share(
        ) -> None:
    s = _script()
    assert _charged(s, [_rank(0, s), _rank(1, s, scores=[0.0, 1.0, NAN])]) == \
        ["DIST-1.2 rank 1 of 2"]
    assert _charged(s, [_rank(0, s), _rank(1, s, improved=[False, True, False])]) == \
        ["DIST-3.1 rank 1 of 2"]


def test_nan_where_some_rank_counted_or_a_number_where_none_did_is_dist_1_3() -> None:
    s = _script()
    assert _charged(s, [_rank(0, s, scores=[NAN, 1.0, NAN]), _rank(1, s)]) == \
        ["DIST-1.3 rank 0 of 2"]
    assert _charged(s, [_rank(0, s, scores=[0.25, 1.0, 0.0]), _rank(1, s)]) == \
        ["DIST-1.3 rank 0 of 2"]


def test_the_first_departure_in_the_run_is_charged_whichever_rank_shows_it() -> None:
    s = _script()
    # rank 1 parts at validation 0, rank 0 only at validation 1: rank 1's is the cause
    ranks = [_rank(0, s, scores=[0.25, 2.0, NAN]), _rank(1, s, improved=[False, True, False])]
    assert _charged(s, ranks) == ["DIST-3.1 rank 1 of 2"]


def _resumed_rank(rank: int, s: Scenario, *, start: int = 2,
                  improved: Sequence[bool] | None = None) -> RankTrace:
    """A completed rank of a run resumed from epoch 1's file, as the model says unless told."""
    want = _resumed_want(s)
    took = [v.improved for v in want.validations] if improved is None else improved
    records: list[Record] = []
    for e, v, i in zip(range(start, 3), want.validations, took, strict=False):
        records += [TrainStart(epoch=e, train_step=e, state=TrainerState(weights={})),
                    TrainEnd(epoch=e, train_step=e + 1, batches=1, optimizer_steps=1,
                             loader_len=1),
                    Validation(epoch=e, phase="epoch", score=v.score, improved=i, stop=v.stop,
                               weights={})]
    return parse_rank(rank, [*records, Done()], "completed", "", "")


def _resumed_want(s: Scenario) -> Any:
    return expect_run(ModelConfig.from_mapping(s.config), lambda e: s.scores.pooled(e, 2),
                      kind="resumed", steps_per_epoch=1, resume_from=1, resume_step=2)


def test_on_a_resumed_multi_rank_run_a_rank_that_did_not_resume_or_decides_alone_is_charged(
        ) -> None:
    # the scores fall after epoch 0's: the resumed run's one validation is no improvement
    rows = tuple(((1.0 - 0.25 * e, 1.0), (1.0 - 0.25 * e, 1.0)) for e in range(3))
    s = Scenario(name="ranks", scores=ScoreScript(epochs=rows), world_size=2).with_config(
        **{"num_epochs": 3, "val.patience": None, "val.minimize": False, "ckpt.enable": False,
           "test.enable": False})
    want = _resumed_want(s)
    assert [(v.epoch, v.improved) for v in want.validations] == [(2, False)]

    def charged(ranks: Sequence[RankTrace]) -> list[str]:
        found = rank_divergences(want, ranks, [], counted=lambda e: True)
        return [f"{d.sentence} {d.evidence}" for d in found]

    assert charged([_resumed_rank(0, s), _resumed_rank(1, s)]) == []
    # rank 1 started where no file ends: it did not resume (RES-1.1, on rank 1)
    assert charged([_resumed_rank(0, s), _resumed_rank(1, s, start=0)]) == [
        "RES-1.1 rank 1 of 2: the resumed run started at epoch 0; expected 2"]
    # rank 1 took an improvement rank 0 did not: the ranks part on the best (DIST-3.1)
    (found,) = charged([_resumed_rank(0, s), _resumed_rank(1, s, improved=[True])])
    assert found.startswith("DIST-3.1 rank 1 of 2: the resumed 2-rank run's validation 0 "
                            "(after epoch 2) was taken as an improvement; expected none")
    # rank 0 taking it: the resume's own slip (RES-3.3)
    (found,) = charged([_resumed_rank(0, s, improved=[True]), _resumed_rank(1, s)])
    assert found.startswith("RES-3.3 rank 0 of 2:")


# rank 0's own scores improve twice; rank 1's never after its first: handed rank-local, every
# rank must take rank 0's improvements
_LOCAL_ROWS = (((0.25, 1.0), (0.75, 1.0)), ((0.5, 1.0), (0.5, 1.0)), ((0.75, 1.0), (0.25, 1.0)))


def _local() -> Scenario:
    s = Scenario(name="ranks", scores=ScoreScript(epochs=_LOCAL_ROWS), world_size=2,
                 task=Task(metric="local"))
    return s.with_config(**{"num_epochs": 3, "val.patience": None, "ckpt.enable": False,
                            "test.enable": False})


def _local_charged(ranks: Sequence[RankTrace]) -> list[str]:
    s = _local()
    cfg = ModelConfig.from_mapping(s.config)
    want = expect_run(cfg, decided_score(s), kind="fresh", steps_per_epoch=1)
    found = rank_divergences(
        want, ranks, [], counted=lambda e: s.scores.pairs(e, 0)[1] > 0,
        own_score=functools.partial(own_score, s),
        others=lambda: [("rank 1's own scores", expect_run(
            cfg, functools.partial(own_score, s, 1), kind="fresh", steps_per_epoch=1))])
    return [f"{d.sentence} {d.evidence}" for d in found]


def _local_rank(rank: int, improved: Sequence[bool]) -> RankTrace:
    records: list[Record] = []
    for e, took in enumerate(improved):
        records += [TrainStart(epoch=e, train_step=e, state=TrainerState(weights={})),
                    TrainEnd(epoch=e, train_step=e + 1, batches=1, optimizer_steps=1,
                             loader_len=1),
                    Validation(epoch=e, phase="epoch", score=_LOCAL_ROWS[e][rank][0],
                               improved=took, stop=False, weights={})]
    return parse_rank(rank, [*records, Done()], "completed", "", "")


def test_handed_rank_local_scores_every_rank_takes_rank_zeros_improvements() -> None:
    # each rank records its own score; the decisions are rank 0's on every rank
    assert _local_charged([_local_rank(0, [True, True, True]),
                           _local_rank(1, [True, True, True])]) == []


def test_another_rank_deciding_on_its_own_score_breaks_dist_3_3() -> None:
    (charged,) = _local_charged([_local_rank(0, [True, True, True]),
                                 _local_rank(1, [True, False, False])])
    assert charged.startswith("DIST-3.3 rank 1 of 2: the fresh 2-rank run's validation 1 "
                              "(after epoch 1) was not taken as an improvement")
    assert charged.endswith("rank 0's own scores, which every rank compares: [0.25, 0.5]")


def test_rank_zero_deciding_on_another_ranks_score_breaks_dist_3_3_and_a_slip_of_its_own_not(
        ) -> None:
    # all ranks agree, on rank 1's score: rank 0's decisions are those rank 1's scores give
    (charged,) = _local_charged([_local_rank(0, [True, False, False]),
                                 _local_rank(1, [True, False, False])])
    assert charged.startswith("DIST-3.3 rank 0 of 2:")
    assert "its decisions so far are those rank 1's own scores give, not rank 0's" in charged
    # decisions no rank's scores give: rank 0's own slip (BEST-1), not a broadcast one
    (charged,) = _local_charged([_local_rank(0, [False, True, True]),
                                 _local_rank(1, [False, True, True])])
    assert charged.startswith("BEST-1.1 rank 0 of 2:")


# ---------------------------------------------------------------- the forked ranks


class _Ranks:
    """An adapter whose run checks the launcher's environment; ``stuck`` ranks never end."""

    def __init__(self, stuck: frozenset[int] = frozenset()) -> None:
        self.stuck = stuck

    def run(self, scenario: Scenario, ctx: MemoryContext) -> None:
        assert os.environ["RANK"] == str(ctx.rank)
        assert os.environ["WORLD_SIZE"] == str(ctx.world_size) == str(scenario.world_size)
        if ctx.rank in self.stuck:
            time.sleep(60)
        ctx.record(Done())


def _forked(adapter: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            ranks: int = 3, grace_s: float | None = 0.5, **cuts: Any) -> list[memory.ForkedRun]:
    """Every rank of ``adapter``'s run, bound at 30 s, cut short as ``grace_s`` and ``cuts``
    (``settled``, ``stall_s``) say."""
    monkeypatch.setattr(memory, "RUN_BOUND_S", 30.0)
    s = Scenario(name="ranks", world_size=ranks)
    return run_ranks_in_fork(
        adapter, s, tmp_path, env=lambda r: {"RANK": str(r), "WORLD_SIZE": str(ranks)},
        context=lambda root, r: MemoryContext(root, rank=r, world_size=ranks),
        grace_s=grace_s, **cuts)


def test_every_rank_runs_in_a_process_of_its_own_with_its_launch_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _forked(_Ranks(), tmp_path, monkeypatch, ranks=4)
    assert [(r.error, r.timed_out, len(r.records)) for r in runs] == [(None, False, 1)] * 4
    assert "RANK" not in os.environ or os.environ["RANK"] != "3"  # set in the ranks alone


def test_a_rank_still_running_after_another_ended_is_cut_short_within_the_grace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    began = time.monotonic()
    runs = _forked(_Ranks(stuck=frozenset({2})), tmp_path, monkeypatch)
    assert time.monotonic() - began < 20  # not the run's bound (30 s), nor the sleep
    assert [r.timed_out for r in runs] == [False, False, True]
    assert runs[0].error is None
    assert runs[2].records == []


class _Departs:
    """An adapter whose rank 1 records a validation then hangs, as ranks that parted in a
    collective do; rank 0 hangs before it records one."""

    def run(self, scenario: Scenario, ctx: MemoryContext) -> None:
        if ctx.rank == 1:
            ctx.record(Validation(epoch=0, phase="epoch", score=0.5, improved=False,
                                  stop=False, weights={}))
        time.sleep(60)


def test_once_a_rank_departs_from_the_model_every_rank_is_cut_short_keeping_its_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a desynchronised trainer's ranks would wait out their group's timeout for nothing:
    # the first departure is known once a rank records it
    began = time.monotonic()
    runs = _forked(_Departs(), tmp_path, monkeypatch, ranks=2, grace_s=20.0,
                   settled=lambda records: any(x.get("ev") == "val" and x["improved"] is False
                                               for rank in records for x in rank))
    assert time.monotonic() - began < 10  # the settled grace, not the bound nor the sleep
    assert [(r.timed_out, r.cut) for r in runs] == [(True, True), (True, True)]
    assert runs[0].records == []
    assert [type(x).__name__ for x in runs[1].records] == ["Validation"]  # kept
    assert runs[1].error == f"still running {memory.SETTLED_GRACE_S:g} s after the run's " \
        "verdict was settled"


def test_a_multi_rank_reproducer_replays_its_slip_and_the_reference_matches_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # rank 0 counts one sample, rank 1 three: sum/sum is 0.25, a mean of rank means 0.5
    rows = (((1.0, 1.0), (0.0, 3.0)),)
    s = Scenario(name="generated", scores=ScoreScript(epochs=rows), world_size=2).with_config(
        **{"num_epochs": 1, "test.enable": False, "ckpt.enable": False, "ddp.timeout_s": 10.0})
    example = {"kind": MULTI_RANK, "scenario": s.to_json(), "interrupted_at": None,
               "file_index": 0}
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the workers import the tests' mutants
    with pytest.raises(CheckFailed) as failed:
        replay_generated(base_trainer="tests.mutants.dist:MeanOfRankMeans", example=example)
    assert str(failed.value).startswith(
        "DIST-1.1: rank 0 of 2: the fresh 2-rank run's validation 0 (after epoch 0) pooled the "
        "score 0.5; expected 0.25 [multi-rank; 2 ranks;")
    replay_generated("reference", example=example)  # no slip: returns


def test_ranks_that_wait_on_each_other_past_their_group_timeout_are_cut_once_none_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a trainer that does not honour ddp.timeout_s: its parted ranks would wait out the bound
    began = time.monotonic()
    runs = _forked(_Departs(), tmp_path, monkeypatch, ranks=2, grace_s=None, stall_s=1.0)
    assert time.monotonic() - began < 10
    assert [(r.timed_out, r.cut) for r in runs] == [(True, True), (True, True)]
    assert [len(r.records) for r in runs] == [0, 1]  # each kept what it recorded
    assert runs[0].error == "still running with no rank recording anything for 1 s"


def test_ranks_that_hang_each_somewhere_else_break_dist_2_2() -> None:
    s = _script()
    rank0 = parse_rank(0, [TrainStart(epoch=0, train_step=0, state=TrainerState(weights={}))],
                       "timeout", "still running with no rank recording anything for 25 s", "")
    rank1 = parse_rank(1, [], "timeout", "still running with no rank recording anything for "
                       "25 s", "")
    (found,) = ranks_run(s, _want(s), [rank0, rank1], [], lambda k: None)
    assert found.sentence == "DIST-2.2"
    assert found.evidence.startswith("every rank of 2 hung, each somewhere else: rank 0 in "
                                     "epoch 0 (training); rank 1 before its first epoch")


class _Joins:
    """An adapter whose ranks join one gloo group by the launcher's environment and sum their
    ranks, the way a trainer's ``init_process_group`` does."""

    def run(self, scenario: Scenario, ctx: MemoryContext) -> None:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
        total = torch.tensor([float(ctx.rank)])
        dist.all_reduce(total)
        dist.destroy_process_group()
        ctx.record(Validation(epoch=0, phase="epoch", score=float(total), improved=True,
                              stop=False, weights={}))


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_the_ranks_store_is_hosted_by_a_process_of_its_own_so_no_rank_forks_its_threads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a store hosted here serves from a thread of this process: a rank forked while that
    # thread held a lock would wait on it for good (a rank of a resumed 4-rank run that never
    # joined). The ranks rendezvous through a store in a process of its own instead.
    monkeypatch.setattr(memory, "RUN_BOUND_S", 30.0)
    threads = _threads()
    with store_in_fork("127.0.0.1", 4) as env:
        assert _threads() == threads  # no thread of the store's here
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        runs = run_ranks_in_fork(
            _Joins(), Scenario(name="joins", world_size=4), tmp_path,
            env=lambda r: {**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            context=lambda root, r: MemoryContext(root, rank=r, world_size=4))
    assert [(r.error, [getattr(x, "score", None) for x in r.records]) for r in runs] == \
        [(None, [6.0])] * 4  # 0 + 1 + 2 + 3 on every rank


def test_the_store_process_ends_with_its_block_and_a_store_that_cannot_start_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from trainspec.conformance.run.child import children

    before = children()
    with store_in_fork("127.0.0.1", 2):
        hosts = children() - before
    assert len(hosts) == 1
    assert children() == before  # killed and reaped
    with pytest.raises(RuntimeError, match="store of a 2-rank run did not answer"), \
            store_in_fork("256.0.0.1", 2, timeout_s=2):
        pass
