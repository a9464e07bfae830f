"""Spark Connect end to end, on ONE embedded cluster started with ``gpuspark cluster up
--connect`` for the whole module: ``cluster status`` shows its ``sc://`` URL, the README
quickstart's launch commands and a 2-rank ``train`` run through ``--master sc://…`` (and by
default, through the cluster's server), a failing rank is named exactly as on the classic
path, data jobs on it are refused in one line, and ``cluster down`` stops the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pytest

from gpuspark.cli.main import main
from gpuspark.cluster.local import LocalCluster
from gpuspark.errors import LaunchError

pytestmark = pytest.mark.spark
cloudpickle.register_pickle_by_value(sys.modules[__name__])

BIN = Path(sys.executable).parent
TRAIN_PY = textwrap.dedent(
    """
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group(os.environ["GPUSPARK_BACKEND"])  # gloo here, nccl on NVIDIA GPUs
    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {int(t.item())}")
    dist.destroy_process_group()
    """
)
"""The README quickstart's ``train.py``."""


@pytest.fixture(scope="module")
def connect_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``gpuspark cluster up --connect``: 2 workers of 2 cores, 1 (simulated) GPU, 2 GB."""
    state = str(tmp_path_factory.mktemp("connect") / "state")
    argv = ["cluster", "up", "--connect", "--workers", "2", "--cores", "2", "--gpus", "1"]
    assert main([*argv, "--memory", "2g", "--state-dir", state]) == 0
    try:
        cluster = LocalCluster.running(state)
        assert cluster is not None and cluster.state is not None
        server = cluster.state.connect
        assert server is not None and server.alive
        yield {"state": state, "url": server.url, "pid": server.pid, "log": server.log}
    finally:
        main(["cluster", "down", "--state-dir", state])


def _gpuspark(args: list[str], cwd: Path, state: str, timeout: float = 600) -> Any:
    """The ``gpuspark`` console script, as a user runs it, on the module's cluster."""
    env = {**os.environ, "GPUSPARK_STATE_DIR": state, "PATH": f"{BIN}:{os.environ['PATH']}"}
    env["GPUSPARK_LOG_DIR"] = str(cwd / "logs")
    cmd = [str(BIN / "gpuspark"), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_status_shows_the_sc_url(connect_cluster: dict[str, Any], capsys: Any) -> None:
    url = connect_cluster["url"]
    assert url.startswith("sc://127.0.0.1:")
    assert main(["cluster", "status", "--json", "--state-dir", connect_cluster["state"]]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["connect_url"], info["connect_pid"], info["connect_alive"]) == (
        url,
        connect_cluster["pid"],
        True,
    )
    assert main(["cluster", "status", "--state-dir", connect_cluster["state"]]) == 0
    assert f"Spark Connect server {url}" in " ".join(capsys.readouterr().out.split())
    assert "Spark Connect server started at: 127.0.0.1:" in Path(connect_cluster["log"]).read_text()


@pytest.mark.slow
def test_quickstart_launch_through_sc(connect_cluster: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN_PY)
    url, state = connect_cluster["url"], connect_cluster["state"]
    for extra in (["--master", url], ["--master", url, "--gpus-per-process", "0"], []):
        out = _gpuspark(["launch", "-n", "2", *extra, "train.py"], tmp_path, state)
        assert out.returncode == 0, out.stderr[-3000:]
        for rank in (0, 1):
            assert f"[rank {rank}] rank {rank} of 2: sum 3" in out.stdout
        if not extra:  # the default master, the embedded cluster: through its server
            said = " ".join(out.stderr.split())
            assert f"runs a Spark Connect server: this job goes through it ({url})" in said


def test_data_jobs_on_the_connect_cluster_are_one_line(
    connect_cluster: dict[str, Any], tmp_path: Path
) -> None:
    images = tmp_path / "images"
    for cls in ("a", "b"):
        (images / cls).mkdir(parents=True)
        (images / cls / "x.jpg").write_bytes(b"\xff\xd8\xff\xd9")
    out = _gpuspark(["prep", "images", "images", "shards"], tmp_path, connect_cluster["state"])
    assert out.returncode == 1
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, out.stderr
    assert "runs a Spark Connect server" in errors[0]
    assert "gpuspark cluster up` without --connect" in errors[0]
    assert not (tmp_path / "shards").exists()


def _tiny_tabular(path: Path, rows: int = 256) -> str:
    """A tabular dataset as ``gpuspark prep parquet`` writes it: 2 numeric features, a binary
    label that depends on them, 80/20 train/val."""
    import pyarrow as pa

    from gpuspark.data import format as fmt
    from gpuspark.data.format.table import TableColumn, TableInfo, encode_block
    from gpuspark.data.write import ShardWriter

    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (rows, 2)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    columns = [
        TableColumn("id", "string"),
        TableColumn("label", "number", "int64"),
        TableColumn("x", "array", "float32"),
    ]
    numeric = {
        name: {"count": rows, "missing": 0, "mean": 0.0, "std": 1.0, "min": -4.0, "max": 4.0}
        for name in ("f0", "f1")
    }
    tabular = {
        "label": "label",
        "task": "binary",
        "classes": 2,
        "label_values": [0, 1],
        "numeric": ["f0", "f1"],
        "categorical": [],
        "stats_split": "train",
        "stats": {"numeric": numeric, "categorical": {}},
        "label_counts": [int(v) for v in np.bincount(y, minlength=2)],
    }
    split_rows = {}
    with ShardWriter(path, extra={"tabular": tabular}) as w:
        for split, idx in (("train", np.arange(rows) % 5 != 0), ("val", np.arange(rows) % 5 == 0)):
            rows_ = np.flatnonzero(idx)
            split_rows[split] = len(rows_)
            batch = pa.RecordBatch.from_pydict(
                {
                    "id": [f"r{i}" for i in rows_],
                    "label": pa.array(y[rows_], pa.int64()),
                    "x": pa.array(list(x[rows_]), pa.list_(pa.float32())),
                }
            )
            w.write(encode_block(batch, columns), split=split)
    manifest = w.manifest
    assert manifest is not None
    shard_rows = {manifest.splits[s][0]: n for s, n in split_rows.items()}
    manifest.extra["table"] = TableInfo(rows, tuple(columns), shard_rows).as_dict()
    fmt.write_manifest(str(path), manifest)
    return str(path)


@pytest.mark.slow
def test_train_two_ranks_through_sc(connect_cluster: dict[str, Any], tmp_path: Path) -> None:
    data = _tiny_tabular(tmp_path / "tab")
    args = ["train", "tabular", "--data", data, "-n", "2", "--epochs", "1", "--threads", "1"]
    args += ["--master", connect_cluster["url"], "--json"]
    out = _gpuspark(args, tmp_path, connect_cluster["state"])
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout[out.stdout.index("{") :])
    assert summary["world_size"] == 2 and summary["recipe"] == "tabular"
    assert len(summary["history"]) == 1
    assert summary["splits"]["train"] + summary["splits"]["val"] == 256


