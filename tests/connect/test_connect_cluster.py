"""Spark Connect end to end, on ONE embedded cluster started with ``gpuspark cluster up
--connect`` for the whole module: ``cluster status`` shows its ``sc://`` URL, the README
quickstart's launch commands and a 2-rank ``train`` run through ``--master sc://…`` (and by
default, through the cluster's server), a failing rank is named exactly as on the classic
path, data jobs run through it (``prep images`` and ``prep dicom`` commit the same records
and quarantine as on the classic session of the test suite's shared cluster,
``from_dataframe`` takes a Connect DataFrame, a failed write commits nothing), and ``cluster
down`` stops the server.
"""

from __future__ import annotations

import json
import os
import re
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


def _image_source(root: Path) -> Path:
    """The README's 16 synthetic images and two files that are not images."""
    from gpuspark.demo import synth_images

    synth_images(root, classes=2, per_class=8, seed=4)
    (root / "class_00" / "bad-0.jpg").write_bytes(b"\xff\xd8 not an image")
    (root / "class_01" / "bad-1.png").write_bytes(b"\x89PNG truncated")
    return root


def _records(root: Path) -> list[tuple[Any, ...]]:
    """Every record of a dataset with its split and the records of its shard, sorted."""
    from gpuspark.data.format import decode_example, iter_records, load_manifest

    m = load_manifest(root)
    out = []
    for split, paths in (m.splits or {None: [s.path for s in m.shards]}).items():
        for p in paths:
            recs = [decode_example(r, m.schema) for r in iter_records(root / p)]
            for rec in recs:
                fields = sorted((k, np.asarray(v).tobytes()) for k, v in rec.items())
                out.append((split, len(recs), *fields))
    return sorted(out)


