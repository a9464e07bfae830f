"""``gpuspark doctor --probe``: a short allreduce over the cluster through the launcher (gloo
here, NCCL on GPUs), reported like nccl-tests' ``busbw`` column and compared to the network the
spec promises."""

from __future__ import annotations

from typing import Any

from gpuspark._util import envvars
from gpuspark.doctor.report import Check, failure, info, ok, warning
from gpuspark.errors import GpusparkError
from gpuspark.launch import run
from gpuspark.spec import resolve_spec

__all__ = ["PROBE_BYTES", "allreduce_probe", "bus_bandwidth", "probe_check", "run_probe"]

PROBE_BYTES = 16 * 1024 * 1024
"""Message size of the probe (16 MiB: past the latency-bound sizes, short on CPU)."""
_SLOW_SHARE = 0.5
"""Below this share of the spec's link speed, the probe warns."""


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> float:
    """nccl-tests' allreduce ``busbw`` in bytes/s: ``2(n-1)/n x bytes / time``."""
    if world < 2 or seconds <= 0:
        return 0.0
    return 2 * (world - 1) / world * nbytes / seconds


def allreduce_probe(nbytes: int = PROBE_BYTES, iters: int = 5) -> dict[str, Any]:
    """Run inside each rank: time ``iters`` allreduces of ``nbytes``; rank 0 returns the result."""
    import os
    import socket
    import time

    import torch
    import torch.distributed as dist

    backend = os.environ.get(envvars.BACKEND.name, "gloo")
    dist.init_process_group(backend)
    device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if backend == "nccl" else "cpu"
    tensor = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dist.all_reduce(tensor)  # warm-up: connections are made on first use
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    if backend == "nccl":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / iters
    hosts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    world = dist.get_world_size()
    dist.destroy_process_group()
    return {
        "backend": backend,
        "world": world,
        "bytes": nbytes,
        "seconds": seconds,
        "hosts": sorted(set(hosts)),
    }


def probe_check(result: dict[str, Any], spec_gbps: float) -> Check:
    """The probe's result -> a check against the spec's compute network (gigabits/s)."""
    busbw = bus_bandwidth(result["bytes"], result["seconds"], result["world"])
    promised = spec_gbps / 8 * 1e9
    evidence = (
        f"allreduce {result['bytes'] / 2**20:g} MiB over {result['world']} ranks "
        f"({result['backend']}): busbw {busbw / 1e9:.2f} GB/s; the spec's network: "
        f"{spec_gbps:g} Gb/s = {promised / 1e9:.2f} GB/s"
    )
    if len(result["hosts"]) < 2:
        return info("collective probe", evidence + " (one host: the network is not crossed)")
    if busbw < _SLOW_SHARE * promised:
        return warning(
            "collective probe",
            evidence,
            "check NCCL_DEBUG=INFO for 'Using network "
            "Socket' vs IB, NCCL_SOCKET_IFNAME / NCCL_IB_HCA, and the ports' rate",
        )
    return ok("collective probe", evidence)


def run_probe(spec: Any, master: str | None, world_size: int | None, spark: Any = None) -> Check:
    """Run :func:`allreduce_probe` on ``world_size`` ranks (default 2), one whole GPU each
    (simulated slots on the embedded cluster), through :func:`gpuspark.launch.run` in a training
    session; any launch error becomes a failed check."""
    spec_obj = resolve_spec(spec)
    target = master or spec_obj.spark.master
    gpus = 0 if target.startswith("local[") else 1
    try:
        result = run(
            allreduce_probe,
            num_processes=world_size or 2,
            gpus_per_process=gpus,
            spark=spark,
            spec=spec,
            master=master,
            timeout=300,
            metrics_port=0,
        )
    except GpusparkError as exc:
        return failure("collective probe", str(exc).splitlines()[0], exc.remedy or "")
    return probe_check(result, spec_obj.networks.compute.gbps)
