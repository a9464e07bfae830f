"""A real 2-process torch.distributed (gloo) run over a ShardDataset: equal steps, no hang."""

from __future__ import annotations

import json
import socket
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from gpuspark.data.write import ShardWriter


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world_size: int, port: int, dataset: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    from gpuspark.data.load import ShardDataset

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=60),
    )
    try:
        ds = ShardDataset(dataset, seed=1)  # world detected from torch.distributed
        steps, ids = 0, []
        for batch in ds.loader(4, num_workers=1):
            steps += 1
            ids.extend(batch["idx"].tolist())
            total = torch.tensor([float(len(batch["idx"]))])
            dist.all_reduce(total)  # a collective per step: unequal steps would hang here
        counts = [None] * world_size
        dist.all_gather_object(counts, steps)
        dist.barrier()
        with open(f"{out}/rank{rank}.json", "w") as f:
            json.dump({"steps": steps, "ids": ids, "all_steps": counts, "world": ds.world.rank}, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(180)
def test_two_gloo_ranks_equal_steps(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    dataset = tmp_path / "ds"
    with ShardWriter(dataset, target_shard_bytes=500) as writer:
        for i in range(41):  # odd: one record is dropped
            writer.write({"idx": i, "x": np.zeros(4, np.float32)})
    mp.spawn(
        _rank_main,
        args=(2, _free_port(), str(dataset), str(tmp_path)),
        nprocs=2,
        join=True,
    )
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in results] == [0, 1]
    assert results[0]["steps"] == results[1]["steps"] == 5  # 20 samples each, batches of 4
    assert results[0]["all_steps"] == [5, 5]
    ids0, ids1 = set(results[0]["ids"]), set(results[1]["ids"])
    assert len(ids0) == len(ids1) == 20 and not ids0 & ids1