def _quarantine(root: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    from gpuspark.data.format import load_manifest

    name = load_manifest(root).extra["files"]["quarantine.parquet"]
    rows = pq.read_table(root / name).to_pylist()
    for row in rows:  # Pillow names its buffer's address: "<_io.BytesIO object at 0x7f…>"
        row["reason"] = re.sub(r" at 0x[0-9a-f]+", "", row["reason"])
    return sorted(rows, key=lambda r: r["path"])


def _same_dataset(a: Path, b: Path) -> None:
    """Records, shard sizes, splits, quarantine and the job's counts are the same."""
    from gpuspark.data.format import load_manifest, verify_dataset

    assert verify_dataset(a) == [] and verify_dataset(b) == []
    assert _records(a) == _records(b)
    assert _quarantine(a) == _quarantine(b)
    ma, mb = load_manifest(a), load_manifest(b)
    assert sorted(s.records for s in ma.shards) == sorted(s.records for s in mb.shards)
    assert ma.extra["quarantine"] == mb.extra["quarantine"]
    assert ma.extra.get("label_map") == mb.extra.get("label_map")


@pytest.mark.slow  # a classic and a Connect prep side by side (~45 s); make test-all
def test_prep_images_through_sc_commits_the_classic_dataset(
    connect_cluster: dict[str, Any], spark: Any, tmp_path: Path
) -> None:
    from gpuspark.data.prep import prep_images

    src = _image_source(tmp_path / "images")
    args = {"split": (0.5, 0.5), "world_size": 2}
    classic = prep_images(src, tmp_path / "classic", spark=spark, **args)
    seen: list[dict[str, Any]] = []
    remote = prep_images(
        src, tmp_path / "sc", master=connect_cluster["url"], progress=seen.append, **args
    )
    _same_dataset(tmp_path / "classic", tmp_path / "sc")
    assert (remote.inputs, remote.rows, remote.quarantined) == (18, 16, 2)
    assert (classic.inputs, classic.rows, classic.quarantined, classic.by_reason) == (
        remote.inputs,
        remote.rows,
        remote.quarantined,
        remote.by_reason,
    )
    assert [r["path"].rsplit("/", 1)[-1] for r in _quarantine(tmp_path / "sc")] == [
        "bad-0.jpg",
        "bad-1.png",
    ]
    last = seen[-1]  # the server's task progress and the counts the driver learned
    assert last["phase"] == "done" and last["tasks_total"] > 0
    assert (last["tasks_done"], last["rows"], last["quarantined"]) == (last["tasks_total"], 16, 2)
    prov = json.loads((tmp_path / "sc" / "manifest.json").read_text())["provenance"]
    assert prov["spark_connect"] is True and prov["spark_master"].startswith("spark://")


@pytest.mark.slow  # ~25 s; CI's `make test-compat` runs it as the README's Connect quickstart
def test_prep_through_the_clusters_server_by_default(
    connect_cluster: dict[str, Any], tmp_path: Path
) -> None:
    _image_source(tmp_path / "images")
    out = _gpuspark(["prep", "images", "images", "shards"], tmp_path, connect_cluster["state"])
    assert out.returncode == 0, out.stderr[-3000:]
    said = " ".join(out.stderr.split())
    assert f"this job goes through it ({connect_cluster['url']})" in said
    assert (tmp_path / "shards" / "manifest.json").exists()
    inspect = _gpuspark(
        ["shards", "inspect", "shards", "--json"], tmp_path, connect_cluster["state"]
    )
    assert inspect.returncode == 0, inspect.stderr
    assert json.loads(inspect.stdout)["records"] == 16  # the 2 files that are not images: out


@pytest.mark.slow
def test_prep_dicom_through_sc_commits_the_classic_dataset(
    connect_cluster: dict[str, Any], spark: Any, tmp_path: Path
) -> None:
    from gpuspark.data.prep import prep_dicom
    from gpuspark.demo import synth_ct

    synth_ct(tmp_path / "cohort", studies=3, seed=3, size=16)
    src = tmp_path / "cohort" / "dicom"
    (src / "junk.dcm").write_bytes(b"not a DICOM file")
    args = {"shape": (8, 8, 8), "split": None, "world_size": 2}
    classic = prep_dicom(src, tmp_path / "classic", spark=spark, **args)
    remote = prep_dicom(src, tmp_path / "sc", master=connect_cluster["url"], **args)
    _same_dataset(tmp_path / "classic", tmp_path / "sc")
    assert remote.rows == classic.rows == 3 and remote.quarantined == classic.quarantined == 1


def _small_table(path: Path) -> Path:
    """A Parquet table for ``prep parquet``: a label, an id, two numbers, a category, and
    rows to quarantine (a null label, an infinite number)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 120
    table = {
        "y": [None if i == 7 else i % 2 for i in range(n)],
        "cid": [f"c{i % 40}" for i in range(n)],
        "a": [float(i) for i in range(n)],
        "b": [float("inf") if i == 11 else i * 0.5 for i in range(n)],
        "kind": [("red", "green", "blue")[i % 3] for i in range(n)],
    }
    path.mkdir()
    pq.write_table(pa.table(table), path / "part-0.parquet")
    return path


@pytest.mark.slow
def test_prep_text_and_parquet_through_sc_commit_the_classic_datasets(
    connect_cluster: dict[str, Any], spark: Any, tmp_path: Path
) -> None:
    from gpuspark.data.prep import prep_parquet, prep_text
    from gpuspark.data.prep.text_tokens import train_wordpiece
    from gpuspark.demo.pydoc_text import pydoc_text as write_topics

    corpus = Path(write_topics(tmp_path / "corpus", limit=6).path)
    lines = [ln for p in sorted(corpus.glob("*.txt")) for ln in p.read_text().splitlines()]
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text(train_wordpiece(lines, 300))
    (corpus / "blank.txt").write_text("   \n")
    url = connect_cluster["url"]
    # a given tokenizer and shard count: a trained one depends on the order of the sampled
    # lines, and the shards on the partitions, both of which follow the cluster's cores
    text = {"tokenizer": tmp_path / "tok", "seq_len": 32, "split": (0.7, 0.3), "num_shards": 2}
    classic = prep_text(corpus, tmp_path / "t-classic", spark=spark, **text)
    remote = prep_text(corpus, tmp_path / "t-sc", master=url, **text)
    _same_dataset(tmp_path / "t-classic", tmp_path / "t-sc")
    assert (remote.inputs, remote.quarantined) == (classic.inputs, classic.quarantined) == (7, 1)
    src = _small_table(tmp_path / "table")
    table = {"label": "y", "id": "cid", "categorical": ["kind"], "split": (0.75, 0.25)}
    table["num_shards"] = 2
    classic = prep_parquet(src, tmp_path / "p-classic", spark=spark, **table)
    remote = prep_parquet(src, tmp_path / "p-sc", master=url, **table)
    _same_dataset(tmp_path / "p-classic", tmp_path / "p-sc")
    assert (remote.rows, remote.quarantined) == (classic.rows, classic.quarantined) == (118, 2)


def _connect_session(connect_cluster: dict[str, Any]) -> Any:
    from gpuspark.cluster.session import session

    return session(master=connect_cluster["url"], kind="data", dataframe_only=True)


def test_from_dataframe_takes_a_connect_dataframe(
    connect_cluster: dict[str, Any], tmp_path: Path
) -> None:
    from gpuspark._util.spark_compat import sql_functions
    from gpuspark.data import from_dataframe

    remote = _connect_session(connect_cluster)
    F = sql_functions(remote)  # the Connect client's own functions module
    try:
        df = remote.range(0, 300, 1, 3).select(
            (F.col("id") * 0.5).alias("x"), (F.col("id") % 2).alias("y")
        )
        first = from_dataframe(df, label="y", world_size=4, cache_dir=tmp_path / "cache")
        again = from_dataframe(df, label="y", world_size=4, cache_dir=tmp_path / "cache")
    finally:
        remote.stop()
    assert not first.cached and again.cached and again.key == first.key
    assert first.rows == 300 and len(first.manifest.shards) == 4  # 3 partitions, spread
    x, y = [], []
    for features, labels in first.dataset(shuffle=False).iter_batches(64):
        x.extend(features[:, 0].tolist())
        y.extend(labels.tolist())
    assert sorted(x) == [i * 0.5 for i in range(300)]
    assert sorted(zip(x, y, strict=True)) == [(i * 0.5, i % 2) for i in range(300)]


def test_a_failed_write_through_sc_leaves_no_manifest(
    connect_cluster: dict[str, Any], tmp_path: Path
) -> None:
    from gpuspark.data.write import write_dataframe

    def explode(row: dict[str, Any]) -> dict[str, Any]:
        """Fails on one row (runs in the tasks; a nested function travels by value)."""
        if row["id"] == 77:
            raise ValueError("boom on row 77")
        return {"id": row["id"]}

    remote = _connect_session(connect_cluster)
    try:
        df = remote.range(0, 200, 1, 4)
        old = write_dataframe(df, tmp_path / "ds", world_size=2)
        before = {p.name: p.read_bytes() for p in (tmp_path / "ds").iterdir()}
        with pytest.raises(Exception, match="boom on row 77"):
            write_dataframe(df, tmp_path / "new", sample_fn=explode)
        with pytest.raises(Exception, match="boom on row 77"):
            write_dataframe(df, tmp_path / "ds", sample_fn=explode, overwrite=True)
    finally:
        remote.stop()
    assert old.total_records == 200 and len(old.shards) == 4
    assert not (tmp_path / "new").exists()  # no manifest, no staged shard: nothing
    assert {p.name: p.read_bytes() for p in (tmp_path / "ds").iterdir()} == before


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
