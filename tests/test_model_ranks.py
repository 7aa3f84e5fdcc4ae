"""The generated runs on several ranks: their draw, their forked ranks, and how a departure on
one rank is charged (the rank's own run, or the DIST sentence it breaks by parting from rank 0).
"""

from __future__ import annotations

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
from trainspec.conformance.checks.generated import examples, quotas
from trainspec.conformance.checks.generated_examples import describe_example, speaks_for
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
from trainspec.conformance.run.scenario import Scenario, ScoreScript
from trainspec.conformance.run.trace import RankTrace, parse_rank
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
    assert ("DIST-2" in spoken) == bool(s.get("num_epochs"))  # ranks that train end together
    assert ("DIST-1" in spoken) == bool(s.get("num_epochs") or s.get("val.first"))


def test_the_multi_rank_draw_reaches_every_shape_the_issue_names() -> None:
    seen: dict[str, bool] = {"4 ranks": False, "nothing counted": False,
                             "an empty shard on a rank past 1": False,
                             "a non-finite total on some ranks only": False}

    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(examples(kind=MULTI_RANK))
    def look(example: dict[str, Any]) -> None:
        s = Scenario.from_json(example["scenario"])
        seen["4 ranks"] |= s.world_size == 4
        for row in s.scores.epochs:
            counts = [c for _, c in row]
            finite = [math.isfinite(t) for t, _ in row]
            seen["nothing counted"] |= not any(counts)
            seen["an empty shard on a rank past 1"] |= any(c == 0 for c in counts[2:]) \
                and any(counts)
            seen["a non-finite total on some ranks only"] |= any(finite) and not all(finite)

    look()
    assert all(seen.values()), seen


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


def _forked(adapter: _Ranks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            ranks: int = 3) -> list[memory.ForkedRun]:
    monkeypatch.setattr(memory, "RUN_BOUND_S", 30.0)
    s = Scenario(name="ranks", world_size=ranks)
    return run_ranks_in_fork(
        adapter, s, tmp_path, env=lambda r: {"RANK": str(r), "WORLD_SIZE": str(ranks)},
        context=lambda root, r: MemoryContext(root, rank=r, world_size=ranks), grace_s=0.5)


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
