"""The spec's network fields reach every rank: :func:`hosts_network_env` on the driver, each
task's own entry (by its host, name or short name) in the rank's environment, with the
request's ``env`` over it; and a launch on Spark whose gloo ranks use the interface it names."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from gpuspark.launch import make_request, run_request
from gpuspark.launch.ranks import rank_env
from gpuspark.spec import ClusterSpec, example_spec, parse_spec
from gpuspark.spec.network import hosts_network_env


def _spec(**group: Any) -> ClusterSpec:
    data = parse_spec(example_spec()).model_dump()
    data["nodes"][0].update(group)
    return ClusterSpec.model_validate(data)


SPEC = _spec(addresses=["10.0.0.11", "10.0.0.12"], socket_ifname="ens1f0", ib_hca="mlx5_0:1")
WANT = {
    "NCCL_SOCKET_IFNAME": "=ens1f0",
    "GLOO_SOCKET_IFNAME": "ens1f0",
    "NCCL_IB_HCA": "=mlx5_0:1",
}


def test_every_name_of_every_host_is_a_key() -> None:
    table = hosts_network_env(SPEC)
    for key in ("dgx01", "dgx02", "10.0.0.11", "10.0.0.12"):
        assert table[key] == WANT, key
    assert hosts_network_env(parse_spec(example_spec())) == {}  # no fields: nothing to ship


@pytest.mark.parametrize("host", ["10.0.0.12", "dgx02", "DGX02.cluster.example.com"])
def test_a_task_finds_its_host(host: str) -> None:
    req = make_request(print, num_processes=2, gpus_per_process=0)
    req.host_env = hosts_network_env(SPEC)
    env = rank_env(req, "run", 0, "gloo", host)
    assert {k: env[k] for k in WANT} == WANT


def test_the_request_env_wins_and_unknown_hosts_get_nothing() -> None:
    req = make_request(print, num_processes=2, gpus_per_process=0, env={"NCCL_IB_HCA": "=mlx5_2"})
    req.host_env = hosts_network_env(SPEC)
    assert rank_env(req, "run", 0, "nccl", "dgx01")["NCCL_IB_HCA"] == "=mlx5_2"
    assert "GLOO_SOCKET_IFNAME" not in rank_env(req, "run", 0, "gloo", "laptop-7")


def ifname_and_sum() -> tuple[str, float]:
    """A rank: the interface gloo was told to use, and an all-reduce over it."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return os.environ["GLOO_SOCKET_IFNAME"], float(t.item())


@pytest.fixture
def _by_value() -> Any:
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.mark.spark
@pytest.mark.usefixtures("_by_value")
def test_ranks_on_spark_use_the_interface_of_their_host(spark: Any) -> None:
    # The embedded cluster's executors are on 127.0.0.1: its entry names the loopback.
    req = make_request(ifname_and_sum, num_processes=2, gpus_per_process=0, metrics_port=0)
    req.host_env = {"127.0.0.1": {"GLOO_SOCKET_IFNAME": "lo"}}
    assert run_request(req, spark) == ("lo", 3.0)
