"""Calibration probes, run through :func:`gpuspark.launch.run` on the cluster at hand.

- all-reduce sweep: float32 all-reduces of growing sizes, like nccl-tests' ``all_reduce_perf``
  (size, time, algbw, busbw = algbw x 2(n-1)/n);
- compute probe: the recipe's forward + backward per sample and its optimizer step, measured
  on every rank while all ranks run it at once with the training's torch threads, so the ranks
  compete for cores and memory bandwidth as they do in training; and the extra wait of an
  all-reduce issued as each rank's backward ends (uneven ranks, rescheduling on busy CPUs);
- decode probe: samples/s one core decodes with the recipes' decoders (JPEG images, uint8 CT
  volumes), in this process.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from gpuspark import launch
from gpuspark._util.extras import check_extras, require
from gpuspark.plan import formulas as f
from gpuspark.plan.calibration import (
    AllreduceRow,
    AllreduceSweep,
    Calibration,
    ComputeProbe,
)
from gpuspark.plan.probe_checks import check_calibrate
from gpuspark.plan.workloads import recipe_workload
from gpuspark.train import ddp

__all__ = [
    "DEFAULT_SIZES",
    "CalibrateOptions",
    "allreduce_rows",
    "calibrate",
    "compute_probe",
    "decode_probe",
    "probe_result",
]

DEFAULT_SIZES = tuple(4 * 4**i for i in range(0, 12))
"""Message sizes of the sweep: 4 B to 16 MiB, x4 apart."""
_DECODE_PROBE = "plan calibrate's decode probe"  # JPEG: the [images] extra


@dataclass
class CalibrateOptions:
    """What to measure and under which conditions."""

    recipe: str | None = "resnet3d"
    """Recipe whose network the compute probe runs (``None``: no compute probe)."""
    options: dict[str, Any] = field(default_factory=dict)
    """:class:`~gpuspark.train.recipes.RecipeConfig` shape options (``depth``, ``width``)."""
    input_shape: tuple[int, ...] | None = None
    """One sample's shape (default: ``1x64x64x64`` for resnet3d, ``3x224x224`` otherwise)."""
    batch: int = 4
    """Per-rank batch of the compute probe."""
    threads: int = 1
    """torch threads per rank, as in training."""
    ranks: int = 2
    sizes: tuple[int, ...] = DEFAULT_SIZES
    iters: int = 10
    steps: int = 5
    decode: bool = True
    compressions: tuple[str, ...] = ("none", "powersgd")
    """Compression hooks whose own cost the compute probe measures."""
    powersgd_rank: int = 2


