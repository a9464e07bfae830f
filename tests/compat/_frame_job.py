"""One data application of the compatibility run, started as a user would (``python this.py``):
``from_dataframe`` on the running embedded cluster under team ``vision``, every row read back
split exactly over 2 ranks, then ``gpuspark quota status --json`` while the application still
holds its executors. Prints one JSON line: the counts and the quota table."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

ROWS = 600


def _frame(spark: Any) -> Any:
    """Integer, float, nullable, string, array and Spark ML vector columns."""
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    return spark.range(0, ROWS, 1, 4).select(
        F.col("id"),
        (F.col("id") % 7).cast("int").alias("i32"),
        (F.col("id") / 3).cast("float").alias("f32"),
        F.when(F.col("id") % 11 == 0, None).otherwise(F.col("id") / 7).alias("f64"),
        F.format_string("s-%d", "id").alias("s"),
        F.array(F.col("id") * 0.5, F.col("id") * 0.25).alias("vec"),
        array_to_vector(F.array(F.col("id") * 1.5, F.lit(-1.0))).alias("ml"),
    )


def _rank_ids(path: str, world_size: int) -> list[list[int]]:
    from gpuspark.data.load import TableDataset, World

    out = []
    for rank in range(world_size):
        ds = TableDataset(path, world=World(rank=rank, world_size=world_size), seed=1)
        out.append([int(i) for batch in ds.iter_batches(256) for i in batch["id"]])
    return out


def main(cache_dir: str) -> None:
    from gpuspark.cluster import job_session
    from gpuspark.data import from_dataframe
    from gpuspark.data.format import verify_dataset
    from gpuspark.schedulers.standalone.api import team_app_name

    with job_session("data", app_name=team_app_name("compat-frame", "vision")) as spark:
        shards = from_dataframe(_frame(spark), cache_dir=cache_dir, block_rows=128)
        quota = subprocess.run(
            ["gpuspark", "quota", "status", "--json"], capture_output=True, text=True, timeout=300
        )
    ranks = _rank_ids(shards.path, 2)
    report = {
        "rows": shards.rows,
        "per_rank": [len(r) for r in ranks],
        "distinct": len({i for r in ranks for i in r}),
        "verify": verify_dataset(shards.path),
        "quota_rc": quota.returncode,
        "quota": json.loads(quota.stdout) if quota.returncode == 0 else quota.stderr[-2000:],
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
