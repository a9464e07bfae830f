"""Gradient compression on 2 gloo ranks: bytes per step and step time, resnet3d recipe model.

Compares, side by side in one run (configurations alternate within every repetition, medians
over repetitions): no hook (plain all-reduce), fp16, PowerSGD rank 1 and rank 4. Bytes are the
exact sizes handed to all-reduce per step (gpuspark's comm meter); PowerSGD is measured after
its start iteration. Each rank runs 1 torch thread.

With ``--netns`` (root): the ranks on two namespace hosts whose links are shaped to
``--link-rate`` (default 50mbit), each compression trained for a fixed number of epochs on a
small synthetic task: step time, the communication it waited for, and the held-out accuracy,
so compression is measured in seconds and in quality (``benchmarks/_comm_netns.py``).

    python benchmarks/bench_comm.py [--quick] [--netns [--link-rate RATE]]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_info, write_results

CONFIGS = [("none", None, 0), ("fp16", "fp16", 0), ("powersgd-r1", "powersgd", 1),
           ("powersgd-r4", "powersgd", 4)]  # fmt: skip


def _rank_fn(depth: int, width: float, size: int, batch: int, steps: int, reps: int) -> Any:
    """Runs on each rank: every config ``reps`` times (alternating), ``steps`` timed steps."""
    import torch
    import torch.distributed as dist

    from gpuspark.train import ddp
    from gpuspark.train.recipes import RecipeConfig, build_model

    torch.set_num_threads(1)
    ddp.init_distributed()
    rank = dist.get_rank()
    cfg = RecipeConfig(data="-", depth=depth, width=width)
    x = torch.randn(batch, 1, size, size, size, generator=torch.Generator().manual_seed(rank))
    y = torch.randint(0, 2, (batch,), generator=torch.Generator().manual_seed(rank))
    out: dict[str, Any] = {name: {"step_s": [], "sent": [], "raw": []} for name, *_ in CONFIGS}
    warmup = 3  # covers PowerSGD's plain all-reduce start (start iter 2) and bucket rebuild
    params = 0
    for _ in range(reps):
        for name, comp, r in CONFIGS:
            torch.manual_seed(0)
            net = build_model("resnet3d", cfg, 2)
            params = sum(p.numel() for p in net.parameters())
            model = ddp.prepare(net, compression=comp, powersgd_rank=max(r, 1),
                                powersgd_start_iter=2)  # fmt: skip
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            meter = ddp.comm_meter(model)
            times = []
            for i in range(warmup + steps):
                dist.barrier()
                t0 = time.perf_counter()
                meter.begin_step()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                meter.end_step()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if i >= warmup:
                    times.append(time.perf_counter() - t0)
            timed = meter.steps[warmup:]
            out[name]["step_s"].append(statistics.median(times))
            out[name]["sent"].append(statistics.median(s.bytes_sent for s in timed))
            out[name]["raw"].append(statistics.median(s.bytes_raw for s in timed))
    out["_parameters"] = params
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small model and few steps (< 60 s)")
    ap.add_argument(
        "--netns",
        action="store_true",
        help="ranks on 2 namespace hosts with shaped links (root), with quality",
    )
    ap.add_argument("--link-rate", default="50mbit", help="--netns: each host's link rate")
    args = ap.parse_args(argv)
    if args.netns:
        return _netns(args.quick, args.link_rate)
    from gpuspark import launch

    if args.quick:
        shape = {"depth": 10, "width": 0.25, "size": 32, "batch": 4, "steps": 4, "reps": 2}
    else:
        shape = {"depth": 18, "width": 0.5, "size": 32, "batch": 4, "steps": 8, "reps": 3}
    t0 = time.perf_counter()
    res = launch.run(_rank_fn, *shape.values(), num_processes=2, local=True, backend="gloo")
    wall = time.perf_counter() - t0
    base = res["none"]
    base_sent = statistics.median(base["sent"])
    base_step = statistics.median(base["step_s"])
    rows = []
    for name, *_ in CONFIGS:
        r = res[name]
        sent, step = statistics.median(r["sent"]), statistics.median(r["step_s"])
        rows.append({
            "config": name,
            "bytes_raw_per_step": int(statistics.median(r["raw"])),
            "bytes_sent_per_step": int(sent),
            "sent_vs_none": round(sent / base_sent, 4),
            "step_ms_median": round(step * 1000, 1),
            "step_vs_none": round(step / base_step, 3),
            "step_ms_runs": [round(s * 1000, 1) for s in r["step_s"]],
        })  # fmt: skip
    model = (
        f"resnet{shape['depth']} 3D of MONAI's layout, widen_factor {shape['width']}, "
        f"{res['_parameters']:,} parameters, input {shape['batch']}x1x{shape['size']}^3 per rank"
    )
    print(f"bench_comm: 2 ranks, gloo, 1 thread each; {model}")
    print(f"{'config':<13} {'raw B/step':>12} {'sent B/step':>12} {'sent/none':>9} "
          f"{'step ms':>9} {'step/none':>9}")  # fmt: skip
    for r in rows:
        print(
            f"{r['config']:<13} {r['bytes_raw_per_step']:>12,} {r['bytes_sent_per_step']:>12,} "
            f"{r['sent_vs_none']:>9.4f} {r['step_ms_median']:>9.1f} {r['step_vs_none']:>9.3f}"
        )
    print(f"medians of {shape['reps']} alternating repetitions x {shape['steps']} steps; "
          f"wall {wall:.1f} s")  # fmt: skip
    path = write_results(
        "comm" + ("_quick" if args.quick else ""),
        {"quick": args.quick, "shape": shape, "model": model, "rows": rows, "wall_s": wall,
         "machine_detail": machine_info()},
    )  # fmt: skip
    print(f"results: {path}")
    return 0


def _netns(quick: bool, rate: str) -> int:
    import _comm_netns as netns

    why = netns.can_run()
    if why is not None:
        print(f"bench_comm: {why}", file=sys.stderr)
        return 2
    if quick:
        shape = {"depth": 10, "width": 0.25, "size": 24, "batch": 4, "steps": 4, "epochs": 2,
                 "val": 32}  # fmt: skip
    else:
        shape = {"depth": 10, "width": 0.25, "size": 32, "batch": 4, "steps": 16, "epochs": 6,
                 "val": 64}  # fmt: skip
    result = netns.run(shape, rate)
    netns.print_table(result, shape, rate)
    path = write_results(
        "comm_netns" + ("_quick" if quick else ""),
        {"quick": quick, "link_rate": rate, "shape": shape, **result,
         "machine_detail": machine_info()},
    )  # fmt: skip
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
