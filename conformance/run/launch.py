"""The user's own launch, read from the environment: torchrun or SLURM, one process per rank.

``torchrun ... -m trainspec check`` and ``srun ... python -m trainspec check`` start one
process per rank; :func:`detect_launch` says which launcher did, and where this process stands
in it (its rank, its node, the world's size and nodes). Nothing here starts a process or opens
a connection; :mod:`trainspec.conformance.run.control` speaks over the launch, and
:mod:`trainspec.conformance.run.launched` runs the ranks.

The device rules for CUDA runs live here too, pure, so they are tested without a GPU: one
device per local rank (:func:`local_device`), and the NCCL settings that turn a lost rank or a
stalled collective into an error within DIST-5's bound (:func:`nccl_env`).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from trainspec.errors import ConfigError

__all__ = ["Launch", "Launcher", "detect_launch", "local_device", "nccl_env", "node_name",
           "slurm_hosts", "slurm_port"]

Launcher = Literal["torchrun", "slurm"]

# overrides the host name a process reports as its node (tests run two "nodes" on one host)
NODE_ENV = "TRAINSPEC_NODE"


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """Where this process stands in the user's launch."""

    launcher: Launcher
    rank: int
    world_size: int
    local_rank: int
    node: str  # this process's node (its host name)
    nodes: int  # how many nodes the launch spans
    master_addr: str  # the launcher's store (torchrun) or where rank 0 opens one (SLURM)
    master_port: int
    has_agent_store: bool  # torchrun's agent hosts the store: every rank connects to it

    @property
    def is_judge(self) -> bool:
        """Rank 0 runs the checks and writes the reports; the other ranks serve runs."""
        return self.rank == 0

    def environment(self) -> dict[str, str | None]:
        """The report's environment entries that name the launch."""
        return {"launcher": self.launcher, "nodes": str(self.nodes),
                "world_size": str(self.world_size)}


def _int(env: Mapping[str, str], key: str, launcher: str) -> int:
    text = env.get(key, "")
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{key}: expected a whole number in {launcher}'s environment, got "
                          f"{text!r}. Launch trainspec check through {launcher} itself, or "
                          f"unset {key}.") from None
    if value < 0:
        raise ConfigError(f"{key}: expected 0 or more, got {value}")
    return value


def node_name(env: Mapping[str, str]) -> str:
    """This process's node: ``TRAINSPEC_NODE`` when set, else the host name."""
    return env.get(NODE_ENV) or socket.gethostname()


def detect_launch(env: Mapping[str, str]) -> Launch | None:
    """The launch this process runs in, or None when it runs on its own (or as one rank of a
    world of one: nothing to coordinate).

    torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``
    and ``TORCHELASTIC_*``; ``srun`` sets ``SLURM_PROCID``, ``SLURM_NTASKS``,
    ``SLURM_LOCALID`` and ``SLURM_NODELIST`` (``SLURM_STEP_*`` inside a step). torchrun wins
    when both are there (torchrun started inside an allocation).

    Raises:
        ConfigError: a launcher's variables are there but not whole numbers, or the rank is
            out of the world.
    """
    if "TORCHELASTIC_RUN_ID" in env or ("RANK" in env and "MASTER_PORT" in env):
        return _torchrun(env)
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return _slurm(env)
    return None


def _checked(launch: Launch) -> Launch | None:
    if launch.rank >= launch.world_size:
        raise ConfigError(f"{launch.launcher}: rank {launch.rank} is out of a world of "
                          f"{launch.world_size}")
    return launch if launch.world_size > 1 else None


