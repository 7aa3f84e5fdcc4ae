"""What each rank of the distributed tests runs; spawned children import this module by name.

A worker never raises: it writes what happened (decisions, errors, timings) to
``<out_dir>/rank<r>.json`` and exits 0, so that the parent asserts on every rank's record.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from tests.reference.reference_helpers import (
    PooledTrainer,
    ScriptedTrainer,
    files_under,
    make_config,
)

__all__ = [
    "POOLED_SCORES",
    "RANK0_SCORES",
    "RANK1_SCORES",
    "SHARDS",
    "SPLIT_VALUES",
    "STOP_RANK",
    "decisions",
    "pooled_worker",
    "stall_worker",
]

# Per-sample correctness (0/1) of an 8-sample validation split after each epoch. Rank 0 holds
# 2 samples, rank 1 the other 6, so a mean of rank means differs from the pooled mean: it would
# see an improvement at epoch 2, where the pooled score ties (0.75). Sums of 0/1 are exact, so
# one rank and two ranks compute bit-identical scores.
SPLIT_VALUES = [
    [0, 0, 1, 1, 1, 1, 0, 0],  # 0.5    (mean of rank means 0.333)
    [0, 1, 1, 1, 1, 1, 1, 0],  # 0.75   (0.667)
    [1, 1, 1, 1, 1, 1, 0, 0],  # 0.75   (0.833): a tie
    [1, 1, 1, 1, 1, 0, 0, 0],  # 0.625  (0.75): the second non-improvement, patience 2 stops
    [1, 1, 1, 1, 1, 1, 1, 1],  # 1.0    never reached
    [1, 1, 1, 1, 1, 1, 1, 1],
]
POOLED_SCORES = [sum(v) / len(v) for v in SPLIT_VALUES]
SHARDS = {1: [list(range(8))], 2: [[0, 1], [2, 3, 4, 5, 6, 7]]}
POOLED_NUM_EPOCHS = 6
POOLED_PATIENCE = 2

# Unpooled, rank-local scores: the ranks disagree, rank 0's must win on both.
RANK0_SCORES = [0.1, 0.3, 0.2, 0.4, 0.5]
RANK1_SCORES = [0.9, float("nan"), 0.95, 0.1, 0.2]
STOP_RANK, STOP_EPOCH = 1, 2  # only this rank's val_epoch asks to stop, after this epoch

# reduce_mean probes: (total, count) on rank 0 and on rank 1
MEAN_PROBES = [((3.0, 1), (10.0, 4)), ((0.0, 0), (6.0, 3)), ((0.0, 0), (0.0, 0))]


def decisions(trainer: ScriptedTrainer) -> dict[str, Any]:
    """What a run decided, in JSON: validations, epochs trained, best epoch and weights."""
    best = trainer.best_model or {}
    return {
        "validations": [[v.epoch, v.score, v.improved, v.stop] for v in trainer.validations],
        "trained": trainer.trained_epochs,
        "events": trainer.events,
        "best_epoch": trainer.best_epoch,
        "best_weights": {k.removeprefix("module."): v.flatten().tolist()
                         for k, v in best.items()},
    }


class RankLocalTrainer(ScriptedTrainer):
    """Scores its own rank's script, and on one rank alone asks to stop after one epoch."""

    def val_epoch(self) -> bool:
        should_stop = super().val_epoch()
        return should_stop or (self.rank == STOP_RANK and self.epoch == STOP_EPOCH)


def pooled_worker(rank: int, world_size: int, out_dir: str, port: int) -> None:
    """DIST-1/2/3/4/6 in one launch: mean probes, a pooled-score run, a rank-local run."""
    out = Path(out_dir)
    record: dict[str, Any] = {"rank": rank}
    try:
        torch.set_num_threads(1)
        # the launcher's group: the trainers use it and leave it alone, so that several runs
        # share one launch
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=30))
        try:
            record.update(_pooled_runs(rank, world_size, out))
            dist.barrier()  # no collective left in flight when the group is freed
        finally:
            dist.destroy_process_group()
    except BaseException:
        record["error"] = traceback.format_exc()
    _write(out / f"rank{rank}.json", record)
    # the trainers' DDP reducers still hold the gloo group; freeing it at interpreter exit
    # can abort the process in torch, after the result is written: end here instead
    os._exit(0)


