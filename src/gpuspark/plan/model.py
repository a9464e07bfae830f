"""The performance model: a cluster spec + a workload -> a :class:`Plan` for one training step.

Per step and GPU: compute (FLOPs / (peak x efficiency), or the calibrated seconds per
sample), gradient all-reduce in DDP buckets (hierarchical NVLink + network ring cost, or the
calibrated sweep) of which only the part not hidden behind backward counts, the optimizer
(calibrated, else 0), and the input pipeline (decode capacity of the node's cores against what
its GPUs consume; the loader prefetches, so only a shortfall is waited for).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from gpuspark.errors import PlanError
from gpuspark.plan import formulas as f
from gpuspark.plan.checks import (
    COMPRESSIONS,
    check_request,
    check_sweep,
    check_values,
    parse_compression,
    world,
)
from gpuspark.plan.gpus import find_gpu
from gpuspark.plan.workloads import Workload

if TYPE_CHECKING:
    from gpuspark.plan.calibration import Calibration
    from gpuspark.spec import ClusterSpec

__all__ = [
    "COMPRESSIONS",
    "DEFAULTS",
    "Plan",
    "PlanRequest",
    "bus_bandwidths",
    "parse_compression",
    "predict",
    "sweep",
]

DEFAULTS: dict[str, float] = {
    "efficiency": 0.30,
    "nvlink_efficiency": 0.80,
    "network_efficiency": 0.90,
    "nvlink_latency_us": 2.0,
    "pcie_gbytes_per_s": 24.0,
    "backward_share": 2 / 3,
    "decode_jpeg_per_core": 230.0,
    "decode_volume_per_core": 2000.0,
}
"""Figures used when neither the workload's reference nor a calibration gives a value.
``nvlink_efficiency``: NCCL reaches about 80% of NVLink line rate ("protocol overhead
~20%", https://github.com/NVIDIA/nccl-tests/issues/212). Decode rates: what
:func:`gpuspark.plan.decode_probe` measured on the development machine (one core of a
2-vCPU VM: 500x375 JPEG -> float CHW, 230/s under load, 460/s idle: the lower is used; a 64^3
uint8 volume about 15,000/s, taken down to 2,000/s for larger volumes). The other figures
are round assumptions, not measurements: calibrate to replace them."""


@dataclass(frozen=True)
class PlanRequest:
    """What to plan: a workload, a global batch and how many GPUs, and the DDP options."""

    workload: Workload
    global_batch: int
    nodes: int | None = None
    gpus: int | None = None
    compression: str = "none"
    powersgd_rank: int = 2
    strategy: str = "ddp"
    dtype: str = "bf16"
    efficiency: float | None = None
    """Share of the GPU's peak the model reaches (default: from the workload's reference)."""
    epochs: float | None = None
    samples: int | None = None
    """Samples per epoch (default: the workload's, e.g. ImageNet's 1,281,167)."""
    bucket_mb: float | None = None
    """DDP's bucket cap in MiB, as given to ``gpuspark.train.prepare(bucket_cap_mb=)``;
    ``None``: DDP's default (a 1 MiB first bucket, then 25 MiB)."""
    decode_per_core: float | None = None
    """Samples/s one CPU core decodes (overrides calibration and defaults; ``inf``: decoding
    happens on the GPUs, e.g. with DALI)."""

    def __post_init__(self) -> None:
        values = {k.name: getattr(self, k.name) for k in fields(self)}
        del values["workload"]
        check_values(**values)


