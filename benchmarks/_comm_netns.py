"""``bench_comm.py --netns``: gradient compression in seconds on a shaped link.

Two namespace hosts (``gpuspark cluster up --hosts 2 --netns --link-rate RATE``, root only),
one rank each, so every all-reduce crosses the two hosts' shaped links. For each
configuration (none, none in one bucket, fp16, PowerSGD rank 1 and 4), from the same seed:
train the resnet3d recipe's network for a fixed number of epochs on a small synthetic task
(is the left or the right half of the volume brighter?), timing every step and the
communication the step waited for (the DDP comm meter's exposed seconds), then score the
held-out volumes. Configurations run one after another inside one launch, so they share the
minute's load; the step times are medians over the steps after the first epoch (DDP's bucket
rebuild and PowerSGD's plain start steps fall in epoch 0).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

# (name, compression, PowerSGD rank, bucket_cap_mb): "none-cap25" is "none" with an explicit
# 25 MiB cap, which puts this network in one bucket (no overlap with backward; see
# docs/training.md, "Buckets"): the cost of the buckets DDP makes, side by side.
CONFIGS = [("none", None, 0, None), ("none-cap25", None, 0, 25), ("fp16", "fp16", 0, None),
           ("powersgd-r1", "powersgd", 1, None), ("powersgd-r4", "powersgd", 4, None)]  # fmt: skip


def _volumes(n: int, size: int, seed: int) -> tuple[Any, Any]:
    """``n`` noise volumes whose left (label 0) or right (label 1) half is brighter by 0.05
    standard deviations: learnable in a few dozen steps, not at once."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, size, size, size, generator=gen)
    y = torch.randint(0, 2, (n,), generator=gen)
    half = size // 2
    for i in range(n):
        lo = int(y[i]) * half
        x[i, 0, :, :, lo : lo + half] += 0.05
    return x, y


def train_configs(shape: dict[str, Any]) -> dict[str, Any]:
    """Runs on each rank: every configuration trained from the same seed for ``epochs``
    epochs of ``steps`` batches of this rank's share; rank 0's numbers."""
    import torch
    import torch.distributed as dist

    from gpuspark.train import ddp
    from gpuspark.train.recipes import RecipeConfig, build_model

    torch.set_num_threads(1)
    ddp.init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    batch, steps, size = shape["batch"], shape["steps"], shape["size"]
    x, y = _volumes(batch * steps * world, size, seed=1)
    mine = slice(rank * batch * steps, (rank + 1) * batch * steps)
    x, y = x[mine], y[mine]
    val_x, val_y = _volumes(shape["val"], size, seed=2)
    cfg = RecipeConfig(data="-", depth=shape["depth"], width=shape["width"])
    out: dict[str, Any] = {}
    for name, comp, r, cap in CONFIGS:
        torch.manual_seed(0)
        net = build_model("resnet3d", cfg, 2)
        model = ddp.prepare(net, compression=comp, powersgd_rank=max(r, 1),
                            powersgd_start_iter=2, bucket_cap_mb=cap)  # fmt: skip
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        meter = ddp.comm_meter(model)
        step_s, exposed_s = [], []
        dist.barrier()
        t_start = time.perf_counter()
        for epoch in range(shape["epochs"]):
            for i in range(steps):
                t0 = time.perf_counter()
                meter.begin_step()
                part = slice(i * batch, (i + 1) * batch)
                loss = torch.nn.functional.cross_entropy(model(x[part]), y[part])
                loss.backward()
                meter.end_step()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if epoch > 0:
                    step_s.append(time.perf_counter() - t0)
                    exposed_s.append(meter.steps[-1].exposed_s)
        dist.barrier()
        train_s = time.perf_counter() - t_start
        model.eval()
        with torch.no_grad():
            logits = model(val_x)
        model.train()
        out[name] = {
            "step_s": statistics.median(step_s),
            "exposed_s": statistics.median(exposed_s),
            "train_s": train_s,
            "bytes_sent": statistics.median(s.bytes_sent for s in meter.steps[steps:]),
            "val_acc": float((logits.argmax(1) == val_y).float().mean()),
            "val_loss": float(torch.nn.functional.cross_entropy(logits, val_y)),
        }
    out["_parameters"] = sum(p.numel() for p in net.parameters())
    return out


