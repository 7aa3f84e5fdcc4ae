"""The launch read from the environment, the device rules, and the control channel (no GPU,
no launcher: the environments are written here)."""

from __future__ import annotations

import time

import pytest
import torch

from trainspec.conformance.run.control import Channel
from trainspec.conformance.run.launch import (
    Launch,
    detect_launch,
    local_device,
    nccl_env,
    slurm_hosts,
    slurm_port,
)
from trainspec.conformance.run.session import worker_environ
from trainspec.conformance.run.worker import refuse_fork_after_cuda
from trainspec.errors import ConfigError, HarnessError

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "node01", "MASTER_PORT": "29500",
            "TORCHELASTIC_RUN_ID": "job", "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TRAINSPEC_NODE": "node02"}
SLURM = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
         "SLURM_NODELIST": "gpu[07-08]", "SLURM_NNODES": "2", "SLURM_JOB_ID": "123456",
         "TRAINSPEC_NODE": "gpu08"}


def test_torchrun_environment_gives_rank_node_and_agent_store() -> None:
    launch = detect_launch(TORCHRUN)
    assert launch == Launch(launcher="torchrun", rank=3, world_size=4, local_rank=1,
                            node="node02", nodes=2, master_addr="node01", master_port=29500,
                            has_agent_store=True)
    assert not launch.is_judge
    assert launch.environment() == {"launcher": "torchrun", "nodes": "2", "world_size": "4"}


def test_slurm_environment_puts_rank_zero_on_the_first_node_with_a_port_per_job() -> None:
    launch = detect_launch(SLURM)
    assert launch is not None
    assert (launch.launcher, launch.rank, launch.world_size, launch.nodes) == ("slurm", 1, 2, 2)
    assert launch.master_addr == "gpu07"
    assert launch.master_port == 15000 + 123456 % 20000 == slurm_port(SLURM)
    assert not launch.has_agent_store


def test_a_batch_scripts_master_addr_and_port_win_under_slurm() -> None:
    launch = detect_launch({**SLURM, "MASTER_ADDR": "head", "MASTER_PORT": "4000"})
    assert launch is not None
    assert (launch.master_addr, launch.master_port) == ("head", 4000)


def test_torchrun_inside_a_slurm_allocation_is_torchrun() -> None:
    launch = detect_launch({**SLURM, **TORCHRUN})
    assert launch is not None
    assert launch.launcher == "torchrun"


def test_no_launcher_or_a_world_of_one_is_no_launch() -> None:
    assert detect_launch({}) is None
    assert detect_launch({**TORCHRUN, "RANK": "0", "WORLD_SIZE": "1"}) is None


def test_a_launchers_garbled_variables_are_a_config_error_naming_them() -> None:
    with pytest.raises(ConfigError, match="WORLD_SIZE: expected a whole number"):
        detect_launch({**TORCHRUN, "WORLD_SIZE": "four"})
    with pytest.raises(ConfigError, match="rank 5 is out of a world of 2"):
        detect_launch({**SLURM, "SLURM_PROCID": "5"})


@pytest.mark.parametrize(("nodelist", "hosts"), [
    ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
    ("a1,b2", ["a1", "b2"]),
    ("c[9-10]", ["c9", "c10"]),
    ("", []),
])
def test_slurm_node_lists_expand_ranges_keeping_zero_padding(nodelist: str,
                                                              hosts: list[str]) -> None:
    assert slurm_hosts(nodelist) == hosts


def test_a_node_list_it_cannot_read_is_an_error() -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        slurm_hosts("n[1-x]")


@pytest.mark.parametrize(("local_rank", "backend", "count", "device"), [
    (0, "gloo", 8, "cpu"), (1, None, 0, "cpu"), (1, None, 2, "cuda:1"), (3, "nccl", 4, "cuda:3"),
])
def test_each_local_rank_gets_a_device_of_its_own(local_rank: int, backend: str | None,
                                                  count: int, device: str) -> None:
    assert local_device(local_rank, backend, count) == device


def test_nccl_without_enough_devices_names_the_processes_per_node_to_start() -> None:
    with pytest.raises(ConfigError, match="at most 2 processes per node"):
        local_device(2, "nccl", 2)
    with pytest.raises(ConfigError, match="no CUDA device"):
        local_device(0, "nccl", 0)


def test_nccl_errors_end_a_lost_rank_within_the_collectives_bound_unless_the_user_set_them(
        ) -> None:
    env = nccl_env(20.0, {"TORCH_NCCL_BLOCKING_WAIT": "1"})
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "30"
    assert "TORCH_NCCL_BLOCKING_WAIT" not in env  # the user's own setting stays


def test_a_worker_does_not_inherit_the_launchers_rank_variables() -> None:
    env = worker_environ({**TORCHRUN, **SLURM, "PATH": "/bin", "CUDA_VISIBLE_DEVICES": "1"})
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "1", "TRAINSPEC_NODE": "gpu08",
                   "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


def test_a_worker_refuses_to_fork_once_cuda_is_initialised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_fork_after_cuda()  # CPU only: forks freely
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(HarnessError, match="CUDA was initialised in the worker"):
        refuse_fork_after_cuda()


def _launch(rank: int, port: int) -> Launch:
    return Launch(launcher="slurm", rank=rank, world_size=2, local_rank=rank, node="here",
                  nodes=1, master_addr="127.0.0.1", master_port=port, has_agent_store=False)


def test_messages_go_once_each_in_order_and_a_silent_peer_is_seen_as_silent() -> None:
    from torch.distributed import PrefixStore, TCPStore  # type: ignore[attr-defined]

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    store = PrefixStore("trainspec/", server)
    judge = Channel(_launch(0, server.port), store)
    rank1 = Channel(_launch(1, server.port), store)
    rank1.send(0, {"n": 1})
    rank1.send(0, {"n": 2})
    assert judge.take(0) is None  # nothing from itself
    assert [judge.take(1), judge.take(1), judge.take(1)] == [{"n": 1}, {"n": 2}, None]
    assert judge.silent_s(1) == 0.0  # first look
    time.sleep(0.2)
    assert judge.silent_s(1) >= 0.2  # nobody beats for rank 1
    store.add("hb/1", 1)
    assert judge.silent_s(1) == 0.0
    with pytest.raises(HarnessError, match="sent nothing within"):
        judge.wait(1, 0.1)