@dataclass
class Plan:
    """The predicted training step (seconds are per optimizer step)."""

    model: str
    nodes: int
    gpus: int
    per_gpu_batch: float
    compute_s: float
    comm_s: float
    """All communication of the step (overlapped or not)."""
    exposed_comm_s: float
    optimizer_s: float
    data_s: float
    """Time waiting for input: decode shortfall behind the loader's prefetch."""
    decode_s: float
    """Time the node's cores need to decode one step's samples."""
    step_s: float
    comm_share: float
    """``exposed_comm_s / step_s``."""
    samples_per_s: float
    scaling_efficiency: float
    """Throughput vs ``nodes`` x one node's (within one node: vs ``gpus`` x one GPU's)."""
    bytes_raw: int
    bytes_sent: int
    buckets: int
    time_to_train_s: float | None
    bottleneck: str
    input_bound: bool
    sources: dict[str, str] = field(default_factory=dict)
    """Where each figure came from (``spec``, ``calibration``, ``reference``, ``assumed``)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class _Hardware:
    gpus_per_node: int
    cpu_cores: int
    intra_busbw: float
    inter_busbw: float
    intra_latency_s: float
    inter_latency_s: float


def _hardware(spec: ClusterSpec) -> _Hardware:
    group = spec.nodes[0]
    net = spec.networks.compute
    nvlink = group.nvlink_gbytes_per_s
    # NVIDIA quotes NVLink bidirectional; a ring sends one way at a time.
    intra = DEFAULTS["pcie_gbytes_per_s"]
    if nvlink:
        intra = nvlink / 2 * DEFAULTS["nvlink_efficiency"]
    return _Hardware(
        gpus_per_node=group.gpus_per_node,
        cpu_cores=group.cpu_cores,
        intra_busbw=intra * 1e9,
        inter_busbw=net.gbps / 8 * DEFAULTS["network_efficiency"] * 1e9,
        intra_latency_s=DEFAULTS["nvlink_latency_us"] * 1e-6,
        inter_latency_s=net.latency_us * 1e-6,
    )


def bus_bandwidths(spec: ClusterSpec) -> dict[str, float]:
    """The bus bandwidths (bytes/s) the planner uses for ``spec``'s first node group: inside a
    node (``nvlink``, or PCIe without NVLink) and across nodes (``network``)."""
    hw = _hardware(spec)
    return {"nvlink": hw.intra_busbw, "network": hw.inter_busbw}


def _world(req: PlanRequest, hw: _Hardware) -> tuple[int, int, int]:
    """``(nodes, gpus, GPUs per node)`` of the request."""
    nodes, per_node = world(req.nodes, req.gpus, hw.gpus_per_node)
    return nodes, nodes * per_node, per_node


class _Comm:
    """All-reduce seconds for the plan's world: calibrated sweep or spec formulas."""

    def __init__(self, hw: _Hardware, nodes: int, per_node: int, cal: Calibration | None) -> None:
        self.hw, self.nodes, self.per_node, self.gpus = hw, nodes, per_node, nodes * per_node
        self.sweep = cal.allreduce if cal is not None else None

    @property
    def source(self) -> str:
        return "calibration" if self.sweep is not None else "spec"

    def allreduce_s(self, nbytes: float) -> float:
        if self.gpus <= 1 or nbytes <= 0:
            return 0.0
        if self.sweep is not None:
            if self.sweep.world == self.gpus:
                return self.sweep.time_s(nbytes)
            return f.ring_allreduce_s(nbytes, self.gpus, self.sweep.busbw, self.sweep.latency_s)
        return f.hierarchical_allreduce_s(
            nbytes,
            self.per_node,
            self.nodes,
            self.hw.intra_busbw,
            self.hw.inter_busbw,
            self.hw.intra_latency_s,
            self.hw.inter_latency_s,
        )

    def flat_busbw(self) -> tuple[float, float]:
        """(busbw, latency) of a flat ring over all GPUs (the slowest link)."""
        if self.sweep is not None:
            return self.sweep.busbw, self.sweep.latency_s
        if self.nodes > 1:
            bw = min(self.hw.intra_busbw, self.hw.inter_busbw)
            return bw, self.hw.inter_latency_s
        return self.hw.intra_busbw, self.hw.intra_latency_s


def _compute(req: PlanRequest, spec: ClusterSpec, cal: Calibration | None) -> tuple[float, str]:
    """Seconds of forward + backward per sample on one GPU, and where it came from."""
    probe = cal.compute if cal is not None else None
    if probe is not None:
        # The probe ran one network; scale by FLOPs if the plan's workload differs.
        return probe.sample_s * req.workload.flops_per_sample / probe.flops_per_sample, (
            "calibration"
        )
    gpu = find_gpu(spec.nodes[0].gpu_model)
    eff, source = req.efficiency, "option"
    ref = req.workload.reference
    if eff is None and ref is not None:
        ref_peak = find_gpu(ref.gpu).peak_flops(ref.dtype)
        eff = ref.samples_per_s * req.workload.flops_per_sample / ref_peak
        source = "reference"
    if eff is None:
        eff, source = DEFAULTS["efficiency"], "assumed"
    if not 0 < eff <= 1:  # a reference above the GPU's peak: the table is wrong
        raise PlanError(f"the efficiency of {req.workload.name} must be in (0, 1], got {eff}")
    return req.workload.flops_per_sample / (gpu.peak_flops(req.dtype) * eff), source


