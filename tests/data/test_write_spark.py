"""write_dataframe on the embedded Spark cluster: balance, splits, retries, speculation, kills."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from gpuspark.data import format as fmt
from gpuspark.data.format import DatasetExistsError
from gpuspark.data.write import write_dataframe

pytestmark = pytest.mark.spark

N = 10_000


@pytest.fixture(autouse=True)
def _pickle_this_module_by_value():
    """The sample_fns below live in this test module, which executors cannot import."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _frame(spark, n: int = N, partitions: int = 5):
    from pyspark.sql import functions as F

    return spark.range(n, numPartitions=partitions).select(
        F.col("id").alias("label"),
        F.expr("unhex(sha2(cast(id as string), 256))").alias("payload"),
        F.array(F.col("id").cast("float"), F.lit(0.5).cast("float")).alias("vec"),
        F.when(F.col("id") % 10 == 0, "val").otherwise("train").alias("split"),
    )


def _labels(path: Path) -> list[int]:
    m = fmt.load_manifest(path)
    return sorted(
        fmt.decode_example(p, m.schema)["label"]
        for s in m.shards
        for p in fmt.iter_records(path / s.path)
    )


def _assert_clean(path: Path, manifest: fmt.Manifest) -> None:
    expected = {fmt.MANIFEST_NAME} | {p for s in manifest.shards for p in (s.path, s.index)}
    assert {p.name for p in path.iterdir()} == expected  # no staging dirs, no temp files
    assert fmt.verify_dataset(path) == []


def test_write_dataframe_balanced_shards(spark, tmp_path: Path):
    df = _frame(spark)
    m = write_dataframe(df, tmp_path / "ds", num_shards=8, extra={"labels": "id"})
    assert len(m.shards) == 8 and m.total_records == N
    assert m.shard_records() == [1250] * 8
    assert m.schema["payload"]["kind"] == "bytes" and m.schema["vec"]["item"] == "float"
    assert m.provenance["spark_application_id"] == spark.sparkContext.applicationId
    assert _labels(tmp_path / "ds") == list(range(N))
    _assert_clean(tmp_path / "ds", m)
    with pytest.raises(DatasetExistsError):
        write_dataframe(df, tmp_path / "ds")
    # overwrite with the DataFrame's own partitions as shards (no shuffle), 7 rows per 3 shards
    m2 = write_dataframe(_frame(spark, 7, 3), tmp_path / "ds", overwrite=True)
    assert len(m2.shards) == 3 and _labels(tmp_path / "ds") == list(range(7))
    _assert_clean(tmp_path / "ds", m2)


def test_write_dataframe_splits_world_size_and_sample_fn(spark, tmp_path: Path):
    def sample_fn(row: dict) -> dict:
        return {"label": row["label"], "double": 2 * row["label"]}

    m = write_dataframe(
        _frame(spark, 1003, 3),
        tmp_path / "ds",
        world_size=4,
        split_col="split",
        sample_fn=sample_fn,
    )
    assert set(m.splits) == {"train", "val"}
    assert set(m.schema) == {"label", "double"}
    by_path = {s.path: s.records for s in m.shards}
    for split, expected in (("train", 1003 - 101), ("val", 101)):
        counts = [by_path[p] for p in m.splits[split]]
        assert len(counts) % 4 == 0 and sum(counts) == expected
        assert max(counts) - min(counts) <= 1, (split, counts)
    assert _labels(tmp_path / "ds") == list(range(1003))
    _assert_clean(tmp_path / "ds", m)


def test_hash_keys_match_spark_hash(spark):
    from pyspark.sql import functions as F

    from gpuspark.data.write import spark_hash_int

    values = [0, 1, -1, 7, 42, 123_456, -(2**31), 2**31 - 1]
    df = spark.createDataFrame([(v,) for v in values], "v int").select("v", F.hash("v").alias("h"))
    assert {r["v"]: r["h"] for r in df.collect()} == {v: spark_hash_int(v) for v in values}


def test_write_dataframe_rejects_bad_arguments(spark, tmp_path: Path):
    df = _frame(spark, 10, 1)
    with pytest.raises(
        fmt.GpusparkError, match=r"not a multiple of --world-size 4 \(world_size=4\)"
    ):
        write_dataframe(df, tmp_path / "a", num_shards=6, world_size=4)
    with pytest.raises(fmt.GpusparkError, match="did you mean 'split'"):
        write_dataframe(df, tmp_path / "b", split_col="splitt")
    assert not (tmp_path / "a").exists()


def test_failed_job_leaves_no_dataset(spark, tmp_path: Path):
    def always_fails(row: dict) -> dict:
        raise ValueError("bad row")

    with pytest.raises(Exception, match="bad row"):
        write_dataframe(_frame(spark, 100, 2), tmp_path / "ds", sample_fn=always_fails)
    assert not (tmp_path / "ds").exists()


# ----------------------------------------------------------------- retries and speculation
# These need another executor shape (speculation, maxFailures): one session for the group.

_RETRY_CONF = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.minTaskRuntime": "200ms",
    "spark.task.maxFailures": "4",
}


def _marker_fn(markers: Path, fail: set[int], kill: frozenset[int] = frozenset()):
    """A sample_fn that records each task attempt, and fails or kills on attempt 0."""

    def fn(row: dict) -> dict:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        pid, attempt = ctx.partitionId(), ctx.attemptNumber()
        marker = markers / f"p{pid}-n{attempt}-t{ctx.taskAttemptId()}"
        first = not marker.exists()
        if first:
            marker.touch()
        if attempt == 0 and pid in fail and row["label"] % 3 == 0 and not first:
            raise RuntimeError(f"injected failure in partition {pid}")
        if attempt == 0 and pid in kill and not first and row["label"] % 5 == 0:
            _kill_executor_jvm()
        return row

    return fn


