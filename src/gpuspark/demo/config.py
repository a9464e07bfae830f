"""Sizes of the flagship demo (:class:`DemoConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DemoConfig"]


@dataclass
class DemoConfig:
    """Demo sizes; the defaults are what ``gpuspark demo`` runs."""

    studies: int = 200
    epochs: int = 12
    out: str = "gpuspark-demo"
    seed: int = 0
    image_size: int = 64
    """In-plane pixels of the synthetic DICOM slices."""
    volume: int = 32
    """Prepared volumes are resampled to ``volume``^3 voxels."""
    depth: int = 10
    width: float = 0.25
    """ResNet ``widen_factor``: 0.25 gives 16/32/64/128 channels."""
    stem_stride: int = 2
    """Stride of the first convolution (``conv1_t_stride``)."""
    window: tuple[float, float] = (100.0, 100.0)
    """Training window (level, width) in HU: lesions (+60 HU over 40 HU soft tissue) at 0.5,
    soft tissue and liver near 0."""
    batch_size: int = 8
    lr: float = 2e-3
    compression: str = "powersgd"
    powersgd_rank: int = 2
    powersgd_start_iter: int = 10
    threads: int = 1
    """torch threads per rank (2 ranks on 2 cores)."""
    spec: str | None = None
    """Cluster spec file whose shape the embedded cluster takes (default: the built-in one)."""
    workers: int | None = None
    """Override of the spec's Spark workers."""
    cores: int | None = None
    """Override of the task slots each Spark worker offers (the task GPU amount follows).
    Default with the built-in spec: 2, one whole GPU slot per data task. Measured on 2 CPU
    cores, the demo's DICOM prep took 17.8 s with 2 slots per worker and 22.2 s with the
    built-in spec's 4 (more Python workers than cores); with ``spec`` set: the spec's shape."""

    def worker_cores(self) -> int | None:
        """The task slots per worker the demo's cluster is started with (``None``: spec's)."""
        if self.cores is not None or self.spec is not None:
            return self.cores
        return 2
