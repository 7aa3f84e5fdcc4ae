"""``trainspec audit`` on real 2-rank runs (gloo, on CPU): the ranks' logs judged together.

Each rank is its own process, launched as torchrun launches one (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``), running the reference example trainer audited. The validation
score is scripted per rank: either a (total, count) shard each rank pools with the trainer's
``reduce_mean`` (a pooled mean, DIST-1), or a rank-local value (the trainer's choice of metric:
best selection must then still compare rank 0's score, DIST-3). Run as a module, this file is
one rank of such a run: ``python -m tests.test_audit_ranks RANK WORLD PORT ROOT KIND MUTANT``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORLD = 2
# epoch -> per-rank (total, count): the pooled means are 0.5, 0.6, 0.55, 0.7; rank 1's own
# means (0.2, 0.9, 0.1, 0.95) move another way
SHARDS = {0: [(4.0, 5.0), (0.2, 1.0)], 1: [(1.5, 5.0), (4.5, 5.0)],
          2: [(5.4, 6.0), (0.1, 1.0)], 3: [(2.1, 5.0), (4.75, 5.0)]}
# epoch -> per-rank local score: rank 0 improves at epochs 0 and 2, rank 1 at 0, 1, 3
LOCAL = {0: [0.5, 0.2], 1: [0.4, 0.9], 2: [0.6, 0.1], 3: [0.55, 0.95]}


def _trainer(kind: str, mutant: str) -> type[Any]:
    from trainspec.reference.example import MLPTrainer

    class Scripted(MLPTrainer):
        def accuracy(self, loader: Any) -> float:
            if loader is not self.val_loader:
                return float(super().accuracy(loader))
            epoch = int(self._completed_epoch)
            if kind == "pooled":
                total, count = SHARDS[epoch][self.rank]
                return float(self.reduce_mean(total, count))
            return LOCAL[epoch][self.rank]

    if mutant == "none":
        return Scripted
    import tests.mutants.dist as family

    broken = getattr(family, mutant)
    return type(mutant, (broken, Scripted), {})


def _rank_main(rank: int, world: int, port: int, root: str, kind: str, mutant: str) -> None:
    """One rank of the audited run (the child process's body)."""
    import torch

    from trainspec.kit import audited
    from trainspec.reference.config import CkptConfig, DdpConfig, TrainConfig, ValConfig

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # checkpoints off with rank-local scores: a trainer whose ranks disagree on an improvement
    # would otherwise wait in the best file's save for a rank that does not save
    cfg = TrainConfig(seed=0, num_epochs=len(LOCAL), val=ValConfig(patience=3),
                      ckpt=CkptConfig(dir=root, enable=kind == "pooled"),
                      ddp=DdpConfig(backend="gloo", timeout_s=10.0), extra={"lr": 0.05})
    audited(_trainer(kind, mutant))(cfg, rank=rank, world_size=world).train()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(tmp_path: Path, kind: str, mutant: str = "none") -> dict[str, tuple[str, str]]:
    from trainspec.conformance.audit import audit

    port = _free_port()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "tests.test_audit_ranks", str(rank), str(WORLD), str(port),
         str(tmp_path), kind, mutant], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True) for rank in range(WORLD)]
    try:
        outputs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), outputs
    logs = sorted(tmp_path.rglob("*.rank*.jsonl"))
    assert len(logs) == WORLD, logs
    assert len({json.loads(p.read_text().splitlines()[0])["run_id"] for p in logs}) == 1
    return {c.id: (c.verdict, c.evidence) for c in audit(sorted({p.parent.parent
                                                                  for p in logs})).clauses}


def _dist(verdicts: dict[str, tuple[str, str]]) -> dict[str, str]:
    return {c: verdicts[c][0] for c in ("DIST-1", "DIST-2", "DIST-3")}


@pytest.mark.slow
def test_the_reference_on_two_ranks_passes_the_rank_clauses(tmp_path: Path) -> None:
    pooled = _run(tmp_path / "pooled", "pooled")
    assert _dist(pooled) == {"DIST-1": "pass", "DIST-2": "pass", "DIST-3": "pass"}, pooled
    local = _run(tmp_path / "local", "local")
    # rank-local scores differ by design: DIST-1 has no pooled mean to judge, no false alarm
    assert _dist(local) == {"DIST-1": "n/a", "DIST-2": "pass", "DIST-3": "pass"}, local
    assert "rank-local metric" in local["DIST-1"][1]
    assert not any(v == "fail" for v, _ in (*pooled.values(), *local.values()))


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "mutant", "clause", "fragment"), [
    # rank 1 keeps its own mean: the ranks log other pooled scores
    ("pooled", "PoolsOnRankZeroOnly", "DIST-1", "rank 1 logged score="),
    # each rank compares its own score: rank 1 takes other improvements than rank 0
    ("local", "DecidesOnLocalScore", "DIST-3", "rank 1 logged improved="),
])
def test_a_verdict_taken_on_one_rank_is_caught(tmp_path: Path, kind: str, mutant: str,
                                               clause: str, fragment: str) -> None:
    verdicts = _run(tmp_path, kind, mutant)
    assert verdicts[clause][0] == "fail", verdicts[clause]
    assert fragment in verdicts[clause][1]


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5],
               sys.argv[6])