def _pooled_runs(rank: int, world_size: int, out: Path) -> dict[str, Any]:
    files_seen: dict[int, int] = {}

    def read_rank0_last_pt(trainer: ScriptedTrainer) -> None:
        # rank 0's run folder, as rank 1 can name it: the run id is rank 0's on every rank
        if trainer.epoch > 0:
            path = out / "rank0" / trainer.run_id / "last.pt"
            saved = torch.load(path, map_location="cpu", weights_only=True)
            files_seen[trainer.epoch] = int(saved["epoch"])

    cfg = make_config(out / f"rank{rank}", num_epochs=POOLED_NUM_EPOCHS,
                      val={"patience": POOLED_PATIENCE})
    pooled = PooledTrainer(cfg, sample_values=SPLIT_VALUES, shards=SHARDS, rank=rank,
                           world_size=world_size, on_train_epoch=read_rank0_last_pt)
    means = [pooled.reduce_mean(*probe[rank]) for probe in MEAN_PROBES]
    pooled.train()
    written = sorted(str(p.relative_to(out)) for p in files_under(out / f"rank{rank}"))

    local_cfg = make_config(None, num_epochs=len(RANK0_SCORES))
    local = RankLocalTrainer(local_cfg, scores=RANK0_SCORES if rank == 0 else RANK1_SCORES,
                             rank=rank, world_size=world_size)
    local.train()
    return {"means": means, "pooled": decisions(pooled), "rank0_last_pt_seen": files_seen,
            "files_written": written, "rank_local": decisions(local)}


class StallingTrainer(ScriptedTrainer):
    """Rank 1 stalls before its first validation; every rank records when its error came."""

    stall_s = 0.0

    def val_epoch(self) -> bool:
        if self.rank == 1:
            time.sleep(self.stall_s)
        self.entered_val_at = time.monotonic()
        return super().val_epoch()


def stall_worker(rank: int, world_size: int, out_dir: str, port: int,
                 timings_s: tuple[float, float]) -> None:
    """DIST-5: the trainer's own group, bounded by ``ddp.timeout_s``; rank 1 stalls.

    ``timings_s`` is ``(ddp.timeout_s, how long rank 1 stalls)``.
    """
    timeout_s, stall_s = timings_s
    out = Path(out_dir)
    record: dict[str, Any] = {"rank": rank}
    trainer: StallingTrainer | None = None
    try:
        torch.set_num_threads(1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        _file_barrier(out, rank, world_size)  # the short timeout must not race the imports
        StallingTrainer.stall_s = stall_s
        cfg = make_config(None, num_epochs=2, ddp={"backend": "gloo", "timeout_s": timeout_s})
        trainer = StallingTrainer(cfg, scores=[0.1, 0.2], rank=rank, world_size=world_size)
        trainer.train()
        record["finished"] = True
    except Exception as e:
        record["error"] = f"{type(e).__name__}: {e}"
        entered = getattr(trainer, "entered_val_at", None)
        record["waited_s"] = None if entered is None else time.monotonic() - entered
    _write(out / f"rank{rank}.json", record)
    # After a timed-out collective, gloo's transport threads abort the interpreter's exit
    # ("terminate called without an active exception"); the record is written, skip the
    # C++ teardown. The error the test asserts on came earlier, as a Python exception.
    os._exit(0)


def _file_barrier(out: Path, rank: int, world_size: int, limit_s: float = 60.0) -> None:
    (out / f"ready{rank}").touch()
    deadline = time.monotonic() + limit_s
    while not all((out / f"ready{r}").exists() for r in range(world_size)):
        if time.monotonic() > deadline:
            raise TimeoutError("the other ranks never started")
        time.sleep(0.02)


def _write(path: Path, record: Mapping[str, Any] | Sequence[Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)
