"""Which values the planner accepts, checked before anything is computed.

A value without meaning (0 GPUs, an efficiency above 1, a batch that does not split over the
GPUs, NaN) is refused with one :class:`~gpuspark.errors.PlanError` that names the option, the
value and what is allowed, as :class:`~gpuspark.train.recipes.RecipeConfig` does for
``gpuspark train``. Ranges are data (:data:`PLAN_RANGES`); combinations that need the cluster
spec, the calibration or the workload are :func:`check_request`. The calibration's options are
checked in :mod:`gpuspark.plan.probe_checks`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuspark.errors import PlanError, did_you_mean
from gpuspark.plan.gpus import DTYPES, GPUS, find_gpu

if TYPE_CHECKING:
    from gpuspark.plan.calibration import Calibration
    from gpuspark.plan.model import PlanRequest
    from gpuspark.spec import ClusterSpec

__all__ = [
    "BUILT_IN_SPEC",
    "COMPRESSIONS",
    "FINITE",
    "MAX_COUNT",
    "MAX_GPUS",
    "MAX_SWEEP",
    "PLAN_RANGES",
    "STRATEGIES",
    "Range",
    "check_choice",
    "check_cluster",
    "check_request",
    "check_sweep",
    "check_values",
    "parse_compression",
    "world",
]

MAX_COUNT = 2**53
"""Largest count (samples, parameters) the planner takes: the largest whole number a float
holds exactly; the plan's arithmetic is in floats."""
MAX_GPUS = 1_000_000
"""Largest world the planner takes: a million GPUs, more than any cluster holds."""
MAX_SWEEP = 1024
"""Most node counts one ``--sweep`` plans."""
MAX_FLOPS = 1e24
"""Largest ``--flops-per-sample``: a million times a trillion-parameter model's forward and
backward over a million tokens (6 x 1e12 x 1e6 = 6e18)."""
FINITE = sys.float_info.max
"""``hi`` of a :class:`Range` of any finite number."""
STRATEGIES = ("ddp", "fsdp")
COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")


@dataclass(frozen=True)
class Range:
    """The values an option takes: ``lo`` to ``hi`` (``lo`` excluded when ``lo_open``), whole
    numbers only when ``whole``; NaN never, infinity only when ``hi`` is infinite, and never a
    whole number too large for a float where the planner computes with floats."""

    option: str
    lo: float
    hi: float
    lo_open: bool = False
    whole: bool = False

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is in the range."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.whole and not isinstance(value, int):
            return False
        if not self.whole and abs(value) > FINITE:  # an int no float holds, or infinity
            return math.isinf(self.hi) and value == math.inf
        if value != value:  # NaN
            return False
        above = value > self.lo if self.lo_open else value >= self.lo
        return above and value <= self.hi

    def describe(self) -> str:
        """``a whole number from 1 to 1,000,000``, ``a number > 0 and <= 1``..."""
        kind = "a whole number" if self.whole else "a number"
        if self.whole and not self.lo_open and math.isfinite(self.hi):
            return f"{kind} from {_num(self.lo)} to {_num(self.hi)}"
        low = f"{'>' if self.lo_open else '>='} {_num(self.lo)}"
        if self.hi == FINITE:
            return f"a finite number {low}"
        if math.isinf(self.hi):
            return f"{kind} {low} (inf allowed)" if not self.whole else f"{kind} {low}"
        return f"{kind} {low} and <= {_num(self.hi)}"

    def check(self, value: Any, remedy: str | None = None) -> None:
        """Raise :class:`PlanError` naming the option, ``value`` and the range."""
        if not self.holds(value):
            raise PlanError(
                f"{self.option} {value!r} is out of range: it must be {self.describe()}",
                remedy=remedy,
            )


def _num(x: float) -> str:
    if isinstance(x, float) and not x.is_integer():
        return f"{x:g}"
    return f"{int(x):,}" if abs(x) < 1e16 else f"{x:g}"


PLAN_RANGES: dict[str, Range] = {
    "global_batch": Range("--global-batch", 1, MAX_COUNT, whole=True),
    "nodes": Range("--nodes", 1, MAX_GPUS, whole=True),
    "gpus": Range("--gpus", 1, MAX_GPUS, whole=True),
    "powersgd_rank": Range("--compression powersgd:R", 1, MAX_COUNT, whole=True),
    "efficiency": Range("--efficiency", 0, 1, lo_open=True),
    "epochs": Range("--epochs", 0, 1e6, lo_open=True),
    "samples": Range("--samples", 1, MAX_COUNT, whole=True),
    "bucket_mb": Range("bucket_mb", 0, 1e6, lo_open=True),
    "decode_per_core": Range("--decode-per-core", 0, math.inf, lo_open=True),
    "params": Range("--params", 1, MAX_COUNT, whole=True),
    "flops_per_sample": Range("--flops-per-sample", 0, MAX_FLOPS, lo_open=True),
}
""":class:`~gpuspark.plan.PlanRequest` fields (and ``--params``/``--flops-per-sample``) and
their ranges; ``None`` means "not given" and is not checked."""


