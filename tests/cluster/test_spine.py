"""The spec drives every running job through one session path (real embedded clusters).

(The README's quickstart runs exactly as written in tests/test_readme_commands.py, with its
checks: 2 ranks, simulated slots, one driver log per Spark command, no wasted-resources warning.)

Each test runs the ``gpuspark`` command as a user would, in its own state directory, so the
clusters here are separate from the shared test cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

pytestmark = pytest.mark.spark

# Executors cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROOT = Path(__file__).resolve().parents[2]
WASTED = "will result in wasted resources"


def _ok(proc: subprocess.CompletedProcess) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert WASTED not in out
    return out


def _down(cli: Any, tmp_path: Path, state: Path) -> None:
    cli("cluster", "down", cwd=tmp_path, state=state, timeout=60)


def _rendezvous_probe(root: str, expected: int) -> Any:
    """A task body that waits until ``expected`` tasks run at once (or 60 s pass)."""

    def probe(index: int, _rows: Any) -> Any:
        from pyspark import TaskContext

        addresses = list(TaskContext.get().resources()["gpu"].addresses)
        Path(root, f"{index}").write_text(",".join(addresses))
        deadline = time.time() + 60
        while len(os.listdir(root)) < expected and time.time() < deadline:
            time.sleep(0.1)
        return [(index, addresses, len(os.listdir(root)))]

    return probe


def _gpu_of_each_rank(out_dir: str) -> None:
    Path(out_dir, os.environ["RANK"]).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", ""))


@pytest.mark.slow  # a fresh cluster end to end (about 50 s); units and the README cover it
def test_spec_shapes_the_cluster_data_tasks_share_gpus_ranks_get_whole_ones(
    tmp_path: Path, cli: Any
) -> None:
    from pyspark.sql import SparkSession

    from gpuspark.cluster.driver_log import driver_log_file
    from gpuspark.cluster.local import LocalCluster
    from gpuspark.launch import run

    active = SparkSession.getActiveSession()
    if active is not None:  # the shared test session: one SparkContext per process, and the
        active.stop()  # sessions below must be this cluster's (conftest rebuilds its own)
    state = tmp_path / "state"
    spec = ROOT / "examples" / "cluster.toml"
    try:
        _ok(cli("cluster", "up", "--spec", str(spec), cwd=tmp_path, state=state))
        status = json.loads(_ok(cli("cluster", "status", "--json", cwd=tmp_path, state=state)))
        shape = status["shape"]
        assert shape["spec_name"] == "dgx-a100"
        assert (shape["executor_gpus"], shape["task_gpu_amount"]) == (1, 0.25)
        assert (shape["executor_cores"], shape["executors_per_worker"]) == (4, 2)
        assert any("8 per node" in note for note in shape["notes"])
        cluster = LocalCluster.running(state)
        assert cluster is not None

        data = cluster.session(kind="data", app_name="spine-data")
        assert data.sparkContext.master == cluster.master_url
        try:
            slots = shape["task_slots"]
            probe = _rendezvous_probe(str(tmp_path / "probe"), slots)
            (tmp_path / "probe").mkdir()
            rdd = data.sparkContext.parallelize(range(slots), slots)
            got = rdd.mapPartitionsWithIndex(probe).collect()
        finally:
            data.stop()
        assert all(seen == slots for _, _, seen in got), "data tasks did not all run at once"
        per_gpu: dict[str, int] = {}
        for _, addresses, _ in got:
            assert len(addresses) == 1
            per_gpu[addresses[0]] = per_gpu.get(addresses[0], 0) + 1
        assert sorted(per_gpu.values()) == [4, 4, 4, 4]  # 4 tasks per simulated GPU

        ranks = tmp_path / "ranks"
        ranks.mkdir()
        training = cluster.session(kind="training", app_name="spine-train")
        try:
            run(_gpu_of_each_rank, str(ranks), num_processes=4, spark=training)
        finally:
            training.stop()
        gpus = [(ranks / str(r)).read_text() for r in range(4)]
        assert sorted(gpus) == ["0", "1", "2", "3"]  # one whole GPU per rank
    finally:
        _down(cli, tmp_path, state)
    own = driver_log_file()  # this test process's driver (the JVM starts once per process)
    assert not own.exists() or WASTED not in own.read_text()
