"""The compute probe's end-of-backward all-reduce size (hand-computed)."""

from __future__ import annotations

import pytest

from gpuspark.plan.calibrate import _tail_bytes


@pytest.mark.parametrize(
    ("compression", "expected"),
    [
        # backward order: bias 2, weight 2x1000, bias 1000, weight 1000x1000 (float32): one
        # bucket of 4,012,008 bytes (the first closes at 1 MiB, after the last tensor).
        ("none", 4_012_008),
        ("fp16", 2_006_004),
        # PowerSGD rank 2: 1000x1000 -> 2 x 2000 values; 2x1000 not worth it (2004 x 2 >
        # 2000); biases as they are: 7002 floats, in thirds.
        ("powersgd", 7002 * 4 // 3),
    ],
)
def test_tail_bytes(compression: str, expected: int) -> None:
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(1000, 1000), torch.nn.Linear(1000, 2))
    assert _tail_bytes(net, compression, 2) == expected