def check_values(**values: Any) -> None:
    """Refuse a value out of its :data:`PLAN_RANGES` range, or an unknown strategy, compression
    or dtype; ``values`` are any of :class:`~gpuspark.plan.PlanRequest`'s fields (not the
    workload). Needs nothing else, so the CLI calls it before any work."""
    for name, value in values.items():
        rule = PLAN_RANGES.get(name)
        if rule is not None and value is not None:
            rule.check(value)
    check_choice("--strategy", values.get("strategy"), STRATEGIES)
    check_choice("--dtype", values.get("dtype"), DTYPES)
    compression = values.get("compression")
    if compression is not None:
        parse_compression(compression)
        if compression != "none" and values.get("strategy", "ddp") != "ddp":
            raise PlanError(
                f"--compression {compression} is a DDP communication hook; "
                f"--strategy {values['strategy']} has none",
                remedy="drop --compression, or use --strategy ddp; `gpuspark train` refuses it too",
            )


def parse_compression(text: str) -> tuple[str, int]:
    """``none|fp16|bf16|powersgd[:R]`` -> ``(kind, rank)``; bad text raises."""
    kind, colon, rank_text = text.lower().partition(":")
    if kind not in COMPRESSIONS or (colon and kind != "powersgd"):
        raise PlanError(
            f"--compression {text!r} is unknown{did_you_mean(kind, COMPRESSIONS)}",
            remedy="use none, fp16, bf16 or powersgd:R (R = rank, e.g. powersgd:2)",
        )
    if not colon:
        return kind, 2
    rank = int(rank_text) if rank_text.isdigit() else 0
    rule = PLAN_RANGES["powersgd_rank"]
    if not rule.holds(rank):
        raise PlanError(
            f"--compression {text!r}: the PowerSGD rank R must be {rule.describe()}",
            remedy="e.g. powersgd:2",
        )
    return kind, rank


def check_choice(option: str, value: Any, choices: Sequence[Any], what: str = "is unknown") -> None:
    """Refuse ``value`` (``None``: not given) unless it is one of ``choices``."""
    if value is not None and value not in choices:
        hint = did_you_mean(value, [str(c) for c in choices]) if isinstance(value, str) else ""
        raise PlanError(
            f"{option} {value!r} {what}{hint}",
            remedy="use one of: " + ", ".join(map(str, choices)),
        )


def world(nodes: int | None, gpus: int | None, gpus_per_node: int) -> tuple[int, int]:
    """``(nodes, GPUs per node)`` of ``--nodes``/``--gpus`` on nodes of ``gpus_per_node``
    GPUs: ``--gpus`` up to one node, or whole nodes; ``--nodes`` whole nodes; both: ``gpus /
    nodes`` GPUs on each node. A split that leaves a GPU out or overfills a node is refused."""
    g = gpus_per_node
    if gpus is None:
        n = nodes if nodes is not None else 1
        if n * g > MAX_GPUS:
            raise PlanError(
                f"--nodes {n} x {g} GPUs per node is more than {MAX_GPUS:,} GPUs",
                remedy="plan fewer nodes",
            )
        return n, g
    if nodes is None:
        if gpus <= g:
            return 1, gpus
        if gpus % g:
            raise PlanError(
                f"--gpus {gpus} is more than one node holds ({g}) and not whole nodes",
                remedy=f"use a multiple of {g}, or give --nodes N too: {gpus}/N GPUs on each",
            )
        return gpus // g, g
    if gpus % nodes or gpus // nodes > g:
        raise PlanError(
            f"--gpus {gpus} on --nodes {nodes} is not a whole number of GPUs per node from 1 "
            f"to {g}, what a node of the spec holds",
            remedy=f"give --gpus as a multiple of --nodes, at most {nodes * g}",
        )
    return nodes, gpus // nodes


