"""Storage: reading shards from an S3 server (no cache, the node cache cold and warm) against
local files, and writing a dataset to S3 against a local folder, side by side in one run.

The S3 server is moto's (``moto_server``), started here in its own process on 127.0.0.1 and
reached through s3fs as AWS S3 or MinIO would be; it keeps objects in memory, so the S3
figures are the protocol's and the client's cost on loopback, not a network's or a disk's.

Reading: one pass of ``ShardDataset(..., decode="raw")`` over every record (CRC checked), one
process, in shard order: an epoch's throughput. Opening the dataset (reading its manifest,
and for S3 the client's first connection) happens once per run, not per epoch; it is timed
apart (``open_s``) and left out of the pass:

1. ``local``: the dataset in a local folder (in the page cache after the first pass);
2. ``s3``: the same dataset from the bucket, no cache (every shard read over HTTP);
3. ``s3 cache cold``: the bucket with ``cache_dir`` set to an empty folder (each shard fetched
   once whole, then read from the local copy);
4. ``s3 cache warm``: the same cache folder again (no fetch: every shard a hit).

Writing: ``write_dataframe`` of the same records (binary rows) with Spark ``local[2]`` to a
local folder and to the bucket (each task uploads its shard, the driver copies the winners
into place and uploads the manifest last).

Runs alternate between cases; the table shows medians of ``--runs`` runs (5; 3 with
``--quick``), MB/s of record payload, and each case's ratio to local. Goals (issue): warm cache
>= 0.95x local, cold >= 0.5x local.

    python benchmarks/bench_storage.py            # 32 shards x 64 records of 128 KiB (256 MiB)
    python benchmarks/bench_storage.py --quick    # 8 shards x 32 records of 256 KiB, < 60 s
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results

READS = ("local", "s3", "s3 cache cold", "s3 cache warm")
WRITES = ("write local", "write s3")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int) -> subprocess.Popen[bytes]:
    """``moto_server`` on 127.0.0.1:``port`` in its own process; waits until it answers."""
    exe = Path(sys.executable).with_name("moto_server")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]
    proc = subprocess.Popen(
        [*cmd, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto_server did not start within 30 s")


def make_dataset(root: Path, shards: int, records: int, size: int) -> int:
    """A dataset of ``shards`` x ``records`` random byte records of ``size`` bytes; returns
    the payload bytes."""
    from gpuspark.data.write import ShardWriter

    rng = np.random.default_rng(0)
    with ShardWriter(root, target_shard_bytes=records * size) as w:
        for i in range(shards * records):
            w.write({"data": rng.bytes(size), "label": i % 10})
    assert len(w.manifest.shards) in (shards, shards + 1), len(w.manifest.shards)  # type: ignore[union-attr]
    return shards * records * size


OPENS: dict[str, list[float]] = {}
"""Seconds to open the dataset (its manifest), per case: timed apart from the pass."""


def read_pass(root: str, cache_dir: str | None, case: str = "") -> tuple[float, int]:
    """Seconds for one pass over every record of a freshly opened dataset, and the payload
    bytes read (the open's seconds go to :data:`OPENS`)."""
    from gpuspark.data.load import ShardDataset, World

    t0 = time.perf_counter()
    ds = ShardDataset(
        root,
        decode="raw",
        shuffle=False,
        cache_dir=cache_dir,
        world=World(rank=0, world_size=1),
    )
    t1 = time.perf_counter()
    OPENS.setdefault(case, []).append(t1 - t0)
    total = sum(len(sample["data"]) for sample in ds)
    return time.perf_counter() - t1, total


def records_frame(spark: Any, count: int, size: int) -> Any:
    """``count`` rows of ``size`` bytes (hex digests repeated: made on the executors, not
    shipped from the driver), in 4 partitions, cached."""
    data = f"cast(repeat(sha2(cast(id as string), 256), {size // 64}) as binary) as data"
    df = spark.range(count, numPartitions=4).selectExpr(data, "cast(id % 10 as int) as label")
    df.cache().count()
    return df


def write_pass(df: Any, dst: str) -> float:
    from gpuspark.data.write import write_dataframe

    t0 = time.perf_counter()
    write_dataframe(df, dst, overwrite=True)
    return time.perf_counter() - t0


def _spark() -> Any:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    return (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )


def run(quick: bool, runs: int) -> dict[str, Any]:
    # --quick reads 64 MiB (less would measure the fixed cost of opening 8 shards, not a
    # pass) and writes 4 MiB (Spark's per-job cost dominates either way)
    shards, records, size = (8, 32, 256 * 1024) if quick else (32, 64, 128 * 1024)
    write_size = 16 * 1024 if quick else size
    work = Path(tempfile.mkdtemp(prefix="gpuspark-bench-storage-"))
    port = _free_port()
    server = start_server(port)
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    try:
        import fsspec

        fs = fsspec.filesystem("s3")
        fs.mkdir("bench")
        local = work / "ds"
        payload = make_dataset(local, shards, records, size)
        fs.put(str(local), "bench/ds", recursive=True)
        cases: dict[str, Callable[[], tuple[float, int]]] = {
            "local": lambda: read_pass(str(local), None, "local"),
            "s3": lambda: read_pass("s3://bench/ds", None, "s3"),
        }
        times: dict[str, list[float]] = {name: [] for name in (*READS, *WRITES)}
        read_pass(str(local), None)  # warm-up: the page cache, imports
        for i in range(runs):
            for name, case in cases.items():
                took, got = case()
                assert got == payload, (name, got, payload)
                times[name].append(took)
            cache = work / f"cache-{i}"
            for name in ("s3 cache cold", "s3 cache warm"):
                took, got = read_pass("s3://bench/ds", str(cache), name)
                assert got == payload, (name, got, payload)
                times[name].append(took)
            shutil.rmtree(cache, ignore_errors=True)
        spark = _spark()
        try:
            df = records_frame(spark, shards * records, write_size)
            write_pass(df, str(work / "w-warmup"))
            for _ in range(runs):
                times["write local"].append(write_pass(df, str(work / "w")))
                times["write s3"].append(write_pass(df, "s3://bench/w"))
        finally:
            spark.stop()
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    res = _summary(times, payload, shards, records, size, runs)
    written = shards * records * write_size / 2**20
    for name in WRITES:
        res["mib_per_s"][name] = written / res["median_s"][name]
    res["write_payload_mib"] = written
    return res


def _summary(
    times: dict[str, list[float]], payload: int, shards: int, records: int, size: int, runs: int
) -> dict[str, Any]:
    median = {name: statistics.median(ts) for name, ts in times.items()}
    mbps = {name: payload / 2**20 / s for name, s in median.items()}
    ratio = {name: mbps[name] / mbps["local"] for name in READS}
    ratio |= {name: mbps[name] / mbps["write local"] for name in WRITES}
    return {
        "shards": shards,
        "records_per_shard": records,
        "record_bytes": size,
        "payload_mib": payload / 2**20,
        "runs": runs,
        "seconds": times,
        "open_median_s": {name: statistics.median(ts) for name, ts in OPENS.items() if name},
        "median_s": median,
        "mib_per_s": mbps,
        "ratio_to_local": ratio,
        "goals": {
            "warm_cache_vs_local": {"goal": 0.95, "measured": ratio["s3 cache warm"]},
            "cold_cache_vs_local": {"goal": 0.5, "measured": ratio["s3 cache cold"]},
        },
    }


def print_table(res: dict[str, Any]) -> None:
    print(
        f"\n{res['shards']} shards x {res['records_per_shard']} records of "
        f"{res['record_bytes'] // 1024} KiB ({res['payload_mib']:.0f} MiB), "
        f"median of {res['runs']} runs; writes: {res.get('write_payload_mib', 0):.0f} MiB"
    )
    print(f"{'case':<16} {'median s':>9} {'MiB/s':>9} {'vs local':>9} {'open s':>8}")
    for name in (*READS, *WRITES):
        opened = res["open_median_s"].get(name)
        print(
            f"{name:<16} {res['median_s'][name]:>9.3f} {res['mib_per_s'][name]:>9.1f} "
            f"{res['ratio_to_local'][name]:>8.2f}x "
            + (f"{opened:>8.3f}" if opened is not None else f"{'':>8}")
        )
    for goal, g in res["goals"].items():
        verdict = "met" if g["measured"] >= g["goal"] else "missed"
        print(f"goal {goal}: >= {g['goal']}x, measured {g['measured']:.2f}x ({verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small data, < 60 s")
    parser.add_argument("--runs", type=int, default=None, help="runs per case (5; 3 --quick)")
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    res = run(args.quick, runs)
    res["quick"] = args.quick
    print_table(res)
    path = write_results("storage" + ("_quick" if args.quick else ""), res)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
