"""DataFrame to training data: gpuspark ``from_dataframe`` against ``df.write.parquet`` + pyarrow.

One Spark DataFrame of ``--rows`` rows x 50 columns (an id, a 0/1 label and 48 double
features drawn with ``rand``/``randn``), generated on the fly by the same plan for every run:

1. **materialise**: ``gpuspark.data.format.table.write_table`` (what ``from_dataframe`` runs on a
   cache miss) against ``df.write.parquet`` on the same cluster, alternating, median of
   ``--runs``; the ratio is parquet's time over gpuspark's (>= 1: gpuspark is faster).
2. **read into tensors**, batch 4096: ``TableDataset`` with the ``FeaturesLabel`` transform
   (float32 features [n, 48] + labels) against ``pyarrow.dataset`` batches of the Parquet
   files stacked into the same tensors; gpuspark with and without its shuffle (pyarrow
   reads in file order), alternating, median of max(7, 2 x ``--runs``).
3. **cache**: a second ``from_dataframe`` call on the same DataFrame: its time and the
   number of Spark jobs it started (0 when served from the cache).

    python benchmarks/bench_dataframe.py            # 5,000,000 rows, embedded cluster
    python benchmarks/bench_dataframe.py --quick    # 200,000 rows, local[2], < 60 s
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import spark_session, write_results

FEATURES = 48
BATCH = 4096


def _frame(spark: Any, rows: int, partitions: int) -> Any:
    from pyspark.sql import functions as F

    feats = [(F.rand(i) if i % 2 else F.randn(i)).alias(f"f{i:02d}") for i in range(FEATURES)]
    label = (F.rand(1000) < 0.03).cast("int").alias("label")
    return spark.range(rows, numPartitions=partitions).select("id", label, *feats)


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _write_runs(spark: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from gpuspark.data.format.table import write_table

    df = _frame(spark, args.rows, args.partitions)
    writers: dict[str, Callable[[], Any]] = {
        "gpuspark write_table": lambda: write_table(df, work / "table", overwrite=True),
        "df.write.parquet": lambda: df.write.mode("overwrite").parquet(str(work / "parquet")),
    }
    times: dict[str, list[float]] = {k: [] for k in writers}
    for run in range(args.runs):
        order = list(writers) if run % 2 == 0 else list(reversed(writers))
        for name in order:
            times[name].append(_timed(writers[name]))
    out = {name: _summary(ts, args.rows) for name, ts in times.items()}
    out["speed_ratio_vs_parquet"] = round(
        out["df.write.parquet"]["median_s"] / out["gpuspark write_table"]["median_s"], 3
    )
    out["bytes"] = {"gpuspark": _size(work / "table"), "parquet": _size(work / "parquet")}
    return out


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _summary(times: list[float], rows: int) -> dict[str, Any]:
    med = statistics.median(times)
    return {
        "runs_s": [round(t, 3) for t in times],
        "median_s": round(med, 3),
        "rows_per_s": round(rows / med),
    }


def _read_gpuspark(path: Path, shuffle: bool) -> int:
    from gpuspark.data.frame import FeaturesLabel
    from gpuspark.data.load import TableDataset, World

    names = [f"f{i:02d}" for i in range(FEATURES)]
    ds = TableDataset(
        path,
        world=World(),
        shuffle=shuffle,
        drop_last=False,
        transform=FeaturesLabel(names, "label"),
    )
    rows = 0
    for x, _y in ds.loader(BATCH):
        rows += x.shape[0]
    return rows


def _read_pyarrow(path: Path) -> int:
    import pyarrow.dataset as pads
    import torch

    names = [f"f{i:02d}" for i in range(FEATURES)]
    rows = 0
    for batch in pads.dataset(str(path), format="parquet").to_batches(
        columns=[*names, "label"], batch_size=BATCH
    ):
        x = torch.from_numpy(
            np.stack([batch.column(i).to_numpy() for i in range(FEATURES)], axis=1).astype(
                np.float32
            )
        )
        y = torch.from_numpy(batch.column(FEATURES).to_numpy().copy())
        assert y.shape[0] == x.shape[0]
        rows += x.shape[0]
    return rows


def _read_runs(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    readers: dict[str, Callable[[], int]] = {
        "gpuspark TableDataset (shuffled)": lambda: _read_gpuspark(work / "table", True),
        "gpuspark TableDataset (in order)": lambda: _read_gpuspark(work / "table", False),
        "pyarrow.dataset batches": lambda: _read_pyarrow(work / "parquet"),
    }
    for fn in readers.values():  # warm-up: page cache, imports
        assert fn() == args.rows
    times: dict[str, list[float]] = {k: [] for k in readers}
    for run in range(_read_runs_count(args)):
        order = list(readers) if run % 2 == 0 else list(reversed(readers))
        for name in order:
            times[name].append(_timed(readers[name]))
    out = {name: _summary(ts, args.rows) for name, ts in times.items()}
    base = out["pyarrow.dataset batches"]["median_s"]
    for name in readers:
        out[name]["speed_ratio_vs_pyarrow"] = round(base / out[name]["median_s"], 3)
    return out


def _read_runs_count(args: argparse.Namespace) -> int:
    """Reads are short (a fraction of a second in --quick): more runs for a stable median."""
    return max(7, 2 * args.runs)


def _cache_runs(spark: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from gpuspark.data.frame import from_dataframe

    tracker = spark.sparkContext.statusTracker()
    cache = work / "cache"
    first = from_dataframe(_frame(spark, args.rows, args.partitions), cache_dir=cache)
    jobs = set(tracker.getJobIdsForGroup())
    second = from_dataframe(_frame(spark, args.rows, args.partitions), cache_dir=cache)
    new_jobs = len(set(tracker.getJobIdsForGroup()) - jobs)
    return {
        "first_s": first.seconds,
        "second_s": second.seconds,
        "second_cached": second.cached,
        "second_spark_jobs": new_jobs,
    }


def _print(r: dict[str, Any]) -> None:
    print(
        f"\nDataFrame -> training data, {r['cluster']}, {r['rows']} rows x 50 columns, "
        f"median of {r['runs']} (alternating)"
    )
    print(f"\n{'materialise':<34}{'median s':>10}{'rows/s':>12}{'vs parquet':>12}")
    w = r["write"]
    for name in ("gpuspark write_table", "df.write.parquet"):
        ratio = f"{w['speed_ratio_vs_parquet']:.2f}x" if name.startswith("gpuspark") else ""
        print(f"{name:<34}{w[name]['median_s']:>10.2f}{w[name]['rows_per_s']:>12}{ratio:>12}")
    print(
        f"{'output MB':<34}gpuspark {w['bytes']['gpuspark'] / 1e6:.0f}, "
        f"parquet {w['bytes']['parquet'] / 1e6:.0f}"
    )
    print(
        f"\n{'read into tensors, batch 4096':<34}{'median s':>10}{'rows/s':>12}{'vs pyarrow':>12}"
    )
    for name, v in r["read"].items():
        print(
            f"{name:<34}{v['median_s']:>10.2f}{v['rows_per_s']:>12}"
            f"{v['speed_ratio_vs_pyarrow']:>11.2f}x"
        )
    c = r["cache"]
    print(
        f"\nfrom_dataframe: first call {c['first_s']:.2f} s, second call {c['second_s']:.3f} s "
        f"(cached: {c['second_cached']}, Spark jobs: {c['second_spark_jobs']})"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="200,000 rows, local[2], < 60 s")
    p.add_argument("--rows", type=int, default=None)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cores", type=int, default=1, help="cores per worker (full run)")
    args = p.parse_args(argv)
    args.rows = args.rows or (200_000 if args.quick else 5_000_000)
    spark, cluster, where = spark_session(args.quick, args.cores)
    work = Path(tempfile.mkdtemp(prefix="bench-dataframe-"))
    try:
        write = _write_runs(spark, args, work)
        read = _read_runs(args, work)
        cache = _cache_runs(spark, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
        if cluster is not None:
            cluster.stop()
    results = {
        "cluster": where,
        "quick": args.quick,
        "rows": args.rows,
        "partitions": args.partitions,
        "runs": args.runs,
        "write": write,
        "read": read,
        "cache": cache,
    }
    _print(results)
    path = write_results("dataframe_quick" if args.quick else "dataframe", results)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