def _buckets(req: PlanRequest, backend: str) -> list[int]:
    grads = [math.prod(s) * 4 for s in reversed(req.workload.shapes)]
    if req.compression == "powersgd" and backend == "gloo":
        # gpuspark.train.ddp.prepare puts the whole model in one bucket on gloo.
        return [sum(grads)]
    if req.bucket_mb is None:
        return f.bucket_sizes(grads, f.DDP_BUCKET_BYTES)
    # An explicit cap applies to the first bucket too (torch 2.13's BucketCapacityConfig).
    cap = req.bucket_mb * 2**20
    return f.bucket_sizes(grads, cap, first_bytes=cap)


def _powersgd_extra_s(req: PlanRequest, flops_per_s: float) -> float:
    """Compute of PowerSGD per step: P = M Q and Q = M^T P (2mnr FLOPs each), and the
    orthogonalisation of P (about 2 m r^2), at the rank's measured FLOP/s."""
    flops = 0.0
    for shape in req.workload.shapes:
        _, _, compressed = f.powersgd_elements(shape, req.powersgd_rank)
        if compressed:
            m = shape[0]
            n = math.prod(shape) // m
            r = min(m, n, req.powersgd_rank)
            flops += 4 * m * n * r + 2 * m * r * r
    return flops / flops_per_s


def _hook_s(req: PlanRequest, cal: Calibration | None) -> float:
    """The compression's own work per step: calibrated on a one-rank group, else PowerSGD's
    matrix products at the probe's FLOP/s (0 without a probe: negligible on GPUs)."""
    probe = cal.compute if cal is not None else None
    if probe is None:
        return 0.0
    if req.compression in probe.hook_s:
        return probe.hook_s[req.compression]
    if req.compression == "powersgd":
        return _powersgd_extra_s(req, probe.flops_per_s)
    return 0.0


def _comm(
    req: PlanRequest,
    comm: _Comm,
    backend: str,
    compute_s: float,
    backward_share: float,
    cal: Calibration | None,
) -> tuple[float, float, int, int, int]:
    """(total comm s, exposed s, bytes raw, bytes sent, buckets) of one step."""
    backward_s = compute_s * backward_share
    shapes = req.workload.shapes
    raw = f.compressed_bytes(shapes, "none")
    sent = f.compressed_bytes(shapes, req.compression, req.powersgd_rank)
    if comm.gpus <= 1:
        return 0.0, 0.0, raw, 0, 0
    if req.strategy == "fsdp":
        bw, lat = comm.flat_busbw()
        total = f.fsdp_comm_s(sent, comm.gpus, bw, lat)
        # FSDP prefetches the next all-gather during forward and backward: communication
        # hides behind all of the compute, only the excess shows.
        return total, max(0.0, total - compute_s), raw, sent, 1
    buckets = _buckets(req, backend)
    ratio = sent / raw
    if req.compression == "powersgd":
        # Three all-reduces per bucket (uncompressed vectors, P, Q) plus the factorisation.
        secs = [3 * comm.allreduce_s(b * ratio / 3) for b in buckets]
        secs[-1] += _hook_s(req, cal)
    else:
        secs = [comm.allreduce_s(b * ratio) for b in buckets]
        if req.compression != "none":
            secs[-1] += _hook_s(req, cal)
    return sum(secs), f.exposed_comm_s(secs, backward_s), raw, sent, len(buckets)


def _decode_rate(req: PlanRequest, cal: Calibration | None) -> tuple[float | None, str]:
    fmt = req.workload.decode_format
    if fmt == "none":
        return None, "none"
    if req.decode_per_core is not None:
        return req.decode_per_core, "option"
    if cal is not None and fmt in cal.decode:
        return cal.decode[fmt], "calibration"
    return DEFAULTS[f"decode_{fmt}_per_core"], "default"


