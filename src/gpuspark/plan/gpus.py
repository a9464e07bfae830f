"""GPU models the planner knows: dense peak FLOP/s per dtype, each row with its source.

Figures are NVIDIA's dense (no 2:4 sparsity) peaks. NVIDIA's H100/H200 product pages quote
tensor-core figures "with sparsity"; the dense figure is half of that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuspark.errors import PlanError, did_you_mean

__all__ = ["DTYPES", "GPUS", "GpuModel", "find_gpu"]

DTYPES = ("fp32", "tf32", "bf16", "fp16")
"""Compute dtypes a plan can use: fp32 on CUDA cores, the others on tensor cores."""


@dataclass(frozen=True)
class GpuModel:
    """One GPU model: dense peak TFLOP/s per dtype and where the figures come from."""

    name: str
    tflops: dict[str, float]
    """Dense peak TFLOP/s per dtype (``fp32``, ``tf32``, ``bf16``, ``fp16``)."""
    memory_gb: float
    nvlink_gbytes_per_s: float
    """NVLink per GPU, bidirectional total as NVIDIA quotes it (A100: 600)."""
    source: str
    patterns: tuple[str, ...]
    """Regular expressions matched against ``nvidia-smi`` names (case-insensitive)."""

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``."""
        if dtype not in self.tflops:
            raise PlanError(
                f"dtype {dtype!r} is unknown{did_you_mean(dtype, DTYPES)}",
                remedy="use one of: " + ", ".join(DTYPES),
            )
        return self.tflops[dtype] * 1e12


_A100_SRC = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (FP32 19.5, TF32 156, BF16/FP16 312 "
    "dense TFLOPS)"
)
_H100_SRC = (
    "https://www.nvidia.com/en-us/data-center/h100/ (SXM: FP32 67; TF32 989, BF16/FP16 1,979 "
    "with sparsity, half dense); dense table: https://glennklockwood.com/garden/processors/h100"
)
_H200_SRC = (
    "https://www.nvidia.com/en-us/data-center/h200/ (same compute as H100 SXM: FP32 67; TF32 989, "
    "BF16/FP16 1,979 TFLOPS with sparsity, half dense)"
)

GPUS: tuple[GpuModel, ...] = (
    GpuModel(
        "A100-SXM4-40GB",
        {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        40,
        600,
        _A100_SRC,
        (r"a100.*40", r"^a100$"),
    ),
    GpuModel(
        "A100-SXM4-80GB",
        {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        80,
        600,
        _A100_SRC,
        (r"a100.*80",),
    ),
    GpuModel(
        "H100-SXM5-80GB",
        {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
        80,
        900,
        _H100_SRC,
        (r"h100",),
    ),
    GpuModel(
        "H200-SXM-141GB",
        {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
        141,
        900,
        _H200_SRC,
        (r"h200",),
    ),
)


def find_gpu(name: str) -> GpuModel:
    """The table row for a GPU name as ``nvidia-smi`` or a spec writes it (``A100-SXM4-80GB``,
    ``NVIDIA H100 80GB HBM3``); an unknown name raises with the known ones."""
    text = name.strip().lower()
    for gpu in GPUS:
        if gpu.name.lower() == text or any(re.search(p, text) for p in gpu.patterns):
            return gpu
    names = [g.name for g in GPUS]
    raise PlanError(
        f"GPU model {name!r} is not in the planner's table{did_you_mean(name, names)}",
        remedy="use one of: " + ", ".join(names) + " (or calibrate on the cluster)",
    )
