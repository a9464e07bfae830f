"""Spark write throughput: gpuspark ``write_dataframe`` vs ``df.write.parquet``, same data.

Both writers get the same cached DataFrame (random, incompressible payloads, the size of
an encoded image) on the same cluster, in alternating order; each figure is the median of
``--runs`` runs. Also measures per-record zstd on real CT pixels and JPEG bytes, which
decides gpuspark's compression default.

    python benchmarks/bench_write.py            # embedded LocalCluster (2 workers)
    python benchmarks/bench_write.py --quick    # local[2], small data, < 60 s
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import spark_session, write_results


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _make_frame(spark: Any, rows: int, payload: int, partitions: int) -> Any:
    """A cached DataFrame of (label, payload bytes, 4 floats), materialized up front."""

    def gen(batches):
        import numpy as np
        import pyarrow as pa

        for b in batches:
            ids = b.column(0).to_numpy()
            rng = np.random.default_rng(int(ids[0]) if len(ids) else 0)
            blobs = [rng.bytes(payload) for _ in ids]
            vec = pa.array(
                [list(rng.random(4, dtype=np.float32)) for _ in ids], pa.list_(pa.float32())
            )
            yield pa.RecordBatch.from_arrays(
                [pa.array(ids), pa.array(blobs, pa.binary()), vec],
                names=["label", "payload", "vec"],
            )

    df = spark.range(rows, numPartitions=partitions).mapInArrow(
        gen, "label long, payload binary, vec array<float>"
    )
    df = df.cache()
    df.count()
    return df


def _time(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _spark_runs(spark: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from gpuspark.data.write import write_dataframe

    df = _make_frame(spark, args.rows, args.payload_bytes, args.partitions)
    logical = args.rows * (args.payload_bytes + 8 + 16)
    writers = {
        "parquet": lambda out: df.write.mode("overwrite").parquet(str(out)),
        "gpuspark": lambda out: write_dataframe(df, out, overwrite=True),
        "gpuspark_balanced": lambda out: write_dataframe(
            df, out, num_shards=args.partitions, overwrite=True
        ),
    }
    for name, w in writers.items():  # warm-up: Python workers, JIT
        w(work / f"warm-{name}")
    times: dict[str, list[float]] = {k: [] for k in writers}
    sizes: dict[str, int] = {}
    for run in range(args.runs):
        order = list(writers) if run % 2 == 0 else list(reversed(writers))
        for name in order:
            out = work / name
            times[name].append(_time(lambda w=writers[name], o=out: w(o)))
            sizes[name] = _dir_bytes(out)
    df.unpersist()
    rows = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        rows[name] = {
            "median_s": round(med, 3),
            "runs_s": [round(t, 3) for t in ts],
            "records_per_s": round(args.rows / med, 1),
            "MB_per_s": round(logical / med / 1e6, 2),
            "output_bytes": sizes[name],
        }
    for name in ("gpuspark", "gpuspark_balanced"):
        rows[name]["ratio_vs_parquet"] = round(
            rows[name]["records_per_s"] / rows["parquet"]["records_per_s"], 3
        )
    return {"logical_bytes": logical, "writers": rows}


def _codec_samples() -> dict[str, bytes]:
    """Representative payloads: real CT / MR pixels (pydicom test data) and a JPEG of them."""
    import io

    import numpy as np
    from PIL import Image
    from pydicom import dcmread
    from pydicom.data import get_testdata_file

    from gpuspark.data.format import EncodedImage, encode_example

    ct = dcmread(get_testdata_file("CT_small.dcm")).pixel_array.astype(np.int16)
    mr = dcmread(get_testdata_file("MR_small.dcm")).pixel_array.astype(np.int16)
    img8 = ((ct - ct.min()) * (255.0 / max(1, int(np.ptp(ct))))).astype(np.uint8)
    jpeg = io.BytesIO()
    big = Image.fromarray(img8).resize((512, 512), Image.Resampling.BICUBIC)
    big.save(jpeg, format="JPEG", quality=90)
    rng = np.random.default_rng(0)
    return {
        "ct_int16_slice": encode_example({"image": ct, "label": 1}),
        "mr_int16_slice": encode_example({"image": mr, "label": 1}),
        "jpeg_image": encode_example({"image": EncodedImage(jpeg.getvalue(), "jpeg"), "label": 1}),
        "float32_features": encode_example({"x": rng.random(4096, dtype=np.float32)}),
    }


def _codec_runs(repeat: int) -> dict[str, Any]:
    from gpuspark.data.format import compress, decode_example, decompress

    out = {}
    for name, payload in _codec_samples().items():
        packed = compress(payload, "zstd")
        n = len(payload) * repeat
        c = min(
            _time(lambda p=payload: [compress(p, "zstd") for _ in range(repeat)]) for _ in range(3)
        )
        d = min(
            _time(lambda p=packed: [decompress(p, "zstd") for _ in range(repeat)]) for _ in range(3)
        )
        dec = min(
            _time(lambda p=payload: [decode_example(p) for _ in range(repeat)]) for _ in range(3)
        )
        out[name] = {
            "payload_bytes": len(payload),
            "zstd_bytes": len(packed),
            "ratio": round(len(payload) / len(packed), 3),
            "compress_MB_per_s": round(n / c / 1e6, 1),
            "decompress_MB_per_s": round(n / d / 1e6, 1),
            "decode_example_MB_per_s": round(n / dec / 1e6, 1),
        }
    return out


def _print(results: dict[str, Any]) -> None:
    print(
        f"\nwrite throughput, {results['cluster']}, {results['rows']} rows x "
        f"{results['payload_bytes']} B, median of {results['runs']} (alternating)"
    )
    print(
        f"{'writer':<20}{'median s':>10}{'records/s':>12}{'MB/s':>9}{'out MB':>9}{'vs parquet':>12}"
    )
    for name, r in results["spark"]["writers"].items():
        ratio = r.get("ratio_vs_parquet")
        print(
            f"{name:<20}{r['median_s']:>10.2f}{r['records_per_s']:>12.0f}{r['MB_per_s']:>9.1f}"
            f"{r['output_bytes'] / 1e6:>9.1f}{'' if ratio is None else f'{ratio:.2f}x':>12}"
        )
    print("\nper-record zstd (level 3), single core")
    head = ("payload", "bytes", "ratio", "comp MB/s", "decomp MB/s", "decode MB/s")
    print(f"{head[0]:<20}{head[1]:>9}{head[2]:>8}{head[3]:>11}{head[4]:>13}{head[5]:>13}")
    for name, r in results["zstd"].items():
        print(
            f"{name:<20}{r['payload_bytes']:>9}{r['ratio']:>8.2f}{r['compress_MB_per_s']:>11.0f}"
            f"{r['decompress_MB_per_s']:>13.0f}{r['decode_example_MB_per_s']:>13.0f}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="local[2], small data, < 60 s")
    p.add_argument("--rows", type=int, default=None)
    p.add_argument("--payload-bytes", type=int, default=16384)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--runs", type=int, default=None)
    p.add_argument("--cores", type=int, default=2, help="cores per worker (full run)")
    args = p.parse_args(argv)
    args.rows = args.rows or (600 if args.quick else 10000)
    args.runs = args.runs or 3
    if args.quick:
        args.partitions = min(args.partitions, 4)
    zstd = _codec_runs(20 if args.quick else 200)
    spark, cluster, where = spark_session(args.quick, args.cores)
    work = Path(tempfile.mkdtemp(prefix="bench-write-"))
    try:
        spark_results = _spark_runs(spark, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
        if cluster is not None:
            cluster.stop()
    results = {
        "cluster": where,
        "quick": args.quick,
        "rows": args.rows,
        "payload_bytes": args.payload_bytes,
        "partitions": args.partitions,
        "runs": args.runs,
        "spark": spark_results,
        "zstd": zstd,
    }
    _print(results)
    path = write_results("bench_write_quick" if args.quick else "bench_write", results)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
