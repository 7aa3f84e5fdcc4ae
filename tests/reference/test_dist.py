"""DIST: two gloo ranks on the CPU agree on every decision, and one stalled rank fails both.

Each launch spawns two fresh interpreters (about 3 s); the worker functions live in
``reference_dist_worker.py`` and write one JSON record per rank, asserted here.
"""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from torch.multiprocessing.spawn import start_processes

from tests.reference.reference_dist_worker import (
    POOLED_NUM_EPOCHS,
    POOLED_PATIENCE,
    POOLED_SCORES,
    RANK0_SCORES,
    SHARDS,
    SPLIT_VALUES,
    STOP_EPOCH,
    decisions,
    pooled_worker,
    stall_worker,
)
from tests.reference.reference_helpers import PooledTrainer, make_config

WORLD_SIZE = 2
Record = dict[str, Any]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(worker: Callable[..., None], out: Path, *args: object, limit_s: float) -> list[Record]:
    """Run ``worker`` on two spawned ranks; every rank's record, or an error naming the hang."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OMP_NUM_THREADS", "1")  # two ranks on two cores: no oversubscription
        context = start_processes(  # type: ignore[no-untyped-call]
            worker, args=(WORLD_SIZE, str(out), free_port(), *args), nprocs=WORLD_SIZE,
            join=False, start_method="spawn")
    assert context is not None
    deadline = time.monotonic() + limit_s
    try:
        while not context.join(timeout=0.2, grace_period=1.0):
            if time.monotonic() > deadline:
                raise AssertionError(f"ranks still running after {limit_s} s")
    finally:
        for process in context.processes:  # leave nothing behind, whatever happened
            if process.is_alive():
                process.kill()
            process.join()
    records = [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD_SIZE)]
    return records


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[Record]:
    records = launch(pooled_worker, tmp_path_factory.mktemp("ranks"), limit_s=60)
    for record in records:
        assert "error" not in record, f"rank {record['rank']} failed:\n{record['error']}"
    return records


@pytest.fixture(scope="module")
def one_rank() -> Record:
    """The same pooled run on one rank, over the same global data."""
    cfg = make_config(None, num_epochs=POOLED_NUM_EPOCHS, val={"patience": POOLED_PATIENCE})
    trainer = PooledTrainer(cfg, sample_values=SPLIT_VALUES, shards=SHARDS)
    trainer.train()
    return decisions(trainer)


@pytest.mark.clause("DIST-1")
def test_a_pooled_mean_is_sum_over_sum_on_every_rank_and_nan_only_without_data(
        two_ranks: list[Record]) -> None:
    for record in two_ranks:
        unequal, one_empty, none = record["means"]
        assert unequal == 13 / 5  # not the mean of the rank means, (3 + 2.5) / 2
        assert one_empty == 2.0  # a rank without samples contributes nothing, not a NaN
        assert math.isnan(none)  # no rank contributed


@pytest.mark.clause("DIST-1", "DIST-6")
def test_the_pooled_score_on_two_ranks_is_the_one_rank_score(two_ranks: list[Record],
                                                             one_rank: Record) -> None:
    assert [v[1] for v in one_rank["validations"]] == POOLED_SCORES[:4]
    for record in two_ranks:
        assert [v[1] for v in record["pooled"]["validations"]] == POOLED_SCORES[:4]


@pytest.mark.clause("DIST-2")
def test_every_rank_stops_at_the_same_epoch_and_finishes(two_ranks: list[Record]) -> None:
    for record in two_ranks:
        assert record["pooled"]["trained"] == [0, 1, 2, 3]  # patience 2: tie, then worse
        assert [v[3] for v in record["pooled"]["validations"]] == [False, False, False, True]
        assert record["pooled"]["events"][-1] == "test"


@pytest.mark.clause("DIST-2")
def test_a_stop_asked_by_one_rank_ends_the_run_on_every_rank(two_ranks: list[Record]) -> None:
    for record in two_ranks:
        assert record["rank_local"]["trained"] == list(range(STOP_EPOCH + 1))
        assert record["rank_local"]["events"][-1] == "test"


@pytest.mark.clause("DIST-3")
def test_every_rank_agrees_on_improvements_best_epoch_and_best_weights(
        two_ranks: list[Record]) -> None:
    rank0, rank1 = two_ranks
    for run in ("pooled", "rank_local"):
        assert [v[2] for v in rank0[run]["validations"]] == [
            v[2] for v in rank1[run]["validations"]]
        assert rank0[run]["best_epoch"] == rank1[run]["best_epoch"]
        assert rank0[run]["best_weights"] == rank1[run]["best_weights"]
        assert rank0[run]["best_weights"]


@pytest.mark.clause("DIST-3")
def test_rank_zeros_score_decides_when_the_ranks_score_differently(
        two_ranks: list[Record]) -> None:
    # rank 1 scored 0.9, nan, 0.95: its own flags would be T, F, T and its best epoch 2
    assert [v[1] for v in two_ranks[0]["rank_local"]["validations"]] == RANK0_SCORES[:3]
    for record in two_ranks:
        assert [v[2] for v in record["rank_local"]["validations"]] == [True, True, False]
        assert record["rank_local"]["best_epoch"] == 1


@pytest.mark.clause("DIST-4")
def test_only_rank_zero_writes_and_each_file_is_complete_before_the_next_epoch(
        two_ranks: list[Record]) -> None:
    rank0, rank1 = two_ranks
    assert rank1["files_written"] == []
    assert {Path(f).name for f in rank0["files_written"]} == {"best.pt", "last.pt",
                                                              "metrics.jsonl"}
    # rank 1 loaded rank 0's last.pt as each epoch started: it held the previous epoch
    assert rank1["rank0_last_pt_seen"] == {"1": 0, "2": 1, "3": 2}


@pytest.mark.clause("DIST-6")
def test_decisions_on_two_ranks_equal_those_on_one_rank(two_ranks: list[Record],
                                                       one_rank: Record) -> None:
    for record in two_ranks:
        run = record["pooled"]
        assert run["validations"] == one_rank["validations"]
        assert (run["trained"], run["best_epoch"]) == (one_rank["trained"], 1)


@pytest.mark.clause("DIST-5")
def test_a_stalled_rank_fails_every_rank_within_the_timeout(tmp_path: Path) -> None:
    timeout_s, stall_s = 2.0, 4.5
    started = time.monotonic()
    rank0, rank1 = launch(stall_worker, tmp_path, (timeout_s, stall_s), limit_s=30)
    assert "finished" not in rank0
    assert "finished" not in rank1
    assert "error" in rank0
    assert "error" in rank1
    # rank 0 gave up after ddp.timeout_s, long before the stalled rank came back
    assert timeout_s * 0.9 <= rank0["waited_s"] <= timeout_s + 1.5 < stall_s
    assert rank1["waited_s"] <= timeout_s + 1.5  # and the stalled rank fails once it returns
    assert time.monotonic() - started < 20