def fail_on(bad_rank: int) -> int:
    """Every rank but ``bad_rank`` waits a little; ``bad_rank`` raises."""
    import os
    import time

    if int(os.environ["RANK"]) == bad_rank:
        raise ValueError(f"boom on rank {bad_rank}")
    time.sleep(20)
    return 0


def _failure(spark: Any) -> str:
    from gpuspark.launch import run

    with pytest.raises(LaunchError) as exc:
        run(fail_on, 1, num_processes=2, gpus_per_process=0, spark=spark)
    return str(exc.value)


@pytest.mark.slow
def test_failing_rank_is_named_as_on_the_classic_path(
    connect_cluster: dict[str, Any], spark: Any
) -> None:
    from gpuspark.cluster.session import session

    classic = _failure(spark)
    remote = session(master=connect_cluster["url"], kind="training")
    try:
        through_connect = _failure(remote)
    finally:
        remote.stop()
    assert classic.startswith("rank 1 failed on host 127.0.0.1: ValueError: boom on rank 1")
    assert classic.splitlines()[-1].strip() == "ValueError: boom on rank 1"
    assert through_connect == classic


def test_cluster_down_stops_the_server(connect_cluster: dict[str, Any], capsys: Any) -> None:
    from gpuspark._util.procs import pid_alive

    capsys.readouterr()
    assert main(["cluster", "down", "--json", "--state-dir", connect_cluster["state"]]) == 0
    stopped = json.loads(capsys.readouterr().out)["stopped_pids"]
    assert connect_cluster["pid"] in stopped
    assert not pid_alive(connect_cluster["pid"])
    assert LocalCluster.running(connect_cluster["state"]) is None