def can_run() -> str | None:
    """Why ``--netns`` cannot run here (``None``: it can)."""
    if os.geteuid() != 0:
        return "--netns needs root (network namespaces, veths, tc)"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "--netns needs ip and tc (iproute2)"
    return None


@contextlib.contextmanager
def netns_session(rate: str) -> Iterator[Any]:
    """A 2-host namespace cluster with links shaped to ``rate`` and a training session on
    it; both taken down at the end."""
    from gpuspark.cli.main import main
    from gpuspark.cluster.local import LocalCluster

    state = tempfile.mkdtemp(prefix="gpuspark-bench-netns-")
    up = ["cluster", "up", "--hosts", "2", "--netns", "--link-rate", rate, "--cores", "2",
          "--gpus", "1", "--memory", "2g", "--state-dir", state]  # fmt: skip
    try:
        if main(up) != 0:
            raise SystemExit("bench_comm --netns: cluster up failed")
        cluster = LocalCluster.running(state)
        assert cluster is not None
        spark = cluster.session(kind="training", **{"spark.app.name": "gpuspark-bench-comm"})
        try:
            yield spark
        finally:
            spark.stop()
    finally:
        main(["cluster", "down", "--state-dir", state])
        shutil.rmtree(state, ignore_errors=True)


def run(shape: dict[str, Any], rate: str) -> dict[str, Any]:
    """The launch on the namespace cluster; rows of the table, base ``none``."""
    import sys

    import cloudpickle
    from pyspark import cloudpickle as spark_cloudpickle

    from gpuspark import launch

    for pickler in (cloudpickle, spark_cloudpickle):  # benchmarks/ is not on the executors' path
        pickler.register_pickle_by_value(sys.modules[__name__])
    with netns_session(rate) as spark:
        t0 = time.perf_counter()
        res = launch.run(train_configs, shape, num_processes=2, spark=spark, timeout=3600)
        wall = time.perf_counter() - t0
    base = res["none"]
    rows = []
    for name, *_ in CONFIGS:
        r = res[name]
        rows.append({
            "config": name,
            "bytes_sent_per_step": int(r["bytes_sent"]),
            "step_ms_median": round(r["step_s"] * 1000, 1),
            "comm_exposed_ms_median": round(r["exposed_s"] * 1000, 1),
            "comm_share": round(r["exposed_s"] / r["step_s"], 3),
            "step_vs_none": round(r["step_s"] / base["step_s"], 3),
            "train_s": round(r["train_s"], 1),
            "train_vs_none": round(r["train_s"] / base["train_s"], 3),
            "val_acc": round(r["val_acc"], 4),
            "val_loss": round(r["val_loss"], 4),
        })  # fmt: skip
    return {"rows": rows, "parameters": res["_parameters"], "wall_s": wall}


def print_table(result: dict[str, Any], shape: dict[str, Any], rate: str) -> None:
    print(f"bench_comm --netns: 2 namespace hosts, links shaped to {rate} (tc tbf), 1 rank "
          f"each, gloo, 1 thread; resnet{shape['depth']} 3D width {shape['width']}, "
          f"{result['parameters']:,} parameters, {shape['epochs']} epochs x {shape['steps']} "
          f"steps of {shape['batch']}x1x{shape['size']}^3 per rank")  # fmt: skip
    print(f"{'config':<13} {'sent B/step':>12} {'step ms':>8} {'comm ms':>8} {'comm %':>7} "
          f"{'step/none':>9} {'train s':>8} {'val acc':>8} {'val loss':>8}")  # fmt: skip
    for r in result["rows"]:
        print(
            f"{r['config']:<13} {r['bytes_sent_per_step']:>12,} {r['step_ms_median']:>8.1f} "
            f"{r['comm_exposed_ms_median']:>8.1f} {100 * r['comm_share']:>6.1f}% "
            f"{r['step_vs_none']:>9.3f} {r['train_s']:>8.1f} {r['val_acc']:>8.3f} "
            f"{r['val_loss']:>8.3f}"
        )
    print(f"step and comm: medians over the steps after epoch 0; wall {result['wall_s']:.1f} s")