def allreduce_rows(sizes: tuple[int, ...], iters: int = 10) -> list[dict[str, float]]:
    """On every rank (collective): median seconds of float32 all-reduces of ``sizes`` bytes
    over the default group, as nccl-tests rows (``bytes``, ``time_s``, ``algbw``, ``busbw``)."""
    import torch
    import torch.distributed as dist

    n = dist.get_world_size()
    rows = []
    for size in sizes:
        t = torch.ones(max(1, size // 4), dtype=torch.float32)
        for _ in range(2):
            dist.all_reduce(t)
        times = []
        for _ in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
        sec = statistics.median(times)
        nbytes = t.numel() * 4
        algbw = nbytes / sec
        rows.append(
            {"bytes": nbytes, "time_s": sec, "algbw": algbw, "busbw": algbw * 2 * (n - 1) / n}
        )
    return rows


class _HookTimer:
    """Wraps a DDP comm hook: when the last bucket was handed over and when the hook's
    futures finished (the gpuspark comm meter's measure, kept here for a one-rank group)."""

    def __init__(self, hook: Any) -> None:
        self.hook = hook
        self.launch = 0.0
        self.done = 0.0

    def __call__(self, state: Any, bucket: Any) -> Any:
        self.launch = time.perf_counter()

        def finish(fut: Any) -> Any:
            self.done = max(self.done, time.perf_counter())
            return fut.value()

        return self.hook(state, bucket).then(finish)


def _solo_ddp(net: Any, compression: str, rank: int) -> tuple[Any, _HookTimer]:
    """``net`` in DDP on a group of this rank alone, with the compression's hook timed."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel

    groups = [dist.new_group([r]) for r in range(dist.get_world_size())]
    solo = groups[dist.get_rank()]
    cap = None  # DDP's default buckets, as ddp.prepare
    if compression == "powersgd":
        cap = sum(p.numel() * 4 for p in net.parameters()) / 2**20 + 1  # as ddp.prepare on gloo
    model = DistributedDataParallel(net, process_group=solo, bucket_cap_mb=cap)
    state: Any = solo
    hook: Any = default_hooks.allreduce_hook
    if compression == "fp16":
        hook = default_hooks.fp16_compress_hook
    elif compression == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=solo, matrix_approximation_rank=rank, start_powerSGD_iter=2,
            use_error_feedback=True, warm_start=True, random_seed=0,
        )  # fmt: skip
        hook = powerSGD_hook.powerSGD_hook
    timer = _HookTimer(hook)
    model.register_comm_hook(state, _annotated(timer))
    return model, timer


def _annotated(timer: _HookTimer) -> Any:
    import torch
    import torch.distributed as dist

    def hook(state: Any, bucket: Any) -> Any:
        return timer(state, bucket)

    hook.__annotations__ = {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
    return hook


def compute_probe(opts: CalibrateOptions, compression: str = "none") -> dict[str, Any]:
    """On every rank (collective; all ranks run it at once, with ``opts.threads`` threads):
    the recipe's network in DDP on a one-rank group (DDP's bucket work and the compression
    hook included, no network), timed per step: forward, backward, hook after the last
    bucket, optimizer (AdamW); and the wait at the end of backward (:func:`_tail_s`).
    Returns medians as :class:`ComputeProbe` fields."""
    import torch
    import torch.distributed as dist

    from gpuspark.train.recipes import RecipeConfig, build_model

    assert opts.recipe is not None
    torch.set_num_threads(opts.threads)
    shape = tuple(opts.input_shape or _default_input(opts.recipe))
    torch.manual_seed(0)
    net = build_model(opts.recipe, RecipeConfig(data="-", **opts.options), 2)
    tail = torch.zeros(max(1, _tail_bytes(net, compression, opts.powersgd_rank) // 4))
    model, timer = _solo_ddp(net, compression, opts.powersgd_rank)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn((opts.batch, *shape))
    y = torch.randint(0, 2, (opts.batch,))
    fwd, bwd, hook, step, wait = [], [], [], [], []
    for i in range(opts.steps + 3):
        dist.barrier()
        timer.launch = timer.done = 0.0
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        extra = _tail_s(tail)
        t3 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        if i >= 3:  # bucket rebuild and PowerSGD's plain start steps
            exposed = max(0.0, timer.done - timer.launch) if timer.launch else 0.0
            fwd.append(t1 - t0)
            bwd.append(t2 - t1 - exposed)
            hook.append(exposed)
            step.append(t4 - t3)
            wait.append(extra)
    f, b = statistics.median(fwd), statistics.median(bwd)
    return {
        "compression": compression,
        "straggler_s": max(0.0, statistics.median(wait)),
        "sample_s": (f + b) / opts.batch,
        "backward_share": b / (f + b),
        "hook_s": statistics.median(hook),
        "optimizer_s": statistics.median(step),
    }


def _tail_bytes(net: Any, compression: str, rank: int) -> int:
    """Bytes DDP all-reduces after backward ends: the last bucket (25 MB cap) after
    compression; PowerSGD on gloo (one bucket): a third of what it sends (P, Q, vectors)."""
    import math

    shapes = [tuple(p.shape) for p in net.parameters()]
    raw = f.compressed_bytes(shapes, "none")
    sent = f.compressed_bytes(shapes, compression, rank)
    if compression == "powersgd":
        return sent // 3
    grads = [math.prod(s) * 4 for s in reversed(shapes)]
    return int(f.bucket_sizes(grads, f.DDP_BUCKET_BYTES)[-1] * sent / raw)


def _tail_s(buf: Any) -> float:
    """Collective. Seconds the end-of-backward all-reduce of ``buf`` costs this rank beyond
    the same all-reduce started together: issued as each rank's backward ends (as DDP's last
    bucket is), it includes waiting for the slowest rank and, on a busy CPU, the time a rank
    blocked in the all-reduce takes to be scheduled again; the second, after a barrier (as in
    the sweep), is the transfer alone."""
    import torch.distributed as dist

    t0 = time.perf_counter()
    dist.all_reduce(buf)
    tail = time.perf_counter() - t0
    dist.barrier()
    t0 = time.perf_counter()
    dist.all_reduce(buf)
    return tail - (time.perf_counter() - t0)


def _default_input(recipe: str) -> tuple[int, ...]:
    from gpuspark.train.recipes import get_recipe

    return get_recipe(recipe).sample_shape


def probe_result(
    opts: CalibrateOptions, runs: list[dict[str, Any]], base: str = "none"
) -> ComputeProbe:
    """A :class:`ComputeProbe` from :func:`compute_probe` results (the ``base`` compression's
    run sets the compute figures; every run gives its compression's hook seconds)."""

    assert opts.recipe is not None
    shape = tuple(opts.input_shape or _default_input(opts.recipe))
    first = next((r for r in runs if r["compression"] == base), runs[0])
    work = recipe_workload(opts.recipe, shape, opts.options)
    return ComputeProbe(
        recipe=opts.recipe,
        options=dict(opts.options),
        input_shape=shape,
        batch=opts.batch,
        ranks=opts.ranks,
        threads=opts.threads,
        sample_s=first["sample_s"],
        backward_share=first["backward_share"],
        optimizer_s=first["optimizer_s"],
        straggler_s=first.get("straggler_s", 0.0),
        flops_per_sample=work.flops_per_sample,
        shapes=work.shapes,
        hook_s={r["compression"]: r["hook_s"] for r in runs},
    )


def _probe_rank(opts: CalibrateOptions) -> dict[str, Any]:
    """Runs on every rank: the sweep, then the compute probes; rank 0's result is kept."""

    backend = ddp.init_distributed()
    out: dict[str, Any] = {"backend": backend}
    out["rows"] = allreduce_rows(opts.sizes, opts.iters)
    if opts.recipe is not None:
        out["compute"] = [compute_probe(opts, c) for c in opts.compressions]
    return out


def decode_probe(samples: int = 200) -> dict[str, float]:
    """Samples/s one core decodes: 500x375 JPEG images (an ImageNet-typical size) with the
    ``resnet2d`` decoder, 64^3 uint8 CT volumes with the ``resnet3d`` decoder."""
    import io

    import numpy as np

    from gpuspark.train.recipes import decode_image, decode_volume

    Image = require("PIL.Image", "images", _DECODE_PROBE)
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    img = rng.integers(0, 255, (375, 500, 3), dtype=np.uint8)
    Image.fromarray(img).save(buf, format="JPEG", quality=90)
    jpeg = {"image": buf.getvalue(), "image/format": "jpeg", "label": 0}
    vol = {"volume": rng.integers(0, 255, (64, 64, 64), dtype=np.uint8), "label": 0}
    rates = {}
    for name, fn, sample in (("jpeg", decode_image, jpeg), ("volume", decode_volume, vol)):
        fn(sample)
        t0 = time.perf_counter()
        for _ in range(samples):
            fn(sample)
        rates[name] = samples / (time.perf_counter() - t0)
    return rates


def _machine() -> dict[str, Any]:
    import os
    import platform

    import torch

    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def calibrate(
    opts: CalibrateOptions | None = None,
    *,
    spec: Any = None,
    local: bool = True,
) -> Calibration:
    """Measure the cluster: all-reduce sweep and compute probe on ``opts.ranks`` ranks
    (local processes, or a Spark barrier stage with ``local=False``), decode in this process.
    Options without meaning are refused first
    (:func:`~gpuspark.plan.probe_checks.check_calibrate`)."""

    o = opts or CalibrateOptions()
    check_calibrate(o, local=local)
    if o.decode:  # measured last: a missing extra is said before the ranks run
        check_extras(_DECODE_PROBE, ("PIL", "images"), ("simplejpeg", "images"))
    res = launch.run(_probe_rank, o, num_processes=o.ranks, local=local, spec=spec)
    rows = tuple(AllreduceRow(**r) for r in res["rows"])
    cal = Calibration(allreduce=AllreduceSweep(world=o.ranks, backend=res["backend"], rows=rows))
    if "compute" in res:
        cal.compute = probe_result(o, res["compute"])
    if o.decode:
        cal.decode = decode_probe()
    cal.machine = _machine()
    return cal