def _one(spec: ClusterSpec, req: PlanRequest, cal: Calibration | None) -> Plan:
    hw = _hardware(spec)
    nodes, gpus, per_node = _world(req, hw)
    per_gpu = req.global_batch / gpus
    sample_s, compute_src = _compute(req, spec, cal)
    compute_s = per_gpu * sample_s
    probe = cal.compute if cal is not None else None
    back = probe.backward_share if probe is not None else DEFAULTS["backward_share"]
    backend = (cal.allreduce.backend if cal and cal.allreduce else None) or "nccl"
    comm = _Comm(hw, nodes, per_node, cal)
    total, exposed, raw, sent, nb = _comm(req, comm, backend, compute_s, back, cal)
    if probe is not None and gpus > 1:
        # The end-of-backward all-reduce costs more than the sweep says: waiting for the
        # slowest rank, and (busy CPUs) rescheduling a blocked rank. Calibrated only.
        exposed += probe.straggler_s
    opt_s = probe.optimizer_s if probe is not None else 0.0
    busy = compute_s + exposed + opt_s
    rate, decode_src = _decode_rate(req, cal)
    node_samples = per_gpu * per_node
    decode_s = node_samples / (hw.cpu_cores * rate) if rate else 0.0
    data_s = max(0.0, decode_s - busy)
    step = busy + data_s
    samples_s = req.global_batch / step
    epoch = req.samples or req.workload.samples_per_epoch
    ttt = req.epochs * epoch / samples_s if req.epochs and epoch else None
    parts = {"compute": compute_s, "communication": exposed, "input pipeline": data_s}
    parts["optimizer"] = opt_s
    return Plan(
        model=req.workload.name,
        nodes=nodes,
        gpus=gpus,
        per_gpu_batch=per_gpu,
        compute_s=compute_s,
        comm_s=total,
        exposed_comm_s=exposed,
        optimizer_s=opt_s,
        data_s=data_s,
        decode_s=decode_s,
        step_s=step,
        comm_share=exposed / step,
        samples_per_s=samples_s,
        scaling_efficiency=1.0,
        bytes_raw=raw,
        bytes_sent=sent,
        buckets=nb,
        time_to_train_s=ttt,
        bottleneck="input pipeline" if decode_s > busy else max(parts, key=lambda k: parts[k]),
        input_bound=decode_s > busy,
        sources={"compute": compute_src, "comm": comm.source, "decode": decode_src},
    )


def predict(spec: ClusterSpec, req: PlanRequest, calibration: Calibration | None = None) -> Plan:
    """The plan of ``req`` on ``spec``'s first node group (calibrated figures replace the
    spec's and the defaults where given). Scaling efficiency compares with one node at the
    same per-GPU batch (within one node: with one GPU)."""
    check_request(req, spec, calibration)
    plan = _one(spec, req, calibration)
    base_gpus = plan.gpus // plan.nodes if plan.nodes > 1 else 1
    if plan.gpus > base_gpus:
        batch = max(1, round(plan.per_gpu_batch * base_gpus))
        base_req = replace(req, nodes=None, gpus=base_gpus, global_batch=batch)
        base = _one(spec, base_req, calibration)
        per_base = base.samples_per_s / base.per_gpu_batch * plan.per_gpu_batch
        plan.scaling_efficiency = plan.samples_per_s / (per_base * plan.gpus / base_gpus)
    return plan


def sweep(
    spec: ClusterSpec,
    req: PlanRequest,
    nodes: Sequence[int],
    calibration: Calibration | None = None,
) -> list[Plan]:
    """One plan per node count, the per-GPU batch of ``req`` kept (weak scaling)."""
    gpn = _hardware(spec).gpus_per_node
    check_sweep(nodes, gpn)
    first = predict(spec, req, calibration)
    per_gpu = first.per_gpu_batch
    out = []
    for k in nodes:
        batch = max(1, round(per_gpu * k * gpn))
        out.append(predict(spec, replace(req, nodes=k, gpus=None, global_batch=batch), calibration))
    return out
