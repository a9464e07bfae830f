"""``from_dataframe``: a DataFrame of mixed types comes back row for row, split exactly over
ranks; the cache is keyed by the plan (a second call runs no Spark job) and by the input
files' contents; unsupported types fail before any job, naming the column."""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np
import pytest

from gpuspark.data import format as fmt
from gpuspark.data import from_dataframe
from gpuspark.data.format.table import TableInfo
from gpuspark.errors import TableError

pytestmark = pytest.mark.spark

ROWS = 1200


def _mixed(spark: Any, rows: int = ROWS) -> Any:
    """Every column kind a table holds, with nulls where Spark allows them, and a Spark ML
    vector column."""
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    df = spark.range(0, rows, 1, 4)
    return df.select(
        F.col("id"),
        (F.col("id") % 7).cast("int").alias("i32"),
        (F.col("id") % 5).cast("short").alias("i16"),
        (F.col("id") % 3).cast("byte").alias("i8"),
        (F.col("id") % 2 == 0).alias("flag"),
        (F.col("id") / 3).cast("float").alias("f32"),
        F.when(F.col("id") % 11 == 0, None).otherwise(F.col("id") / 7).alias("f64"),
        F.when(F.col("id") % 13 == 0, None).otherwise((F.col("id") * 3).cast("long")).alias("n"),
        F.when(F.col("id") % 17 == 0, None).otherwise(F.format_string("s-%d", "id")).alias("s"),
        F.col("id").cast("string").cast("binary").alias("raw"),
        F.array(F.col("id") * 0.5, F.col("id") * 0.25).alias("vec"),
        F.sequence(F.lit(0), (F.col("id") % 4).cast("int")).alias("ragged"),
        F.when(F.col("id") % 19 == 0, None)
        .otherwise(F.array_repeat(F.lit("t"), (F.col("id") % 3).cast("int")))
        .alias("words"),
        array_to_vector(F.array(F.col("id") * 1.5, F.lit(-1.0), F.col("id") % 3)).alias("ml"),
    )


def _values(value: Any) -> Any:
    if hasattr(value, "toArray"):  # a Spark ML vector comes back as a dense float64 array
        value = value.toArray()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _rank_rows(path: str, world_size: int) -> list[list[dict[str, Any]]]:
    from gpuspark.data.load import TableDataset, World

    out = []
    for rank in range(world_size):
        ds = TableDataset(path, world=World(rank=rank, world_size=world_size), seed=3)
        rows: list[dict[str, Any]] = []
        for batch in ds.iter_batches(500):
            names = list(batch)
            for i in range(len(batch[names[0]])):
                rows.append({n: _cell(batch[n], i) for n in names})
        out.append(rows)
    return out


def _cell(column: Any, i: int) -> Any:
    if np.ma.isMaskedArray(column):
        return None if column.mask[i] else column.data[i].item()
    value = column[i]
    return value.item() if isinstance(value, np.generic) else _values(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def test_mixed_types_round_trip_split_exactly_over_ranks(spark: Any, tmp_path: Any) -> None:
    df = _mixed(spark)
    expected = {r["id"]: {k: _values(v) for k, v in r.asDict().items()} for r in df.collect()}
    shards = from_dataframe(df, cache_dir=tmp_path, block_rows=256)
    assert not shards.cached and shards.rows == ROWS
    info = TableInfo.from_manifest(shards.manifest)
    kinds = {c.name: (c.kind, c.dtype) for c in info.columns}
    assert kinds["words"] == ("string_array", None) and kinds["ml"] == ("array", "float64")
    per_rank = _rank_rows(shards.path, 3)
    assert [len(r) for r in per_rank] == [ROWS // 3] * 3
    seen = [row["id"] for rows in per_rank for row in rows]
    assert sorted(seen) == sorted(expected)  # every row exactly once
    for rows in per_rank:
        for row in rows:
            want = expected[row["id"]]
            bad = {k: (row[k], want[k]) for k in want if not _same(row[k], want[k])}
            assert not bad, f"row {row['id']}: {bad}"
    assert fmt.verify_dataset(shards.path) == []


def _job_ids(spark: Any) -> set[int]:
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup())


def test_second_call_is_served_from_the_cache_without_a_spark_job(
    spark: Any, tmp_path: Any
) -> None:
    first = from_dataframe(_mixed(spark, 500), cache_dir=tmp_path, label="f32", features=["i32"])
    before = _job_ids(spark)
    again = from_dataframe(_mixed(spark, 500), cache_dir=tmp_path, label="f32", features=["i32"])
    assert again.cached and again.path == first.path and again.key == first.key
    assert _job_ids(spark) == before, "a cached call must not start a Spark job"
    other = from_dataframe(_mixed(spark, 400), cache_dir=tmp_path, label="f32", features=["i32"])
    assert not other.cached and other.key != first.key
    x, y = next(iter(again.dataset(shuffle=False).iter_batches(100)))
    assert tuple(x.shape) == (100, 1) and tuple(y.shape) == (100,)
    again.delete()
    assert not os.path.exists(first.path)
    assert (
        from_dataframe(_mixed(spark, 500), cache_dir=tmp_path, label="f32", features=["i32"]).cached
        is False
    )


def test_changed_parquet_files_are_a_new_cache_entry(spark: Any, tmp_path: Any) -> None:
    src = str(tmp_path / "src.parquet")
    spark.range(0, 200, 1, 2).write.parquet(src)
    first = from_dataframe(spark.read.parquet(src), cache_dir=tmp_path / "cache")
    assert from_dataframe(spark.read.parquet(src), cache_dir=tmp_path / "cache").cached
    time.sleep(0.01)
    spark.range(0, 300, 1, 2).write.mode("overwrite").parquet(src)
    changed = from_dataframe(spark.read.parquet(src), cache_dir=tmp_path / "cache")
    assert not changed.cached and changed.key != first.key and changed.rows == 300


def test_unsupported_column_fails_before_any_job_naming_it(spark: Any, tmp_path: Any) -> None:
    from pyspark.sql import functions as F

    df = spark.range(10).withColumn("day", F.current_date())
    before = _job_ids(spark)
    with pytest.raises(TableError, match=r"column 'day' has type date.*cast it"):
        from_dataframe(df, cache_dir=tmp_path)
    assert _job_ids(spark) == before
    with pytest.raises(TableError, match="'nope' is not in the DataFrame"):
        from_dataframe(df, cache_dir=tmp_path, label="nope")
