"""HSDP across Spark tasks: 2 tasks ("nodes") x 2 ranks each (``processes_per_task=2``, as
``--nproc-per-node 2`` sets it) on the embedded cluster, gloo CPU ranks.

The launcher gives each rank ``LOCAL_WORLD_SIZE=2``, so ``strategy="hsdp"`` builds the mesh
``(replicate=2, shard=2)``: each rank holds half of the parameter bytes (its shard within its
node), and the two nodes hold the same shards (replicas). ``fsdp`` on the same 4 ranks holds a
quarter. Before ``LOCAL_WORLD_SIZE`` followed the tasks, every rank was its own node and HSDP
sharded over a group of one: full bytes on every rank, silently.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True)
def _pickle_this_module_by_value() -> Any:
    """The rank function below lives in this test module, which ranks cannot import."""
    import sys

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def shard_bytes(strategy: str) -> dict[str, Any]:
    """On each rank: the mesh, this rank's parameter bytes, the full model's, its node."""
    import os

    import torch
    import torch.distributed as dist

    from gpuspark.train import prepare
    from gpuspark.train.fsdp import memory_accounting

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Linear(128, 64))
    full = sum(p.numel() * p.element_size() for p in model.parameters())
    wrapped = prepare(model, strategy=strategy)
    mine = memory_accounting(wrapped)["param_bytes"]
    rows = [None] * dist.get_world_size()
    dist.all_gather_object(
        rows,
        {
            "rank": dist.get_rank(),
            "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
            "group_rank": int(os.environ["GROUP_RANK"]),
            "param_bytes": mine,
        },
    )
    return {"mesh": list(wrapped.gpuspark_info.mesh.shape), "full": full, "ranks": rows}


@pytest.mark.parametrize(("strategy", "mesh", "share"), [("hsdp", [2, 2], 2), ("fsdp", [4], 4)])
def test_hsdp_shards_within_each_node_of_two_ranks(
    spark: Any, strategy: str, mesh: list[int], share: int
) -> None:
    from gpuspark.launch import run

    out = run(
        shard_bytes,
        strategy,
        num_processes=4,
        processes_per_task=2,
        gpus_per_process=0,
        spark=spark,
        metrics_port=0,
    )
    assert out["mesh"] == mesh
    ranks = out["ranks"]
    assert [r["local_world_size"] for r in ranks] == [2, 2, 2, 2]
    assert sorted(r["group_rank"] for r in ranks) == [0, 0, 1, 1]  # two nodes of two ranks
    for r in ranks:
        assert r["param_bytes"] == out["full"] // share, (strategy, r)