def check_cluster(
    spec: ClusterSpec,
    calibration: Calibration | None,
    global_batch: int,
    nodes: int | None = None,
    gpus: int | None = None,
    efficiency: float | None = None,
) -> None:
    """Refuse options that do not fit the spec's nodes or the calibration: a world that does
    not split into nodes, a batch that does not split evenly over the GPUs, a GPU model the
    table lacks (without a calibrated compute), an efficiency the calibration replaces."""
    group = spec.nodes[0]
    n, per_node = world(nodes, gpus, group.gpus_per_node)
    total = n * per_node
    if global_batch % total:
        lo = max(total, global_batch - global_batch % total)
        raise PlanError(
            f"--global-batch {global_batch} does not split evenly over {total} GPUs "
            f"({global_batch / total:g} samples each)",
            remedy=f"use a multiple of {total}, e.g. {lo} or {lo + total}",
        )
    probe = calibration.compute if calibration is not None else None
    if probe is None:
        _check_gpu(spec)
    elif efficiency is not None:
        raise PlanError(
            f"--efficiency {efficiency} would be ignored: the calibration measured compute",
            remedy="drop --efficiency, or the calibration",
        )


BUILT_IN_SPEC = ("embedded", "any")
"""Name and ``gpu_model`` of the built-in spec (:func:`gpuspark.spec.default_spec`, used
without ``--spec``): the embedded cluster, whose GPU slots have no model to plan for."""


def _check_gpu(spec: ClusterSpec) -> None:
    """The spec's GPU model is in the planner's table; else one line saying what to pass
    instead (a spec that names a known model, or a calibration that measured compute)."""
    model = spec.nodes[0].gpu_model
    try:
        find_gpu(model)
    except PlanError:
        known = [g.name for g in GPUS]
        calibrated = "or --calibration FILE written by `gpuspark plan calibrate` on the cluster"
        if (spec.name, model) == BUILT_IN_SPEC:
            raise PlanError(
                "plan needs the GPUs' model, and the built-in spec (no --spec given) has none: "
                f"its gpu_model is {model!r}, the embedded cluster's GPU slots",
                remedy=f"pass --spec FILE whose gpu_model is one of {', '.join(known)} "
                f"(`gpuspark init cluster.toml` writes one), {calibrated}",
            ) from None
        raise PlanError(
            f"GPU model {model!r} of spec {spec.name!r} is not in the planner's table",
            remedy=f"set gpu_model to one of {', '.join(known)}, {calibrated}",
        ) from None


def check_request(
    req: PlanRequest, spec: ClusterSpec, calibration: Calibration | None = None
) -> None:
    """:func:`check_cluster`, and options the workload would ignore or cannot serve."""
    check_cluster(spec, calibration, req.global_batch, req.nodes, req.gpus, req.efficiency)
    _check_epoch(req)
    _check_workload(req)


def _check_epoch(req: PlanRequest) -> None:
    epoch = req.samples or req.workload.samples_per_epoch
    if req.samples is not None and req.epochs is None:
        raise PlanError(
            f"--samples {req.samples} would be ignored: it sizes an epoch for --epochs",
            remedy="add --epochs N, or drop --samples",
        )
    if req.epochs is not None and epoch is None:
        raise PlanError(
            f"--epochs {req.epochs:g}: the size of an epoch of {req.workload.name} is unknown",
            remedy="add --samples N, the samples of one epoch",
        )
    if req.epochs is not None and epoch is not None and epoch < req.global_batch:
        raise PlanError(
            f"an epoch of {epoch:,} samples is less than one step of --global-batch "
            f"{req.global_batch:,}",
            remedy="use a smaller --global-batch, or a larger --samples",
        )


def _check_workload(req: PlanRequest) -> None:
    work = req.workload
    if req.decode_per_core is not None and work.decode_format == "none":
        raise PlanError(
            f"--decode-per-core {req.decode_per_core:g} would be ignored: {work.name} has no "
            "input to decode",
            remedy="drop --decode-per-core",
        )
    if req.compression == "powersgd" and len(work.shapes) == 1:
        raise PlanError(
            "PowerSGD bytes depend on the weight shapes, which --params alone does not give",
            remedy="use --model NAME, or another --compression",
        )


def check_sweep(counts: Sequence[int], gpus_per_node: int) -> None:
    """Refuse a sweep with too many node counts, one counted twice, or a world too large."""
    if len(counts) > MAX_SWEEP:
        raise PlanError(
            f"--sweep has {len(counts):,} node counts; at most {MAX_SWEEP:,}",
            remedy="sweep a narrower range, or list the counts: nodes=1,2,4,8",
        )
    if len(set(counts)) != len(counts):
        raise PlanError("--sweep names a node count twice", remedy="list each count once")
    top = MAX_GPUS // gpus_per_node
    rule = Range("--sweep nodes", 1, top, whole=True)
    for count in counts:
        rule.check(count, remedy=f"{gpus_per_node} GPUs per node, at most {MAX_GPUS:,} GPUs")