def _torchrun(env: Mapping[str, str]) -> Launch | None:
    world = _int(env, "WORLD_SIZE", "torchrun")
    local_world = _int(env, "LOCAL_WORLD_SIZE", "torchrun") if "LOCAL_WORLD_SIZE" in env \
        else world
    nodes = _int(env, "GROUP_WORLD_SIZE", "torchrun") if "GROUP_WORLD_SIZE" in env \
        else max(1, -(-world // max(local_world, 1)))
    return _checked(Launch(
        launcher="torchrun", rank=_int(env, "RANK", "torchrun"), world_size=world,
        local_rank=_int(env, "LOCAL_RANK", "torchrun") if "LOCAL_RANK" in env else 0,
        node=node_name(env), nodes=nodes, master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=_int(env, "MASTER_PORT", "torchrun"),
        has_agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"))


def _slurm(env: Mapping[str, str]) -> Launch | None:
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_NODELIST") \
        or env.get("SLURM_JOB_NODELIST") or ""
    hosts = slurm_hosts(nodelist) or [node_name(env)]
    nnodes = env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES")
    port = env.get("MASTER_PORT")
    return _checked(Launch(
        launcher="slurm", rank=_int(env, "SLURM_PROCID", "SLURM"),
        world_size=_int(env, "SLURM_NTASKS", "SLURM"),
        local_rank=_int(env, "SLURM_LOCALID", "SLURM") if "SLURM_LOCALID" in env else 0,
        node=node_name(env), nodes=int(nnodes) if nnodes and nnodes.isdigit() else len(hosts),
        # the first node of the step hosts rank 0 (srun's block distribution), unless the
        # batch script names MASTER_ADDR itself, as sbatch scripts for torch usually do
        master_addr=env.get("MASTER_ADDR") or hosts[0],
        master_port=int(port) if port and port.isdigit() else slurm_port(env),
        has_agent_store=False))


def slurm_port(env: Mapping[str, str]) -> int:
    """The port rank 0 opens under SLURM without MASTER_PORT: one per job (from its ID), in
    15000..34999, so two jobs sharing a node do not collide (Lightning's rule)."""
    job = env.get("SLURM_JOB_ID", "")
    return 15000 + (int(job) % 20000 if job.isdigit() else 0)


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def slurm_hosts(nodelist: str) -> list[str]:
    """The host names of a SLURM node list: ``node[01-03,07],gpu5`` -> node01, node02, node03,
    node07, gpu5 (zero padding kept; nested brackets are not SLURM's syntax)."""
    hosts: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", nodelist):
        if plain:
            hosts.append(plain.strip())
            continue
        for part in ranges.split(","):
            m = _RANGE.match(part.strip())
            if m is None:
                raise ConfigError(f"SLURM_NODELIST: cannot read {part!r} in {nodelist!r}")
            first, last = m.group(1), m.group(2) or m.group(1)
            width = len(first)
            hosts.extend(f"{prefix}{i:0{width}d}" for i in range(int(first), int(last) + 1))
    return [h for h in hosts if h]


def local_device(local_rank: int, backend: str | None, device_count: int) -> str:
    """The device a rank's runs use: ``cuda:LOCAL_RANK`` for NCCL, one device per local rank;
    ``cpu`` for gloo (or no backend on a machine without GPUs).

    Raises:
        ConfigError: NCCL asked for with fewer devices than local ranks need (two ranks on one
            device deadlock NCCL's communicator set-up on most versions).
    """
    if backend == "gloo" or (backend is None and device_count == 0):
        return "cpu"
    if device_count == 0:
        raise ConfigError("--backend nccl: no CUDA device is visible to this process "
                          "(CUDA_VISIBLE_DEVICES or the driver). Run on a GPU node, or pass "
                          "--backend gloo.")
    if local_rank >= device_count:
        raise ConfigError(f"--backend nccl: local rank {local_rank} needs a device of its own, "
                          f"this node shows {device_count}. Start at most {device_count} "
                          "processes per node (--nproc-per-node, --ntasks-per-node).")
    return f"cuda:{local_rank}"


def nccl_env(collective_bound_s: float, env: Mapping[str, str]) -> dict[str, str]:
    """The NCCL settings a CUDA run's processes get (the user's own settings win).

    Async error handling tears the communicator down when a collective outlives the process
    group's timeout (the trainer sets it from ``ddp.timeout_s``, DIST-5), so a rank whose peer
    died errors within that bound instead of spinning in a kernel; the heartbeat monitor ends a
    process whose watchdog is stuck itself, a little after that.
    """
    wanted = {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",  # 1: abort the communicator, end the process
        "TORCH_NCCL_BLOCKING_WAIT": "0",  # the async path, not a busy wait per collective
        "TORCH_NCCL_ENABLE_MONITORING": "1",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(max(10, int(collective_bound_s) + 10)),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",  # a flight-recorder dump can outlast the bound
        "NCCL_ASYNC_ERROR_HANDLING": "1",  # the name torch < 2.2 reads
    }
    return {k: v for k, v in wanted.items() if k not in env}
