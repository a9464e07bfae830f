"""The planner's DDP buckets are the buckets ``gpuspark.train.prepare`` really all-reduces.

A real one-rank gloo group (in a child process): DDP rebuilds its buckets after the first
step in the order backward produced the gradients; the meter sees each bucket handed to the
hook. The planner must predict those sizes, or it hides communication that never overlaps
(an explicit 25 MiB cap made the 14.4 MB resnet3d one bucket, all of it after backward).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from gpuspark.plan.model import PlanRequest, _buckets
from gpuspark.plan.workloads import Workload

_SCRIPT = textwrap.dedent(
    """
    import json, os, socket
    import torch
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    torch.set_num_threads(1)
    from gpuspark.train import ddp
    out = {}
    for cap in (None, 1.5):
        torch.manual_seed(0)
        net = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(3)],
                                  torch.nn.Linear(512, 2))
        model = ddp.prepare(net, bucket_cap_mb=cap)
        meter = ddp.comm_meter(model)
        seen = []
        launch = meter.on_launch
        meter.on_launch = lambda n, launch=launch: (seen.append(n), launch(n))
        for _ in range(3):
            seen.clear()
            meter.begin_step()
            model(torch.randn(4, 512)).sum().backward()
            meter.end_step()
        out[str(cap)] = seen
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def real_buckets() -> dict[str, list[int]]:
    res = subprocess.run([sys.executable, "-c", _SCRIPT],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _planned(bucket_mb: float | None) -> list[int]:
    shapes = ((512, 512), (512,)) * 3 + ((2, 512), (2,))
    req = PlanRequest(Workload("mlp", shapes, 1.0), global_batch=8, gpus=2, bucket_mb=bucket_mb)
    return _buckets(req, "gloo")


def test_default_buckets_match_ddp(real_buckets: dict[str, list[int]]) -> None:
    # backward order: bias 2, weight 2x512, then per layer bias 512 + weight 512x512 (float32):
    # the first bucket closes at 1 MiB with the third layer's weight, the rest fit in 25 MiB
    assert _planned(None) == real_buckets["None"] == [1_054_728, 2_101_248]


def test_an_explicit_cap_applies_to_the_first_bucket_too(
    real_buckets: dict[str, list[int]],
) -> None:
    # 1.5 MiB for the first too: it closes with the second layer's weight
    assert _planned(1.5) == real_buckets["1.5"] == [2_105_352, 1_050_624]
