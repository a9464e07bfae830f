"""An embedded cluster whose workers are distinct hosts (``cluster up --hosts 2``): Spark sees
two machines, so speculation can place a copy of a slow task elsewhere and the ranks of a
launch meet across addresses."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from pyspark import cloudpickle as spark_cloudpickle

from gpuspark.cli.main import main
from gpuspark.cluster.local import LocalCluster

pytestmark = pytest.mark.spark

# Executors cannot import this test module: ship its functions by value (launch.run pickles with
# cloudpickle, Spark's own tasks with pyspark's copy of it).
cloudpickle.register_pickle_by_value(sys.modules[__name__])
spark_cloudpickle.register_pickle_by_value(sys.modules[__name__])

HOSTS = ["127.0.0.2", "127.0.0.3"]
STALL_S = 60


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(args))
    return rc, capsys.readouterr().out


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """``gpuspark cluster up --hosts 2``: 2 workers x 2 cores, each on its own address."""
    state = str(tmp_path_factory.mktemp("two-hosts") / "state")
    argv = ["cluster", "up", "--hosts", "2", "--workers", "2", "--cores", "2", "--gpus", "1"]
    assert main([*argv, "--memory", "2g", "--state-dir", state, "--json"]) == 0
    cluster = LocalCluster.running(state)
    assert cluster is not None
    try:
        yield cluster
    finally:
        assert main(["cluster", "down", "--state-dir", state]) == 0


def _session_on(cluster: LocalCluster, **conf: Any) -> Any:
    """A session on ``cluster`` itself. A process holds one SparkContext and the session
    builder hands out the active one, whatever its master: the shared tests' session (on the
    single-host cluster) gives way first; the shared factory rebuilds it when next asked."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    spark = cluster.session(**conf)
    assert spark.sparkContext.master == cluster.master_url
    return spark


def test_status_lists_two_worker_hosts(
    two_hosts: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(two_hosts.state_dir)
    rc, out = _cli(capsys, "cluster", "status", "--json", "--state-dir", state)
    info = json.loads(out)
    assert rc == 0 and info["alive_workers"] == 2
    assert info["hosts"] == HOSTS
    assert [w["host"] for w in info["workers"]] == HOSTS
    rc, out = _cli(capsys, "cluster", "status", "--state-dir", state)
    assert "2 of 2 workers alive on 2 host(s)" in out and "127.0.0.3" in out


def where() -> list[Any]:
    """Every rank's view: its rank and the address the ranks met at."""
    import datetime

    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    mine = {"rank": dist.get_rank(), "master": os.environ["MASTER_ADDR"], "store": []}
    if dist.get_rank() == 0:  # where the job's TCP store listens (task 0's host)
        mine["store"] = _listening_on(int(os.environ["MASTER_PORT"]))
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    dist.destroy_process_group()
    return everyone


def _listening_on(port: int) -> list[str]:
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            addr, hex_port = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(addr)
                found.append(".".join(str(b) for b in raw[::-1]) if len(raw) == 4 else "::")
    return found


def test_launch_places_ranks_on_two_hosts(
    two_hosts: LocalCluster, capfd: pytest.CaptureFixture[str]
) -> None:
    from gpuspark import launch

    spark = _session_on(two_hosts, kind="training", **{"spark.app.name": "gpuspark-two-hosts"})
    try:
        out = launch.run(where, num_processes=2, spark=spark, timeout=180)
    finally:
        spark.stop()
    line = next(ln for ln in capfd.readouterr().out.splitlines() if "ranks:" in ln)
    placed = sorted(part.split("->")[1].split()[0] for part in line.split("ranks: ")[1].split(", "))
    assert placed == HOSTS, line
    masters = {r["master"] for r in out}
    assert len(masters) == 1 and masters <= set(HOSTS)  # task 0's address, not 127.0.0.1
    assert out[0]["store"] == list(masters)  # the store listens there only


def slow_first_attempt(row: dict[str, Any]) -> dict[str, Any]:
    """The first attempt of partition 0 stalls on its first row; every other attempt is quick."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if row["id"] == 0 and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
        time.sleep(STALL_S)
    return {"id": int(row["id"]), "x": float(row["id"]) / 2}


def _speculative_starts(log_dir: Path) -> list[dict[str, Any]]:
    starts = []
    # Spark 4 rolls the log: eventlog_v2_<app>/events_<n>_<app> (and an empty appstatus file)
    for path in log_dir.rglob("events_*"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("Event") == "SparkListenerTaskStart":
                starts.append(event["Task Info"])
    return starts


@pytest.mark.slow  # 45 s: its own session, and the stalled attempt's executor to stop
def test_speculative_copy_of_a_slow_writer_commits_each_record_once(
    two_hosts: LocalCluster, tmp_path: Path
) -> None:
    """Spark starts a copy of the stalled shard-writing task on the other host (the event
    log says so); the exactly-once commit keeps one attempt per shard."""
    from gpuspark.data import format as fmt
    from gpuspark.data.write import write_dataframe

    logs = tmp_path / "events"
    logs.mkdir()
    conf = {
        "spark.app.name": "gpuspark-speculation",
        "spark.speculation": "true",
        "spark.speculation.interval": "100ms",
        "spark.speculation.multiplier": "2",
        "spark.speculation.quantile": "0.5",
        "spark.speculation.minTaskRuntime": "1s",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.compress": "false",  # Spark 4 writes zstd by default
        "spark.eventLog.dir": logs.as_uri(),
    }
    spark = _session_on(two_hosts, **conf)
    try:
        df = spark.range(0, 4000, numPartitions=4)
        t0 = time.monotonic()
        manifest = write_dataframe(df, tmp_path / "ds", sample_fn=slow_first_attempt)
        elapsed = time.monotonic() - t0
    finally:
        spark.stop()
    starts = _speculative_starts(logs)
    copies = [t for t in starts if t.get("Speculative")]
    assert copies, f"no speculative task among {len(starts)} task starts"
    first = {t["Host"] for t in starts if t["Index"] == copies[0]["Index"] and not t["Speculative"]}
    assert copies[0]["Host"] not in first  # Spark places a copy on another host only
    assert elapsed < STALL_S - 10, elapsed  # the copy won: nobody waited for the stalled attempt
    assert manifest.total_records == 4000 and len(manifest.shards) == 4
    assert fmt.verify_dataset(str(tmp_path / "ds")) == []
    ids = _read_ids(tmp_path / "ds")
    assert sorted(ids) == list(range(4000))


def _read_ids(path: Path) -> list[int]:
    from gpuspark.data.load import ShardDataset, World

    ds = ShardDataset(str(path), decode="raw", shuffle=False, drop_last=False, world=World())
    return [int(s["id"]) for s in ds]
