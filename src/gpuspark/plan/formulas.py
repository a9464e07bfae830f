"""The cost formulas of the planner: pure functions of numbers, pinned by unit tests.

- Ring all-reduce of ``B`` bytes over ``n`` ranks: ``2(n-1)/n * B / busbw + 2(n-1) * latency``
  (nccl-tests' bus bandwidth is defined so that this holds: busbw = algbw * 2(n-1)/n,
  https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md).
- Hierarchical all-reduce (``g`` GPUs per node, ``N`` nodes): reduce-scatter inside the node
  over NVLink, all-reduce of each GPU's ``B/g`` shard across nodes (the ``g`` shards share the
  node's link), all-gather inside the node. The byte terms add up to
  ``2(g-1)/g * B / nvlink_busbw + 2(N-1)/N * B / net_busbw``.
- DDP buckets: DDP all-reduces gradients in buckets as backward produces them (by default
  the first bucket 1 MiB, then 25 MiB; a ``bucket_cap_mb`` given to DDP caps every bucket,
  the first too); only the last bucket starts after backward ends.
  Exposed time = ``max(t_last_bucket, t_all_buckets - t_backward)``.
- Compression: fp16/bf16 halve every byte; PowerSGD rank ``r`` sends ``r(m+n)`` values per
  ``m x n`` matrix (a conv weight viewed as ``[out, in*k*k]``), like
  ``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook``: rank capped at
  ``min(m, n)``, a matrix compressed only when ``2 * r(m+n) < m*n`` (its
  ``min_compression_rate=2``), vectors sent as they are.
- FSDP: per step a reduce-scatter of gradients plus an all-gather of parameters in forward and
  another in backward, each ``(n-1)/n * B`` per rank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "DDP_BUCKET_BYTES",
    "DDP_FIRST_BUCKET_BYTES",
    "bucket_sizes",
    "compressed_bytes",
    "exposed_comm_s",
    "fsdp_comm_s",
    "hierarchical_allreduce_s",
    "powersgd_elements",
    "ring_allreduce_s",
]

DDP_FIRST_BUCKET_BYTES = 1024 * 1024
"""``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``: DDP's first bucket is 1 MiB by default."""
DDP_BUCKET_BYTES = 25 * 1024 * 1024
"""DDP's default ``bucket_cap_mb`` (25 MiB) in bytes."""


def ring_allreduce_s(nbytes: float, ranks: int, busbw: float, latency_s: float) -> float:
    """Seconds of a ring all-reduce of ``nbytes`` over ``ranks`` at ``busbw`` bytes/s."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (ranks - 1) / ranks * nbytes / busbw + 2 * (ranks - 1) * latency_s


def hierarchical_allreduce_s(
    nbytes: float,
    gpus_per_node: int,
    nodes: int,
    intra_busbw: float,
    inter_busbw: float,
    intra_latency_s: float,
    inter_latency_s: float,
) -> float:
    """Seconds of an all-reduce inside each node (NVLink) then across nodes (network)."""
    inside = ring_allreduce_s(nbytes, gpus_per_node, intra_busbw, intra_latency_s)
    across = ring_allreduce_s(nbytes, nodes, inter_busbw, inter_latency_s)
    return inside + across


def fsdp_comm_s(nbytes: float, ranks: int, busbw: float, latency_s: float) -> float:
    """Seconds per step of FSDP's reduce-scatter + two all-gathers of ``nbytes`` each."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    one = (ranks - 1) / ranks * nbytes / busbw + (ranks - 1) * latency_s
    return 3 * one


def bucket_sizes(
    tensor_bytes: Sequence[int],
    cap_bytes: float,
    first_bytes: float = DDP_FIRST_BUCKET_BYTES,
) -> list[int]:
    """DDP's gradient buckets, in the order they are all-reduced.

    ``tensor_bytes`` are the gradients in the order backward produces them (about the reverse
    of ``model.parameters()``); a bucket closes once it holds at least its limit (1 MiB for
    the first, ``cap_bytes`` after), as ``_compute_bucket_assignment_by_size`` does.
    """
    buckets: list[int] = []
    current = 0
    for nbytes in tensor_bytes:
        current += int(nbytes)
        limit = first_bytes if not buckets else cap_bytes
        if current >= limit:
            buckets.append(current)
            current = 0
    if current:
        buckets.append(current)
    return buckets


def exposed_comm_s(bucket_seconds: Sequence[float], backward_s: float) -> float:
    """Communication not hidden behind backward: the last bucket can only start when backward
    ends; the others overlap it unless they take longer than backward in total."""
    if not bucket_seconds:
        return 0.0
    total = float(sum(bucket_seconds))
    return max(float(bucket_seconds[-1]), total - backward_s)


def powersgd_elements(shape: Sequence[int], rank: int) -> tuple[int, int, bool]:
    """``(elements sent, elements raw, compressed?)`` for one gradient under PowerSGD."""
    raw = math.prod(shape) if shape else 1
    if len(shape) <= 1:
        return raw, raw, False
    m = int(shape[0])
    n = raw // m
    r = min(m, n, rank)
    low_rank = (m + n) * r
    if low_rank * 2 < m * n:
        return low_rank, raw, True
    return raw, raw, False


def compressed_bytes(
    shapes: Sequence[Sequence[int]], compression: str, rank: int = 2, elem_bytes: int = 4
) -> int:
    """Bytes handed to all-reduce per step for gradients of ``shapes`` after ``compression``
    (``none``, ``fp16``, ``bf16``, ``powersgd``)."""
    raw = sum(math.prod(s) if s else 1 for s in shapes) * elem_bytes
    if compression == "none":
        return raw
    if compression in ("fp16", "bf16"):
        return raw // elem_bytes * 2
    return sum(powersgd_elements(s, rank)[0] for s in shapes) * elem_bytes
