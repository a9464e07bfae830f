"""The planner against measurements: predicted vs measured step time and comm share.

For the resnet3d and resnet2d recipes' networks on 2 local gloo ranks (1 torch thread each),
without compression and with PowerSGD (rank 2): calibrate (all-reduce sweep + compute probe
with both ranks running, as in training), predict with ``gpuspark.plan.predict``, then train
real steps with ``gpuspark.train.fit`` (DDP, the recipe's AdamW) and read its step-time
breakdown. Batches come from memory (the decode path is not part of this check). The first
epoch is warm-up (DDP bucket rebuild, PowerSGD's plain start steps); the second is measured.
Calibration and measurement alternate inside one launch (sweep, then per compression: compute
probe, training), repeated; medians over the repetitions.

    python benchmarks/bench_plan.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import write_results

CASES = {
    "resnet3d": {"options": {"depth": 10, "width": 0.5}, "input": (1, 32, 32, 32)},
    "resnet2d": {"options": {"width": 0.25}, "input": (3, 96, 96)},
}
QUICK = {
    "resnet3d": {"options": {"depth": 10, "width": 0.25}, "input": (1, 24, 24, 24)},
    "resnet2d": {"options": {"width": 0.25}, "input": (3, 64, 64)},
}
COMPRESSIONS = ("none", "powersgd")


def _fit_steps(
    recipe: str, options: dict[str, Any], shape: tuple[int, ...], batch: int, comp: str, steps: int
) -> dict[str, Any]:
    """On each rank: DDP (``gpuspark.train.ddp.prepare``) + ``fit`` for 2 epochs of ``steps``
    in-memory batches; returns the second epoch's metrics (rank 0's times)."""
    import torch

    from gpuspark.train import ddp
    from gpuspark.train.loop import FitConfig, fit
    from gpuspark.train.recipes import RecipeConfig, build_model

    torch.manual_seed(0)
    net = build_model(recipe, RecipeConfig(data="-", **options), 2)
    compression = None if comp == "none" else comp
    model = ddp.prepare(net, compression=compression, powersgd_rank=2, powersgd_start_iter=2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    loader = [
        (torch.randn((batch, *shape), generator=gen), torch.randint(0, 2, (batch,), generator=gen))
        for _ in range(steps)
    ]
    cfg = FitConfig(epochs=2, log=None, metrics_port=0)
    return fit(model, opt, torch.nn.functional.cross_entropy, loader, config=cfg)[-1]


def _rank(opts: Any, reps: int) -> dict[str, Any]:
    """On each rank, ``reps`` times in turn: calibrate (sweep + compute probes), then train
    each compression, so that calibration and measurement share the machine's load."""
    import torch

    from gpuspark.plan.calibrate import allreduce_rows, compute_probe
    from gpuspark.train import ddp

    torch.set_num_threads(opts.threads)
    backend = ddp.init_distributed()
    out: dict[str, Any] = {"backend": backend, "rows": [], "probes": [], "fits": []}
    for _ in range(reps):
        out["rows"].append(allreduce_rows(opts.sizes, opts.iters))
        probes, fits = [], {}
        for comp in COMPRESSIONS:  # each probe right before the training it predicts
            probes.append(compute_probe(opts, comp))
            args = (opts.recipe, opts.options, opts.input_shape, opts.batch, comp, opts.steps)
            fits[comp] = _fit_steps(*args)
        out["probes"].append(probes)
        out["fits"].append(fits)
    return out


def _measured(h: dict[str, Any]) -> dict[str, float]:
    steps = max(1, int(h["steps"]))
    keys = {"data_wait_s": "data_s", "compute_s": "compute_s", "optimizer_s": "optimizer_s"}
    # fit's step-time parts are rank 0's; bytes per step are the comm meter's.
    out = {new: float(h[old]) / steps for old, new in keys.items()}
    out["exposed_comm_s"] = float(h["comm_exposed_s"]) / steps
    out["step_s"] = float(h["seconds"]) / steps
    out["comm_share"] = out["exposed_comm_s"] / out["step_s"]
    out["bytes_sent"] = float(h["bytes_sent_per_step"])
    return out


def _predict(cal: Any, recipe: str, batch: int, comp: str) -> Any:
    from gpuspark.plan import PlanRequest, Workload, predict
    from gpuspark.spec import resolve_spec

    probe = cal.compute
    work = Workload(recipe, probe.shapes, probe.flops_per_sample)
    req = PlanRequest(work, global_batch=2 * batch, gpus=2, compression=comp, powersgd_rank=2)
    return predict(resolve_spec(None), req, cal)


