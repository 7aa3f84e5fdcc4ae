"""The process group a multi-rank run lives in, and the few collectives the loop needs.

Launch conventions are torchrun's: ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``. Every collective is bounded by ``ddp.timeout_s`` (DIST-5): a peer that died or
stalls becomes an error on this rank instead of an indefinite wait.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from trainspec.errors import ConfigError
from trainspec.reference.config import DdpConfig

__all__ = ["ProcessGroup", "pick_device"]


def pick_device(rank: int, world_size: int, backend: str | None) -> torch.device:
    """nccl (explicit, or automatic with enough GPUs) runs on ``cuda:LOCAL_RANK``; gloo on CPU."""
    if backend == "gloo" or not torch.cuda.is_available():
        return torch.device("cpu")
    if world_size > 1 and torch.cuda.device_count() < world_size and backend is None:
        return torch.device("cpu")  # too few GPUs for one per rank: gloo on CPU
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    return torch.device("cuda", local_rank % torch.cuda.device_count())


@dataclass(slots=True)
class ProcessGroup:
    """The default process group of a run: joined on construction, left by :meth:`close`.

    A group that already existed (a launcher script initialized it) is used and left alone.
    """

    rank: int
    world_size: int
    device: torch.device
    is_distributed: bool
    owns_group: bool

    @classmethod
    def join(cls, rank: int, world_size: int, cfg: DdpConfig) -> ProcessGroup:
        device = pick_device(rank, world_size, cfg.backend)
        if world_size == 1:
            return cls(rank, 1, device, is_distributed=False, owns_group=False)
        if dist.is_initialized():
            if dist.get_world_size() != world_size or dist.get_rank() != rank:
                raise ConfigError(
                    f"world_size/rank: the trainer was built for rank {rank} of {world_size}, "
                    f"but the process group is rank {dist.get_rank()} of "
                    f"{dist.get_world_size()}. Pass the launcher's RANK and WORLD_SIZE."
                )
            return cls(rank, world_size, device, is_distributed=True, owns_group=False)
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
        if missing:
            raise ConfigError(
                f"{', '.join(missing)}: expected in the environment for a {world_size}-rank run, "
                "found unset. Launch with torchrun, or set MASTER_ADDR and MASTER_PORT."
            )
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(
            backend,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=cfg.timeout_s),
            device_id=device if device.type == "cuda" else None,
        )
        return cls(rank, world_size, device, is_distributed=True, owns_group=True)

    def close(self, *, is_healthy: bool = True) -> None:
        """Leave the group if this run created it (exiting without it can abort the process).

        A healthy run ends with a barrier: gloo's worker threads then hold no collective whose
        tensors still need the GIL to be freed. Without it, freeing the group later (with the
        DDP reducer that keeps it alive) can deadlock: the destructor joins a thread that waits
        for the GIL the destructor holds.
        """
        if self.owns_group and dist.is_initialized():
            if is_healthy:
                with contextlib.suppress(RuntimeError, dist.DistBackendError):
                    dist.barrier()
            dist.destroy_process_group()
        self.owns_group = False

    def barrier(self) -> None:
        if self.is_distributed:
            dist.barrier()

    def all_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks, in float64."""
        if not self.is_distributed:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return [float(v) for v in tensor.tolist()]

    def any_rank(self, flag: bool) -> bool:
        """True on every rank if it is true on any rank."""
        if not self.is_distributed:
            return flag
        tensor = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return bool(tensor.item() > 0)

    def broadcast_float(self, value: float) -> float:
        """Rank 0's value on every rank."""
        if not self.is_distributed:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.broadcast(tensor, src=0)
        return float(tensor.item())

    def broadcast_text(self, text: str, max_bytes: int = 256) -> str:
        """Rank 0's short string on every rank (a run id); no pickling involved."""
        if not self.is_distributed:
            return text
        data = text.encode()[:max_bytes].ljust(max_bytes, b"\0")
        tensor = torch.tensor(list(data), dtype=torch.uint8, device=self.device)
        dist.broadcast(tensor, src=0)
        return bytes(tensor.tolist()).rstrip(b"\0").decode()

    def gather_tensors(self, tensors: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """Every rank's copy of a dict of same-shaped tensors, indexed by rank."""
        if not self.is_distributed:
            return [tensors]
        gathered: list[dict[str, torch.Tensor]] = [{} for _ in range(self.world_size)]
        for name in sorted(tensors):
            local = tensors[name].to(self.device)
            parts = [torch.empty_like(local) for _ in range(self.world_size)]
            dist.all_gather(parts, local)
            for rank, part in enumerate(parts):
                gathered[rank][name] = part.cpu()
        return gathered
