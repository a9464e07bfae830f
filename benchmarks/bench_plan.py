"""The planner against measurements: predicted vs measured step time and comm share.

For the resnet3d and resnet2d recipes' networks on 2 local gloo ranks (1 torch thread each),
without compression and with PowerSGD (rank 2): calibrate (all-reduce sweep + compute probe
with both ranks running, as in training), predict with ``gpuspark.plan.predict``, then train
real steps with ``gpuspark.train.fit`` (DDP, the recipe's AdamW) and read its step-time
breakdown. Batches come from memory (the decode path is not part of this check). The first
epoch is warm-up (DDP bucket rebuild, PowerSGD's plain start steps); the second is measured.

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


def _median_rows(runs: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    out = []
    for i, row in enumerate(runs[0]):
        t = statistics.median(r[i]["time_s"] for r in runs)
        algbw = row["bytes"] / t
        out.append({"bytes": row["bytes"], "time_s": t, "algbw": algbw, "busbw": algbw})
    return out


def _median_probes(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for i, probe in enumerate(runs[0]):
        med = {k: statistics.median(r[i][k] for r in runs) for k in probe if k != "compression"}
        out.append({"compression": probe["compression"], **med})
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
    from gpuspark.plan import AllreduceRow, AllreduceSweep, CalibrateOptions, Calibration
    from gpuspark.plan.calibrate import probe_result

    opts = CalibrateOptions(
        recipe=recipe, options=case["options"], input_shape=case["input"], batch=batch,
        steps=steps, iters=10, decode=False, compressions=COMPRESSIONS,
    )  # fmt: skip
    res = launch.run(_rank, opts, reps, num_processes=2, local=True, backend="gloo")
    rows = tuple(AllreduceRow(**r) for r in _median_rows(res["rows"]))
    cal = Calibration(
        allreduce=AllreduceSweep(world=2, backend=res["backend"], rows=rows),
        compute=probe_result(opts, _median_probes(res["probes"])),
    )
    out = []
    for comp in COMPRESSIONS:
        plan = _predict(cal, recipe, batch, comp)
        runs = [_measured(f[comp]) for f in res["fits"]]
        m = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        out.append({
            "recipe": recipe, "compression": comp, "options": case["options"],
            "input": list(case["input"]), "per_rank_batch": batch, "repetitions": reps,
            "predicted": {k: getattr(plan, k) for k in
                          ("step_s", "compute_s", "exposed_comm_s", "optimizer_s", "data_s",
                           "comm_share", "bytes_sent")},
            "measured": m,
            "measured_step_s_runs": [r["step_s"] for r in runs],
            "step_error_pct": 100 * (plan.step_s - m["step_s"]) / m["step_s"],
            "comm_share_error_pts": 100 * (plan.comm_share - m["comm_share"]),
            "bytes_error_pct": 100 * (plan.bytes_sent - m["bytes_sent"]) / m["bytes_sent"],
        })  # fmt: skip
    return out


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
    batch, steps, reps = (4, 4, 1) if args.quick else (8, 8, 3)
    t0 = time.perf_counter()
    rows = []
    for recipe, case in cases.items():
        rows += _run_case(recipe, case, batch, steps, reps)
    wall = time.perf_counter() - t0
    print("bench_plan: 2 local gloo ranks, 1 thread each; predicted vs measured per step")
    _print(rows)
    worst = max(abs(r["step_error_pct"]) for r in rows)
    print(f"worst step-time error {worst:.1f}% (target 15%); wall {wall:.1f} s")
    path = write_results(
        "plan" + ("_quick" if args.quick else ""),
        {"quick": args.quick, "rows": rows, "worst_step_error_pct": worst, "wall_s": wall},
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