def _run_case(
    recipe: str, case: dict[str, Any], batch: int, steps: int, reps: int
) -> list[dict[str, Any]]:
    from gpuspark import launch
    from gpuspark.plan import CalibrateOptions

    opts = CalibrateOptions(
        recipe=recipe, options=case["options"], input_shape=case["input"], batch=batch,
        steps=steps, iters=10, decode=False, compressions=COMPRESSIONS,
    )  # fmt: skip
    res = launch.run(_rank, opts, reps, num_processes=2, local=True, backend="gloo")
    return [_compare(opts, res, comp, reps) for comp in COMPRESSIONS]


def _compare(opts: Any, res: dict[str, Any], comp: str, reps: int) -> dict[str, Any]:
    """Predicted vs measured for one compression: each repetition's prediction uses the sweep
    and the compute probe run just before that repetition's training (paired, because the
    load of a shared machine changes from minute to minute); medians over repetitions."""
    from gpuspark.plan import AllreduceRow, AllreduceSweep, Calibration
    from gpuspark.plan.calibrate import probe_result

    plans, runs = [], []
    for rows, probes, fits in zip(res["rows"], res["probes"], res["fits"], strict=True):
        sweep = AllreduceSweep(2, res["backend"], tuple(AllreduceRow(**r) for r in rows))
        cal = Calibration(allreduce=sweep, compute=probe_result(opts, probes, base=comp))
        plans.append(_predict(cal, opts.recipe, opts.batch, comp))
        runs.append(_measured(fits[comp]))
    keys = ("step_s", "compute_s", "exposed_comm_s", "optimizer_s", "data_s", "comm_share",
            "bytes_sent")  # fmt: skip
    pred = {k: statistics.median(getattr(p, k) for p in plans) for k in keys}
    meas = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    step_err = [100 * (p.step_s / r["step_s"] - 1) for p, r in zip(plans, runs, strict=True)]
    share_err = [100 * (p.comm_share - r["comm_share"]) for p, r in zip(plans, runs, strict=True)]
    return {
        "recipe": opts.recipe, "compression": comp, "options": opts.options,
        "input": list(opts.input_shape), "per_rank_batch": opts.batch, "repetitions": reps,
        "predicted": pred, "measured": meas,
        "step_error_pct_runs": step_err,
        "measured_step_s_runs": [r["step_s"] for r in runs],
        "step_error_pct": statistics.median(step_err),
        "unpaired_step_error_pct": 100 * (pred["step_s"] / meas["step_s"] - 1),
        "comm_share_error_pts": statistics.median(share_err),
        "bytes_error_pct": 100 * (pred["bytes_sent"] / meas["bytes_sent"] - 1),
    }  # fmt: skip


def _print(rows: list[dict[str, Any]]) -> None:
    print(f"{'case':<20} {'pred ms':>8} {'meas ms':>8} {'err %':>6} {'pred comm':>9} "
          f"{'meas comm':>9} {'pred MB':>8} {'meas MB':>8}")  # fmt: skip
    for r in rows:
        p, m = r["predicted"], r["measured"]
        print(
            f"{r['recipe'] + ' ' + r['compression']:<20} {p['step_s'] * 1e3:>8.1f} "
            f"{m['step_s'] * 1e3:>8.1f} {r['step_error_pct']:>+6.1f} {p['comm_share']:>9.1%} "
            f"{m['comm_share']:>9.1%} {p['bytes_sent'] / 1e6:>8.3f} {m['bytes_sent'] / 1e6:>8.3f}"
        )
        parts = ("compute_s", "exposed_comm_s", "optimizer_s")
        pred = " ".join(f"{k[:-2]} {p[k] * 1e3:.1f}/{m[k] * 1e3:.1f}" for k in parts)
        print(f"{'':<20} predicted/measured ms: {pred}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller networks, fewer steps (< 60 s)")
    args = ap.parse_args(argv)
    cases = QUICK if args.quick else CASES
    batch, steps, reps = (4, 4, 1) if args.quick else (8, 8, 5)
    t0 = time.perf_counter()
    rows = []
    for recipe, case in cases.items():
        rows += _run_case(recipe, case, batch, steps, reps)
    wall = time.perf_counter() - t0
    print("bench_plan: 2 local gloo ranks, 1 thread each; predicted vs measured per step")
    _print(rows)
    worst = max(abs(r["step_error_pct"]) for r in rows)
    print(f"err %: median over repetitions of (predicted / measured - 1), each repetition "
          f"predicted from its own calibration; worst {worst:.1f}% (target 15%); "
          f"wall {wall:.1f} s")  # fmt: skip
    path = write_results(
        "plan" + ("_quick" if args.quick else ""),
        {"quick": args.quick, "rows": rows, "worst_step_error_pct": worst, "wall_s": wall},
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
