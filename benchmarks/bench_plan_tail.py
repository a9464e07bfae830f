"""Where DDP's exposed communication goes on 2 local gloo ranks: the last bucket, side by side.

The resnet3d recipe's network (resnet10 3D of MONAI's layout, widen 0.5, 8x1x32^3 per rank)
in plain DDP on 2 local gloo ranks, 1 thread each, with a timed all-reduce hook: for every
bucket, on both ranks, the time it was handed over and the time its all-reduce completed
(``perf_counter`` is one clock for all processes of a machine). Per step of rank 0, after 3
warm-up steps:

- exposed: last completion - rank 0's hand-over of the last bucket (what ``fit`` reports);
- wait: how much later rank 1 handed the last bucket over (0 if it was first);
- transfer: last completion - the later of the two hand-overs;

against the sweep's time for the same bytes (median of 10 all-reduces after a barrier, run
right after training in the same launch). Printed as medians and means over steps; the
load average is printed too: the gap between transfer and sweep appears on a busy machine.

    python benchmarks/bench_plan_tail.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import write_results


def _timed_hook(rec: list[dict[str, float]]) -> Any:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def hook(state: Any, bucket: Any) -> Any:
        entry = {"bytes": bucket.buffer().numel() * 4, "launch": time.perf_counter()}
        rec.append(entry)

        def done(fut: Any) -> Any:
            entry["done"] = time.perf_counter()
            return fut.value()

        return default_hooks.allreduce_hook(state, bucket).then(done)

    hook.__annotations__ = {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
    return hook


def _rank(steps: int, shape: tuple[int, ...]) -> list[Any]:
    """On each rank: ``steps`` DDP steps with the timed hook, then the sweep for the buckets'
    sizes; every rank's records (all-gathered)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from gpuspark.plan.calibrate import allreduce_rows
    from gpuspark.train import ddp
    from gpuspark.train.recipes import RecipeConfig, build_model

    torch.set_num_threads(1)
    ddp.init_distributed()
    torch.manual_seed(0)
    model = DistributedDataParallel(
        build_model("resnet3d", RecipeConfig(data="-", depth=10, width=0.5), 2)
    )
    rec: list[dict[str, float]] = []
    model.register_comm_hook(None, _timed_hook(rec))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn((8, *shape)), torch.randint(0, 2, (8,))
    out = []
    for _ in range(steps):
        rec.clear()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append([dict(e) for e in rec])
    sweep = allreduce_rows(tuple(sorted({int(b["bytes"]) for b in out[-1]})), 10)
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, {"steps": out, "sweep": sweep})
    return everyone


def _summary(res: list[Any], warmup: int = 3) -> dict[str, Any]:
    r0, r1 = res[0]["steps"][warmup:], res[1]["steps"][warmup:]
    exposed, wait, transfer = [], [], []
    for a, b in zip(r0, r1, strict=True):
        la, lb = a[-1]["launch"], b[-1]["launch"]
        done = max(e["done"] for e in a)
        exposed.append(done - la)
        wait.append(max(0.0, lb - la))
        transfer.append(done - max(la, lb))
    last = int(r0[-1][-1]["bytes"])
    sweep = {int(r["bytes"]): r["time_s"] for r in res[0]["sweep"]}
    return {
        "buckets_bytes": [int(e["bytes"]) for e in r0[-1]],
        "last_bucket_bytes": last,
        "sweep_s": sweep[last],
        "steps": len(exposed),
        "exposed_s": exposed,
        "wait_s": wait,
        "transfer_s": transfer,
    }


def main(argv: list[str] | None = None) -> int:
    from gpuspark import launch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps, smaller volumes (< 60 s)")
    args = ap.parse_args(argv)
    steps, shape = (6, (1, 24, 24, 24)) if args.quick else (23, (1, 32, 32, 32))
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    res = launch.run(_rank, steps, shape, num_processes=2, local=True, backend="gloo")
    wall = time.perf_counter() - t0
    s = _summary(res)
    print(f"bench_plan_tail: resnet3d DDP, 2 gloo ranks; buckets {s['buckets_bytes']} B; "
          f"{s['steps']} steps; load average {load0:.1f} -> {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'ms per step (rank 0)':<28} {'median':>8} {'mean':>8}")
    for key in ("exposed_s", "wait_s", "transfer_s"):
        v = s[key]
        print(
            f"{key[:-2]:<28} {statistics.median(v) * 1e3:>8.1f} {statistics.fmean(v) * 1e3:>8.1f}"
        )
    print(f"{'sweep, same bytes':<28} {s['sweep_s'] * 1e3:>8.1f}")
    medians = {k[:-2]: statistics.median(s[k]) for k in ("exposed_s", "wait_s", "transfer_s")}
    means = {k[:-2]: statistics.fmean(s[k]) for k in ("exposed_s", "wait_s", "transfer_s")}
    result = {"quick": args.quick, "load_avg_before": load0, "wall_s": wall, "medians_s": medians,
              "means_s": means, **s}  # fmt: skip
    path = write_results("plan_tail" + ("_quick" if args.quick else ""), result)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