def _kill_executor_jvm() -> None:
    """SIGKILL the executor JVM that runs this Python worker (Linux /proc)."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"CoarseGrainedExecutorBackend" in f.read():
                os.kill(pid, signal.SIGKILL)
                time.sleep(30)  # die with it
                return
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("executor JVM not found")


def _attempts(markers: Path) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for p in markers.iterdir():
        pid, n, _ = p.name.split("-")
        out.setdefault(int(pid[1:]), set()).add(int(n[1:]))
    return out


@pytest.mark.own_session
def test_retries_and_speculation_commit_exactly_once(spark_factory, tmp_path: Path):
    spark = spark_factory.get(**_RETRY_CONF)
    markers = tmp_path / "markers"
    markers.mkdir()
    fn = _marker_fn(markers, fail={1, 4, 6})
    m = write_dataframe(_frame(spark), tmp_path / "ds", num_shards=8, sample_fn=fn)
    assert len(m.shards) == 8 and m.total_records == N
    assert m.shard_records() == [1250] * 8
    assert _labels(tmp_path / "ds") == list(range(N))  # no record lost, none duplicated
    _assert_clean(tmp_path / "ds", m)
    attempts = _attempts(markers)
    for pid in (1, 4, 6):
        assert attempts[pid] >= {0, 1}, attempts  # failed once, then retried


@pytest.mark.slow
@pytest.mark.own_session
def test_killed_executor_mid_write(spark_factory, tmp_path: Path):
    spark = spark_factory.get(**_RETRY_CONF)
    markers = tmp_path / "markers"
    markers.mkdir()
    fn = _marker_fn(markers, fail=set(), kill=frozenset({2}))
    m = write_dataframe(_frame(spark), tmp_path / "ds", num_shards=8, sample_fn=fn)
    assert len(m.shards) == 8 and m.total_records == N
    assert _labels(tmp_path / "ds") == list(range(N))
    _assert_clean(tmp_path / "ds", m)
    assert max(_attempts(markers)[2]) >= 1


# ----------------------------------------------------------------- write_partitions


def _odd_reporter(markers: Path | None = None, fail: frozenset[int] = frozenset()):
    """A partition_fn: even labels become samples, odd ones Reports; with ``markers``,
    attempt 0 of the shards in ``fail`` dies after it has yielded part of its output."""

    def fn(shard: int, batches):
        from pyspark import TaskContext

        from gpuspark.data.write import PartitionReport

        ctx = TaskContext.get()
        n = 0
        for batch in batches:
            for label in batch.column("label").to_pylist():
                n += 1
                if label % 2:
                    yield PartitionReport(label=label, shard=shard)
                else:
                    yield {"label": label, "shard": shard}
                if markers is not None and shard in fail and ctx.attemptNumber() == 0 and n > 5:
                    (markers / f"p{shard}-failed").touch()
                    raise RuntimeError(f"injected failure in shard {shard}")
        yield PartitionReport(count=n, shard=shard)

    return fn


def _planned(spark, n: int, shards: int):
    from pyspark.sql import functions as F

    return spark.range(n, numPartitions=3).select(
        F.col("id").alias("label"),
        ((F.col("id") / 2).cast("long") % shards).cast("int").alias("shard"),
    )


def test_write_partitions_planned_shards_and_reports(spark, tmp_path: Path):
    from gpuspark.data.write import write_partitions

    splits = ["train", "train", "train", "val"]
    m, reports = write_partitions(
        _planned(spark, 200, 4),
        tmp_path / "ds",
        splits,
        "shard",
        _odd_reporter(),
        extra=lambda reps: {"reports": len(reps)},
        world_size=1,
    )
    assert m.shard_records() == [25, 25, 25, 25]
    assert {k: len(v) for k, v in m.splits.items()} == {"train": 3, "val": 1}
    records = [
        fmt.decode_example(p, m.schema)
        for s in m.shards
        for p in fmt.iter_records(tmp_path / "ds" / s.path)
    ]
    # every row reached the shard it was planned for, samples and reports split as yielded
    assert all(r["label"] // 2 % 4 == r["shard"] and r["label"] % 2 == 0 for r in records)
    odd = sorted(r["label"] for r in reports if "label" in r)
    assert odd == list(range(1, 200, 2))
    assert sorted(r["count"] for r in reports if "count" in r) == [50] * 4
    assert m.extra["reports"] == len(reports) == 104 and m.extra["world_size"] == 1
    assert m.provenance["writer"] == "write_partitions"
    _assert_clean(tmp_path / "ds", m)


@pytest.mark.own_session
def test_write_partitions_retried_shard_reports_once(spark_factory, tmp_path: Path):
    from gpuspark.data.write import write_partitions

    spark = spark_factory.get(**_RETRY_CONF)
    markers = tmp_path / "markers"
    markers.mkdir()
    fn = _odd_reporter(markers, fail=frozenset({1, 2}))
    m, reports = write_partitions(_planned(spark, 400, 4), tmp_path / "ds", [None] * 4, "shard", fn)
    assert {p.name for p in markers.iterdir()} == {"p1-failed", "p2-failed"}  # really failed
    assert m.total_records == 200 and _labels(tmp_path / "ds") == list(range(0, 400, 2))
    assert sorted(r["label"] for r in reports if "label" in r) == list(range(1, 400, 2))
    assert sorted(r["count"] for r in reports if "count" in r) == [100] * 4
    _assert_clean(tmp_path / "ds", m)
