"""The embedded Spark standalone cluster: CLI life cycle and GPU-scheduled tasks."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from gpuspark._util.procs import group_alive, pid_alive
from gpuspark.cli.main import main
from gpuspark.cluster.local import LocalCluster

pytestmark = pytest.mark.spark


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(args))
    return rc, capsys.readouterr().out


@pytest.mark.slow  # a fresh cluster (about 20 s); the README quickstart runs up/status/down
def test_cli_up_status_down_lifecycle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = str(tmp_path / "state")
    rc, out = _cli(capsys, "cluster", "up", "--workers", "2", "--gpus", "2", "--state-dir", state)
    assert rc == 0, out
    try:
        rc, out = _cli(capsys, "cluster", "status", "--json", "--state-dir", state)
        info = json.loads(out)
        assert rc == 0
        assert info["alive_workers"] == 2  # --json is ClusterStatus.as_dict()
        assert sorted(info["gpu_addresses"]) == ["0", "1", "2", "3"]
        assert info["gpus_simulated"] is True  # no NVIDIA GPU on the test machines
        rc, out = _cli(capsys, "cluster", "status", "--state-dir", state)
        assert "simulated" in out and "2 of 2 workers alive" in out

        # A second `up` is a no-op that says so, never a second cluster.
        rc, out = _cli(capsys, "cluster", "up", "--state-dir", state)
        assert rc == 0 and "already running" in out
        assert (
            json.loads((Path(state) / "cluster.json").read_text())["master_pid"]
            == info["master_pid"]
        )

        # A dead worker shows in status (and status exits 1).
        victim = info["workers"][1]["pid"]
        os.killpg(victim, signal.SIGKILL)
        _wait(lambda: not pid_alive(victim))
        rc, out = _cli(capsys, "cluster", "status", "--json", "--state-dir", state)
        dead = json.loads(out)
        assert rc == 1
        assert dead["workers"][1]["state"] == "DEAD" and dead["alive_workers"] == 1
    finally:
        pids = [info["master_pid"]] + [w["pid"] for w in info["workers"]]
        rc, out = _cli(capsys, "cluster", "down", "--state-dir", state)
    assert rc == 0
    _wait(lambda: not any(pid_alive(p) for p in pids))
    assert not any(pid_alive(p) for p in pids), "cluster down left processes behind"
    assert not any(group_alive(p) for p in pids), "a child of a stopped daemon is still alive"
    rc, out = _cli(capsys, "cluster", "status", "--state-dir", state)
    assert "no embedded cluster running" in out


def test_start_refuses_a_second_cluster_in_the_same_state_dir(local_cluster: Any) -> None:
    from gpuspark.errors import ClusterError

    with pytest.raises(ClusterError, match="already running"):
        LocalCluster(state_dir=local_cluster.state_dir).start()


@pytest.mark.slow  # ~55 s; test_spine checks the same sharing on the spec-shaped cluster
@pytest.mark.own_session
def test_four_tasks_share_one_gpu_address(spark_factory: Any) -> None:
    """Executor GPU 1 + task GPU 0.25: four tasks run at the same time on one address."""
    spark = spark_factory.get(
        **{
            "spark.executor.resource.gpu.amount": "1",
            "spark.task.resource.gpu.amount": "0.25",
            "spark.executor.cores": "4",
        }
    )

    def probe(i: int) -> tuple[str, float, float]:
        from pyspark import TaskContext

        addresses = TaskContext.get().resources()["gpu"].addresses
        start = time.time()
        time.sleep(2.0)
        return addresses[0], start, time.time()

    rows = spark.sparkContext.parallelize(range(16), 16).map(probe).collect()
    by_address: dict[str, list[tuple[float, float]]] = {}
    for address, start, end in rows:
        by_address.setdefault(address, []).append((start, end))
    assert set(by_address) <= {"0", "1", "2", "3"}
    assert max(_max_overlap(v) for v in by_address.values()) == 4
    assert all(_max_overlap(v) <= 4 for v in by_address.values())


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = cur = 0
    for _, delta in events:
        cur += delta
        best = max(best, cur)
    return best


def _wait(cond: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.2)
