"""A partition on namespace hosts: one host's link is cut (``ip link set <veth> down``) while
two ranks all-reduce; the launch ends within the ranks' collective timeout, not gloo's 30
minutes, with an error that names the host that became unreachable."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from pyspark import cloudpickle as spark_cloudpickle

from gpuspark.cli.main import main
from gpuspark.cluster.local import LocalCluster

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None,
        reason="--netns needs root and ip",
    ),
]

cloudpickle.register_pickle_by_value(sys.modules[__name__])
spark_cloudpickle.register_pickle_by_value(sys.modules[__name__])

COLLECTIVE_TIMEOUT_S = 20.0


def all_reduce_until_cut(marker_dir: str, timeout_s: float) -> int:
    """All-reduce forever with a collective timeout of ``timeout_s``; each rank drops a file
    in ``marker_dir`` once the collectives run."""
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    grads = torch.ones(1 << 16)
    steps = 0
    while True:
        dist.all_reduce(grads)
        steps += 1
        if steps == 5:
            Path(marker_dir, f"rank{dist.get_rank()}").write_text(str(steps))
        time.sleep(0.02)


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="issue 29 item 4 is open: measured 78 s from the cut to the error with a 20 s "
    "collective timeout (the driver's collect waits until the master drops the cut worker, "
    "spark.worker.timeout 60 s), and the error names rank 0's host, not the cut one",
)
def test_cut_link_ends_the_launch_within_the_collective_timeout(tmp_path: Path) -> None:
    from pyspark.sql import SparkSession

    from gpuspark import launch

    state = str(tmp_path / "state")
    up = ["cluster", "up", "--hosts", "2", "--netns", "--cores", "2", "--gpus", "1"]
    assert main([*up, "--memory", "2g", "--state-dir", state]) == 0
    outcome: dict[str, Any] = {}
    try:
        cluster = LocalCluster.running(state)
        assert cluster is not None and cluster.state is not None and cluster.state.netns
        cut = cluster.state.netns.hosts[1]
        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()
        spark = cluster.session(kind="training", **{"spark.app.name": "gpuspark-partition"})

        def run() -> None:
            try:
                launch.run(
                    all_reduce_until_cut,
                    str(tmp_path),
                    COLLECTIVE_TIMEOUT_S,
                    num_processes=2,
                    spark=spark,
                    timeout=600,
                )
            except BaseException as exc:
                outcome["error"] = exc
            outcome["ended"] = time.monotonic()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 240
        while len(list(tmp_path.glob("rank*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(list(tmp_path.glob("rank*"))) == 2, "the ranks never all-reduced"
        subprocess.run(["ip", "link", "set", cut.veth, "down"], check=True)
        cut_at = time.monotonic()
        thread.join(timeout=COLLECTIVE_TIMEOUT_S + 180)
        spark.stop()
    finally:
        assert main(["cluster", "down", "--state-dir", state]) == 0
    assert "ended" in outcome, "the launch did not end after the link was cut"
    took = outcome["ended"] - cut_at
    message = str(outcome.get("error"))
    print(f"link of {cut.address} cut: the launch ended after {took:.1f} s:\n{message}")
    assert took < COLLECTIVE_TIMEOUT_S + 30, message
    assert cut.address in message, message
