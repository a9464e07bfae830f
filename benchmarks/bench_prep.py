"""DICOM series -> shards: Spark on the embedded cluster (2 workers x 1 core) vs one process.

Both sides run the same per-series function (``gpuspark.data.sources.prep_series``) on the same
synthetic cohort: the single-process baseline lists files with ``os.walk``, reads headers,
groups by series, calls ``prep_series`` in a loop and writes with ``ShardWriter``; the Spark
side is ``gpuspark.data.prep.prep_dicom``. Runs alternate; medians are reported.

Figures: series/s, MB/s of input voxels (int16 HU, rows x cols x slices x 2 bytes), per-core
efficiency = Spark series/s / (2 x baseline series/s), and peak executor memory: RSS of each
executor JVM plus its Python workers, sampled every 0.2 s from /proc.

The cohort is generated once per (studies, size) under ``benchmarks/data/prep/``
(git-ignored) and reused; a warm-up job runs before the timed ones.

    python benchmarks/bench_prep.py            # 192 studies of 256x256 slices, 3 runs each
    python benchmarks/bench_prep.py --quick    # 8 studies of 48x48 slices, 1 run each
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results

SHAPE = (48, 48, 48)
DATA = Path(__file__).resolve().parent / "data" / "prep"


def _summary(cohort_dir: Path) -> Any:
    """What ``synth_ct`` returned when it wrote ``cohort_dir`` (dicom dir, labels, files)."""
    from types import SimpleNamespace

    files = sum(1 for p in (cohort_dir / "dicom").rglob("*") if p.is_file())
    return SimpleNamespace(
        dicom_dir=str(cohort_dir / "dicom"), labels_csv=str(cohort_dir / "labels.csv"), files=files
    )


def baseline(src: Path, dst: Path, labels: Path) -> dict[str, Any]:
    """Single process: walk, headers, group, prep_series per series, ShardWriter."""
    from gpuspark.data.sources import (
        DicomOptions,
        QuarantineError,
        prep_series,
        read_header,
        read_labels,
    )
    from gpuspark.data.write import ShardWriter

    t0 = time.perf_counter()
    table = read_labels(labels)
    groups: dict[str, list[str]] = {}
    for dirpath, _, names in os.walk(src):
        for n in names:
            path = os.path.join(dirpath, n)
            try:
                groups.setdefault(read_header(path).series_uid, []).append(path)
            except QuarantineError:
                pass
    opts = DicomOptions(shape=SHAPE)
    rows = 0
    with ShardWriter(dst, overwrite=True, target_shard_bytes=8 << 20) as w:
        for files in groups.values():
            row = prep_series(sorted(files), opts, labels=table, split=(0.8, 0.1, 0.1))
            split = row.pop("split")
            w.write({k: v for k, v in row.items() if k != "window"}, split=split)
            rows += 1
    return {"seconds": time.perf_counter() - t0, "series": rows}


class RssSampler:
    """Peak RSS per executor (JVM + its Python children) under the worker JVMs."""

    def __init__(self, worker_pids: list[int]) -> None:
        self.worker_pids = worker_pids
        self.peak_executor = 0
        self.peak_python = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()

    @staticmethod
    def _children() -> dict[int, list[int]]:
        kids: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                kids.setdefault(ppid, []).append(int(d))
        return kids

    @staticmethod
    def _rss(pid: int) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _tree(self, pid: int, kids: dict[int, list[int]]) -> list[int]:
        out, todo = [], [pid]
        while todo:
            p = todo.pop()
            out.append(p)
            todo.extend(kids.get(p, []))
        return out

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            kids = self._children()
            for w in self.worker_pids:
                for executor in kids.get(w, []):  # executor JVMs are children of a worker
                    tree = self._tree(executor, kids)
                    self.peak_executor = max(self.peak_executor, sum(map(self._rss, tree)))
                    py = [self._rss(p) for p in tree[1:]]
                    self.peak_python = max([self.peak_python, *py])


def _worker_pids(cluster: Any) -> list[int]:
    return [w.pid for w in cluster.state.workers]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small input, one run each (< 60 s)")
    ap.add_argument("--studies", type=int, default=None, help="series in the cohort")
    ap.add_argument("--size", type=int, default=None, help="rows and columns per slice")
    ap.add_argument("--runs", type=int, default=None)
    args = ap.parse_args()
    studies = args.studies or (8 if args.quick else 192)
    size = args.size or (48 if args.quick else 256)
    runs = args.runs or (1 if args.quick else 3)

    from gpuspark.cluster.local import LocalCluster
    from gpuspark.data.prep import prep_dicom
    from gpuspark.demo import load_cohort, synth_ct

    work = Path(tempfile.mkdtemp(prefix="bench_prep-"))
    try:
        cohort_dir = DATA / f"cohort-{studies}-{size}"
        if not (cohort_dir / "cohort.json").exists():
            synth_ct(cohort_dir, studies=studies, seed=1, size=size, overwrite=True)
        cohort = _summary(cohort_dir)
        params = load_cohort(cohort_dir)
        voxel_mb = sum(p.slices * p.size * p.size * 2 for p in params) / 1e6
        src, labels = Path(cohort.dicom_dir), Path(cohort.labels_csv)
        spark_s, base_s, peaks, pypeaks = [], [], [], []
        phases: list[dict[str, float]] = []
        with LocalCluster(workers=2, cores=1, memory="2g", state_dir=work / "state") as cl:
            spark = cl.session()
            prep_dicom(src, work / "warm", labels=labels, shape=SHAPE, world_size=2, spark=spark)
            for _ in range(runs):
                with RssSampler(_worker_pids(cl)) as rss:
                    res = prep_dicom(
                        src,
                        work / "ds",
                        labels=labels,
                        shape=SHAPE,
                        world_size=2,
                        spark=spark,
                        overwrite=True,
                    )
                spark_s.append(res.seconds)
                phases.append(res.timings)
                peaks.append(rss.peak_executor)
                pypeaks.append(rss.peak_python)
                b = baseline(src, work / "base", labels)
                assert b["series"] == res.rows, (b, res.rows)
                base_s.append(b["seconds"])
            spark.stop()
        n = len(params)
        t_spark, t_base = statistics.median(spark_s), statistics.median(base_s)
        sps_spark, sps_base = n / t_spark, n / t_base
        efficiency = sps_spark / (2 * sps_base)
        rows = [
            ("single process (1 core)", t_base, sps_base, voxel_mb / t_base),
            ("Spark 2 workers x 1 core", t_spark, sps_spark, voxel_mb / t_spark),
        ]
        print(
            f"{n} series, {cohort.files} files, {voxel_mb:.1f} MB of voxels, "
            f"output {SHAPE}, median of {runs} run(s)"
        )
        print(f"{'':28s} {'seconds':>9s} {'series/s':>9s} {'MB/s':>8s}")
        for name, t, sps, mbs in rows:
            print(f"{name:28s} {t:9.2f} {sps:9.2f} {mbs:8.2f}")
        print(
            f"speed-up {t_base / t_spark:.2f}x, per-core efficiency {efficiency:.2f} (goal >= 0.9)"
        )
        keys = sorted({k for ph in phases for k in ph if k != "done"})
        print(
            "Spark phases, median s: "
            + ", ".join(
                f"{k} {statistics.median(ph.get(k, 0.0) for ph in phases):.2f}" for k in keys
            )
        )
        print(
            f"peak executor RSS (JVM + Python workers) {max(peaks) / 2**20:.0f} MiB; "
            f"peak Python worker RSS {max(pypeaks) / 2**20:.0f} MiB"
        )
        write_results(
            "bench_prep_quick" if args.quick else "bench_prep",
            {
                "series": n,
                "files": cohort.files,
                "voxel_mb": voxel_mb,
                "shape": SHAPE,
                "runs": runs,
                "spark_seconds": spark_s,
                "baseline_seconds": base_s,
                "size": size,
                "spark_phase_seconds": phases,
                "median_spark_s": t_spark,
                "median_baseline_s": t_base,
                "series_per_s": {"spark": sps_spark, "baseline": sps_base},
                "mb_per_s": {"spark": voxel_mb / t_spark, "baseline": voxel_mb / t_base},
                "speedup": t_base / t_spark,
                "per_core_efficiency": efficiency,
                "peak_executor_rss_bytes": max(peaks),
                "peak_python_worker_rss_bytes": max(pypeaks),
            },
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
