"""Batch prediction: ``gpuspark predict`` against ``pyspark.ml.functions.predict_batch_udf``
and one Python process, same network and batch size, side by side in one run.

Two workloads, each scored three ways:

1. **tabular**: ``--rows`` rows of the synthetic risk table (``gpuspark.demo.synth_risk``),
   the ``tabular`` network (128 hidden units, 2 layers; seeded weights, the encoding of a
   ``prep parquet`` run over a 20,000-row sample of the same table, or the whole table when
   it is smaller), 4,096 rows per call.
   - *gpuspark*: ``gpuspark.infer.predict(parquet, best.pt, out)`` (its quarantine job
     included);
   - *predict_batch_udf*: the same encoded columns (gpuspark's encoding expressions), a
     ``predict_batch_udf`` (``batch_size=4096``) whose ``make_predict_fn`` builds the same
     network, written as Parquet;
   - *one process*: pyarrow batches of the same file, the same encoding in pyarrow, the
     network, written as Parquet.
2. **resnet3d**: ``--studies`` synthetic CT studies (``synth_ct``, 64-pixel slices, 36-48
   slices each) scored with the demo's network (ResNet-10 of MONAI's layout, width 0.25, stem
   stride 2, re-window 100/100) on the demo's preprocessing (32^3 volumes, recorded by a
   ``prep dicom`` run over 8 other studies, 2 with ``--quick``), 8 volumes per call.
   - *gpuspark*: ``predict(studies, best.pt, out, kind="dicom")``;
   - *predict_batch_udf*: what a user writes: the file list, a ``mapInPandas`` reading every
     header, ``groupBy`` series, a pandas UDF making each volume (the same ``prep_series``
     and decoder), then ``predict_batch_udf`` (``batch_size=8``), written as Parquet;
   - *one process*: the same headers, grouping, volumes and network in a loop.

Each Spark contender runs in its own application (fresh executors and Python workers) on one
embedded cluster of 2 workers x ``--cores`` task slots, 1 torch thread per task; the first
run is cold (Python workers start, import torch, load the model), the next ``--runs`` are
warm, and the figures are their median. The one-process contender runs in a child process
with 1 torch thread and 1 pyarrow thread (its model load timed apart). Reported: rows/s, the
ratio to ``predict_batch_udf`` (target >= 1.2), Spark's per-core efficiency
``(spark rows/s / task slots) / (one-process rows/s / 1 thread)`` (target >= 0.8), model
loads per Python worker (gpuspark: the job's own per-worker count; predict_batch_udf: a line
per load in a counter file), peak RSS of the Python workers (``VmHWM`` of the executors'
``pyspark.daemon`` children) and of the one process, and the largest difference between the
contenders' probabilities.

For the tabular workload it also shows where the time goes (``breakdown``): the one process's
phases (read, encode, model, write); Spark's wall time for the scan alone, with gpuspark's
encoding, and with the Arrow way into Python and back (``noop`` sink, no model); and the
scoring tasks' own wall and CPU seconds per phase (``PredictResult.task_seconds``: waiting
for input, input matrix, model, output batch, handing it back), summed over the tasks.

``--quick`` (20,000 rows, 4 studies, 1 warm run, 1 round) makes the same comparisons in one
local application (``local[2 x --cores]``, as the other benchmarks' quick modes) shared by
every step: no cluster or executors to start. There only the first Spark run starts the
Python workers, so the later contenders' "cold" runs find them started (their model loads
still count), and the figures are dominated by per-job overheads: a regression check, not
the measurement. ``--only tabular`` (or ``resnet3d``) runs one workload and writes
``predict_<workload>[_quick].json``.

    python benchmarks/bench_predict.py                  # 1,000,000 rows, 200 studies
    python benchmarks/bench_predict.py --quick          # 20,000 rows, 4 studies, < 60 s
    python benchmarks/bench_predict.py --only tabular   # the tabular workload alone
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results

TAB_BATCH = 4096
SAMPLE = 20_000
"""Rows of the table ``prep parquet`` encodes (the model's normalisation and vocabularies)."""
VOL_BATCH = 8
VOLUME = (32, 32, 32)
SLICE_PX = 64
CONTENDERS = ("gpuspark", "predict_batch_udf", "one process")
_START = time.perf_counter()


# ----------------------------------------------------------------------------- helpers


def _say(text: str) -> None:
    """Print ``text`` after the seconds since the start (where a run's time goes)."""
    print(f"[{time.perf_counter() - _START:6.1f} s] {text}", flush=True)


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def _python_workers() -> dict[int, int]:
    """``pid -> VmHWM`` (peak RSS, kB) of the Spark Python workers below this process: the
    ``pyspark.daemon`` processes forked by the executors' daemon."""
    procs: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        procs[int(entry)] = (ppid, cmd)
    mine, todo = set(), [os.getpid()]
    while todo:
        parent = todo.pop()
        kids = [p for p, (pp, _) in procs.items() if pp == parent]
        mine.update(kids)
        todo += kids
    out = {}
    for pid in mine:
        ppid, cmd = procs[pid]
        if "pyspark.daemon" in cmd and "pyspark.daemon" in procs.get(ppid, (0, ""))[1]:
            out[pid] = _hwm_kb(pid)
    return {p: v for p, v in out.items() if v}


def _hwm_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _rss_summary(workers: dict[int, int]) -> dict[str, Any]:
    mb = sorted(round(v / 1024, 1) for v in workers.values())
    return {"workers": len(mb), "peak_rss_mb_max": max(mb, default=0.0), "peak_rss_mb": mb}


def _spark_runs(name: str, run: Callable[[int], dict[str, Any]], runs: int) -> dict[str, Any]:
    """In one application: a cold run, then ``runs`` warm ones; their times and infos."""
    times, infos = [], []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        infos.append(run(i))
        times.append(time.perf_counter() - t0)
        _say(f"  {name} run {i}: {times[-1]:.2f} s")
    return {"times": times, "runs": infos}


def _merge(apps: list[dict[str, Any]], rows: int) -> dict[str, Any]:
    """The applications (or child processes) of one contender: every cold and warm time,
    the warm median and rows/s, the highest peak memory and loads per worker."""
    cold = [a["times"][0] for a in apps]
    warm = [t for a in apps for t in a["times"][1:]]
    out: dict[str, Any] = {
        "cold_s": [round(t, 3) for t in cold],
        "warm_s": [round(t, 3) for t in warm],
        "median_s": round(_median(warm), 3),
        "cold_median_s": round(_median(cold), 3),
        "rows": rows,
        "rows_per_s": round(rows / _median(warm), 1),
        "cold_rows_per_s": round(rows / _median(cold), 1),
    }
    for key in ("spark_scan_s", "spark_floor_s", "spark_passthrough_s"):
        if key in apps[0]:
            out[key] = min(a[key] for a in apps)
    if "memory" in apps[0]:
        out["memory"] = max((a["memory"] for a in apps), key=lambda m: m["peak_rss_mb_max"])
        out["loads_per_worker"] = max(a["loads_per_worker"] for a in apps)
        out["model_loads"] = [a["model_loads"] for a in apps]
        out["slots"] = apps[0]["slots"]
        out["runs"] = [a["runs"] for a in apps]
    else:
        out["memory"] = {"peak_rss_mb_max": max(a["peak_rss_mb"] for a in apps)}
        out["load_s"] = [round(a["load_s"], 3) for a in apps]
        out["threads"] = 1
        if "phases_s" in apps[-1]:
            out["phases_s"] = apps[-1]["phases_s"]
    return out


def _loads_from_counter(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().split():
            counts[line] = counts.get(line, 0) + 1
    return counts


class _Apps:
    """The Spark applications of a run: with a ``cluster``, one per contender and setup
    step (fresh executors and Python workers each); without (``--quick``), one local
    application of ``slots`` task slots for all of them (one JVM: no cluster or executors
    to start), its SQL settings set per step and unset after it."""

    def __init__(self, cluster: Any, slots: int) -> None:
        self.cluster, self.slots = cluster, slots
        self.shared = cluster is None
        self._spark: Any = None
        self._conf: dict[str, str] = {}

    def open(self, name: str, conf: dict[str, str]) -> Any:
        """A session for step ``name`` with the SQL settings ``conf``."""
        if not self.shared:
            return _session(self.cluster, name, conf)
        if self._spark is None:
            self._spark = _local_session(self.slots)
        for key, value in conf.items():
            self._spark.conf.set(key, value)
        self._conf = dict(conf)
        return self._spark

    def close(self, spark: Any) -> None:
        """The end of a step: its application stopped, or the shared one's settings unset."""
        if not self.shared:
            spark.stop()
            return
        for key in self._conf:
            spark.conf.unset(key)
        self._conf = {}

    def stop(self) -> None:
        """Stop the shared application (``--quick``)."""
        if self._spark is not None:
            self._spark.stop()
            self._spark = None


def _local_session(slots: int) -> Any:
    """The ``--quick`` application: a ``local[slots]`` driver with the JVM start-up options
    gpuspark gives its embedded drivers (class-data-sharing archive, light JIT; see
    ``gpuspark.cluster.jvm``), as every Spark contender of the full run gets them."""
    from pyspark.sql import SparkSession

    from gpuspark.cluster import jvm

    conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    jvm.java_options(conf, driver_light=True, executor_light=False)
    builder = SparkSession.builder.master(f"local[{slots}]").appName("bench-predict-quick")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _session(cluster: Any, name: str, conf: dict[str, str]) -> Any:
    spark = cluster.session(app_name=f"bench-predict-{name}", **conf)
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1).count()  # the executors are up
    return spark


class _OneProcess:
    """The one-process contender of ``kind`` in a child process (its own threads and peak
    RSS). :meth:`start` spawns it ahead of its turn: it imports torch, pyarrow and the
    model code, then waits for its arguments on stdin (``--quick`` starts both children
    with the run, so their imports overlap the setup); :meth:`run` hands them over and
    returns its figures (the next :meth:`run` starts a new child)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> _OneProcess:
        if self.proc is None:
            cmd = [sys.executable, __file__, "--one-process", self.kind]
            pipe = subprocess.PIPE
            self.proc = subprocess.Popen(cmd, stdin=pipe, stdout=pipe, stderr=pipe, text=True)
        return self

    def run(self, args: list[str]) -> dict[str, Any]:
        proc = self.start().proc
        assert proc is not None
        out, err = proc.communicate(json.dumps(args) + "\n")
        self.proc = None
        if proc.returncode != 0:
            raise RuntimeError(f"one process {self.kind} failed:\n{err[-3000:]}")
        return json.loads(out.strip().splitlines()[-1])

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def _serve_one_process(kind: str) -> int:
    """The child of :class:`_OneProcess`: the imports, then its arguments from stdin
    (``[src, best, out, runs]``), its figures as one JSON line."""
    import pyarrow  # noqa: F401
    import torch  # noqa: F401

    import gpuspark.infer.model

    if kind == "tabular":
        fn = one_process_tabular
    else:
        import gpuspark.infer.dicom
        import gpuspark.infer.volume
        import gpuspark.train.recipes.resnet_model  # noqa: F401

        fn = one_process_volume
    src, best, out, runs = json.loads(sys.stdin.readline())
    print(json.dumps(fn(src, best, out, int(runs))))
    return 0


def _max_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    assert set(a) == set(b), f"{len(set(a) ^ set(b))} ids differ"
    return float(max(np.abs(a[k] - b[k]).max() for k in a))


def _probs(folder: Path, id_col: str, k: int = 2) -> dict[str, np.ndarray]:
    import pyarrow.dataset as ds

    cols = [id_col, *(f"prob_{i}" for i in range(k))]
    table = ds.dataset(str(folder), format="parquet").to_table(columns=cols)
    ids = table.column(id_col).to_pylist()
    mat = np.stack([table.column(f"prob_{i}").to_numpy() for i in range(k)], axis=1)
    return dict(zip((str(i) for i in ids), mat, strict=True))


# ------------------------------------------------------------------------------ tabular


def _tabular_data(
    apps: _Apps, work: Path, rows: int, files: int, conf: dict[str, str]
) -> dict[str, Any]:
    """The risk table (``rows``), a 20,000-row sample prepared by ``prep parquet`` and a
    ``best.pt`` recording that dataset's encoding (setup, not timed)."""
    import torch
    from pyspark.sql import functions as F

    from gpuspark.data import format as fmt
    from gpuspark.data.prep import prep_parquet
    from gpuspark.demo.synth_risk import risk_frame
    from gpuspark.train import recipes
    from gpuspark.train.recipes.rank import dataset_lineage

    _say("tabular: setup")
    spark = apps.open("setup-tabular", conf)
    _say("tabular: session up")
    try:
        df = risk_frame(spark, rows, 0, files).withColumn(
            "row_id", F.concat_ws("-", "customer_id", F.col("month").cast("string"))
        )
        src = work / "risk.parquet"
        df.write.mode("overwrite").parquet(str(src))
        _say("tabular: table written")
        sample = src  # a table of at most SAMPLE rows is its own sample
        if rows > SAMPLE:
            sample = work / "sample.parquet"
            spark.read.parquet(str(src)).limit(SAMPLE).write.mode("overwrite").parquet(str(sample))
        features = [c for c in df.columns if c not in ("customer_id", "default", "row_id")]
        shards = work / "risk-shards"
        prep_parquet(
            str(sample), str(shards), label="default", id="row_id", features=features,
            overwrite=True, spark=spark,
        )  # fmt: skip
        _say("tabular: sample prepared")
    finally:
        apps.close(spark)
    cfg = recipes.RecipeConfig(data=str(shards), hidden=128, layers=2)
    torch.manual_seed(0)
    net = recipes.build_tabular(cfg, 2)
    payload = {
        "recipe": "tabular",
        "epoch": 0,
        "score": 0.5,
        "scores": {},
        "config": asdict(cfg),
        "model": net.state_dict(),
        "dataset": dataset_lineage(cfg, fmt.load_manifest(str(shards))),
    }
    best = work / "tabular-run" / "best.pt"
    best.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload, best)
    nbytes = sum(p.stat().st_size for p in src.glob("*.parquet"))
    return {"src": str(src), "best": str(best), "bytes": nbytes}


def _gpuspark_case(
    apps: _Apps, data: dict, conf: dict, case: tuple[str, Path, int, int], **options: Any
) -> tuple[dict, Any]:
    """``gpuspark.infer.predict`` of ``data``, ``runs`` times on one session (each must score
    ``rows`` rows; ``case``: app name, output folder, rows, runs), with the workers' memory,
    the task slots and the model loads; the session, still running, for more measurements."""
    from gpuspark.infer import predict

    name, out, rows, runs = case
    spark = apps.open(name, conf)

    def run(i: int) -> dict[str, Any]:
        res = predict(data["src"], data["best"], out, overwrite=True, spark=spark, **options)
        assert res.rows == rows, res.rows
        info = {"seconds": res.seconds, "predict_s": res.predict_s, "timings": res.timings}
        info["task_seconds"] = res.task_seconds
        return {**info, "loads": res.model_loads, "workers": res.workers, "tasks": res.tasks}

    try:
        summary = _spark_runs("gpuspark", run, runs)
        summary["memory"] = _rss_summary(_python_workers())
        summary["slots"] = _slots(spark)
    except BaseException:
        apps.close(spark)
        raise
    loads = [r["loads"] for r in summary["runs"]]
    summary["model_loads"] = {"per_run": loads, "first_run_workers": summary["runs"][0]["workers"]}
    summary["loads_per_worker"] = _gpuspark_loads(summary)
    return summary, spark


def _tabular_gpuspark(apps: _Apps, data: dict, work: Path, args: Any, conf: dict) -> dict:
    case = ("gpuspark-tabular", work / "tab-gpuspark", args.rows, args.runs)
    summary, spark = _gpuspark_case(apps, data, conf, case, id="row_id", batch_size=TAB_BATCH)
    try:
        if not args.quick:  # diagnostics of the full run only (see _breakdown)
            summary["spark_scan_s"] = _tabular_floor(spark, data, 2, "scan")
            summary["spark_floor_s"] = _tabular_floor(spark, data, 2, "encode")
            summary["spark_passthrough_s"] = _tabular_floor(spark, data, 2, "python")
    finally:
        apps.close(spark)
    return summary


def _tabular_floor(spark: Any, data: dict[str, Any], reps: int, mode: str) -> float:
    """What Spark alone takes for the input (no model, no write), the fastest of ``reps``
    runs into the ``noop`` sink: ``scan``: the Parquet scan of the model's columns;
    ``encode``: and gpuspark's encoding expressions (no Python); ``python``: and a
    ``mapInArrow`` that hands its Arrow batches back unchanged (the way into Python and
    back)."""
    from gpuspark.infer import load_model
    from gpuspark.infer.features import encoded_frame
    from gpuspark.infer.table import arrow_batches

    serving = load_model(data["best"]).serving
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        df = spark.read.parquet(data["src"])
        if mode == "scan":
            df = df.select("row_id", *serving.features)
        else:
            df = encoded_frame(df, serving, ("row_id",))
        if mode == "python":
            df = df.mapInArrow(_same_batches, df.schema)
        with arrow_batches(spark, TAB_BATCH):
            df.write.format("noop").mode("overwrite").save()
        times.append(time.perf_counter() - t0)
    return round(min(times), 3)


def _same_batches(batches: Any) -> Any:
    yield from batches


def _gpuspark_loads(summary: dict[str, Any]) -> float:
    """Loads per Python worker over every run: the cold run's loads over its workers (later
    runs reuse the cached model: 0 loads each, checked)."""
    runs = summary["runs"]
    first = runs[0]
    assert all(r["loads"] == 0 for r in runs[1:]), runs
    return round(first["loads"] / first["workers"], 3) if first["workers"] else 0.0


def _slots(spark: Any) -> int:
    from gpuspark.data.prep.common import cores

    return int(cores(spark))


def _tabular_udf(apps: _Apps, data: dict, work: Path, args: Any, conf: dict) -> dict:
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DoubleType

    from gpuspark.infer import load_model
    from gpuspark.infer.features import CODES_COL, NUMBERS_COL, REASON_COL, encoded_frame

    loaded = load_model(data["best"])
    serving = loaded.serving
    counter = work / "udf-tabular-loads.txt"
    counter.unlink(missing_ok=True)
    best, counter_s = data["best"], str(counter)

    def make_predict_fn() -> Callable[..., Any]:
        import numpy as np
        import torch

        from gpuspark.infer.model import build_network

        with open(counter_s, "a") as f:
            f.write(f"{os.getpid()}\n")
        torch.set_num_threads(1)
        net = build_network(Path(best).read_bytes(), best)

        def predict(x: Any, c: Any) -> Any:
            inp = np.concatenate([x.astype(np.float32), c.astype(np.float32)], axis=1)
            with torch.inference_mode():
                return net(torch.from_numpy(inp)).softmax(1).numpy().astype(np.float64)

        return predict

    udf = predict_batch_udf(
        make_predict_fn,
        return_type=ArrayType(DoubleType()),
        batch_size=TAB_BATCH,
        input_tensor_shapes=[[len(serving.numeric)], [len(serving.categorical)]],
    )
    spark = apps.open("udf-tabular", conf)
    out = work / "tab-udf"

    def run(i: int) -> dict[str, Any]:
        df = spark.read.parquet(data["src"])
        ok = encoded_frame(df, serving, ("row_id",)).filter(F.col(REASON_COL).isNull())
        p = udf(NUMBERS_COL, CODES_COL)
        scored = ok.select("row_id", p.alias("p")).select(
            "row_id",
            F.col("p")[0].alias("prob_0"),
            F.col("p")[1].alias("prob_1"),
            (F.col("p")[1] > F.col("p")[0]).cast("long").alias("prediction"),
        )
        scored.write.mode("overwrite").parquet(str(out))
        return {}

    try:
        summary = _spark_runs("predict_batch_udf", run, args.runs)
        summary["memory"] = _rss_summary(_python_workers())
        summary["slots"] = _slots(spark)
    finally:
        apps.close(spark)
    loads = _loads_from_counter(counter)
    summary["model_loads"] = loads
    summary["loads_per_worker"] = round(max(loads.values(), default=0), 3)
    return summary


def one_process_tabular(src: str, best: str, out: str, runs: int) -> dict[str, Any]:
    """The one-process contender (child process): pyarrow batches of 4,096 rows, the
    encoding of ``prep parquet`` in pyarrow, the network, a Parquet file."""
    import resource

    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    import torch

    from gpuspark.infer.model import build_network, load_model

    torch.set_num_threads(1)
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    t0 = time.perf_counter()
    loaded = load_model(best)
    net = build_network(loaded.data, loaded.path)
    load_s = time.perf_counter() - t0
    s = loaded.serving
    vocab = [pa.array(v, pa.string()) for v in s.vocab]
    times, rows = [], 0
    phases: dict[str, float] = {}
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        rows = 0
        phases = dict.fromkeys(("read", "encode", "model", "write"), 0.0)
        dataset = ds.dataset(src, format="parquet")
        writer = None
        cols = ["row_id", *s.numeric, *s.categorical]
        lap = time.perf_counter()
        for batch in dataset.to_batches(columns=cols, batch_size=TAB_BATCH, use_threads=False):
            lap = _lap(phases, "read", lap)
            x = _encode(batch, s, vocab)
            lap = _lap(phases, "encode", lap)
            with torch.inference_mode():
                probs = net(torch.from_numpy(x)).softmax(1).numpy().astype(np.float64)
            lap = _lap(phases, "model", lap)
            table = pa.table(
                {
                    "row_id": batch.column("row_id"),
                    "prob_0": probs[:, 0],
                    "prob_1": probs[:, 1],
                    "prediction": probs.argmax(1).astype(np.int64),
                }
            )
            writer = writer or pq.ParquetWriter(out, table.schema)
            writer.write_table(table)
            rows += batch.num_rows
            lap = _lap(phases, "write", lap)
        assert writer is not None
        writer.close()
        _lap(phases, "write", lap)
        times.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out_phases = {k: round(v, 3) for k, v in phases.items()}  # the last run's
    return {
        "load_s": load_s,
        "times": times,
        "rows": rows,
        "peak_rss_mb": round(rss / 1024, 1),
        "phases_s": out_phases,
    }


def _lap(phases: dict[str, float], phase: str, since: float) -> float:
    now = time.perf_counter()
    phases[phase] += now - since
    return now


def _encode(batch: Any, s: Any, vocab: list[Any]) -> np.ndarray:
    """A batch as ``prep parquet`` encodes it: numbers as float32 (null: NaN, the network's
    missing value), categories as vocabulary index + 1 of their text (0: null or unseen)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    x = np.empty((n, len(s.numeric) + len(s.categorical)), dtype=np.float32)
    for j, name in enumerate(s.numeric):
        col = pc.cast(pc.cast(batch.column(name), pa.float64()), pa.float32())
        x[:, j] = col.to_numpy(zero_copy_only=False)  # nulls become NaN
    for j, name in enumerate(s.categorical):
        text = pc.cast(batch.column(name), pa.string())
        codes = pc.fill_null(pc.add(pc.index_in(text, value_set=vocab[j]), 1), 0)
        x[:, len(s.numeric) + j] = codes.to_numpy(zero_copy_only=False)
    return x


# ----------------------------------------------------------------------------- resnet3d


def _volume_data(
    apps: _Apps, work: Path, counts: tuple[int, int], conf: dict[str, str]
) -> dict[str, Any]:
    """``counts[0]`` synthetic CT studies to score, and a ``best.pt`` of the demo's network
    recording a ``prep dicom`` run (the demo's options) over ``counts[1]`` other studies."""
    import torch

    from gpuspark.data import format as fmt
    from gpuspark.data.prep import prep_dicom
    from gpuspark.demo import synth_ct
    from gpuspark.train import recipes
    from gpuspark.train.recipes.rank import dataset_lineage

    studies, train_studies = counts
    _say("resnet3d: setup")
    synth_ct(work / "ct", studies=studies, seed=1, size=SLICE_PX, overwrite=True)
    synth_ct(work / "ct-train", studies=train_studies, seed=2, size=SLICE_PX, overwrite=True)
    _say("resnet3d: studies written")
    spark = apps.open("setup-resnet3d", conf)
    shards = work / "ct-shards"
    try:
        prep_dicom(
            work / "ct-train" / "dicom", shards, labels=work / "ct-train" / "labels.csv",
            shape=VOLUME, split=None, overwrite=True, spark=spark,
        )  # fmt: skip
    finally:
        apps.close(spark)
    cfg = recipes.RecipeConfig(
        data=str(shards), depth=10, width=0.25, stem_stride=2, window=(100.0, 100.0)
    )
    torch.manual_seed(0)
    net = recipes.get_recipe("resnet3d").build_model(cfg, 2)
    payload = {
        "recipe": "resnet3d",
        "epoch": 0,
        "score": 0.5,
        "scores": {},
        "config": asdict(cfg),
        "model": net.state_dict(),
        "dataset": dataset_lineage(cfg, fmt.load_manifest(str(shards))),
    }
    best = work / "resnet3d-run" / "best.pt"
    best.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload, best)
    files = sum(1 for p in (work / "ct" / "dicom").rglob("*") if p.is_file())
    return {"src": str(work / "ct" / "dicom"), "best": str(best), "files": files}


def _volume_gpuspark(apps: _Apps, data: dict, work: Path, args: Any, conf: dict) -> dict:
    case = ("gpuspark-resnet3d", work / "vol-gpuspark", args.studies, args.runs)
    options = {"kind": "dicom", "batch_size": VOL_BATCH}
    summary, spark = _gpuspark_case(apps, data, conf, case, **options)
    apps.close(spark)
    return summary


def _volume_udf(apps: _Apps, data: dict, work: Path, args: Any, conf: dict) -> dict:
    import pandas as pd
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DoubleType, FloatType

    from gpuspark.infer import load_volume_model
    from gpuspark.infer.dicom import volume_input

    loaded = load_volume_model(data["best"])
    options, decode, best = loaded.options, loaded.decode, data["best"]
    counter = work / "udf-resnet3d-loads.txt"
    counter.unlink(missing_ok=True)
    counter_s = str(counter)
    src = data["src"]

    def headers(frames: Any) -> Any:
        from gpuspark.data.sources import read_header

        for frame in frames:
            series: list[str | None] = []
            for path in frame["path"]:
                try:
                    series.append(str(read_header(path).series_uid))
                except Exception:
                    series.append(None)
            yield pd.DataFrame({"path": frame["path"], "series": series})

    def make_volumes(files: Any) -> Any:
        return pd.Series([volume_input(options, decode, list(f))[0].ravel() for f in files])

    # real types, not the strings of `from __future__ import annotations`: Spark reads them
    make_volumes.__annotations__ = {"files": pd.Series, "return": pd.Series}
    volume = F.pandas_udf(make_volumes, ArrayType(FloatType()))

    def make_predict_fn() -> Callable[..., Any]:
        import torch

        from gpuspark.infer.volume import build_volume_network

        with open(counter_s, "a") as f:
            f.write(f"{os.getpid()}\n")
        torch.set_num_threads(1)
        net = build_volume_network(Path(best).read_bytes(), best)

        def predict(x: Any) -> Any:
            with torch.inference_mode():
                out = net(torch.from_numpy(x.astype(np.float32)))
                return out.softmax(1).numpy().astype(np.float64)

        return predict

    udf = predict_batch_udf(
        make_predict_fn,
        return_type=ArrayType(DoubleType()),
        batch_size=VOL_BATCH,
        input_tensor_shapes=[[1, *VOLUME]],
    )
    spark = apps.open("udf-resnet3d", conf)
    out = work / "vol-udf"
    slots = _slots(spark)

    def run(i: int) -> dict[str, Any]:
        paths = sorted(str(p) for p in Path(src).rglob("*") if p.is_file())
        rdd = spark.sparkContext.parallelize([(p,) for p in paths], 2 * slots)
        heads = spark.createDataFrame(rdd, "path string").mapInPandas(
            headers, "path string, series string"
        )
        series = heads.filter(F.col("series").isNotNull()).groupBy("series")
        series = series.agg(F.sort_array(F.collect_list("path")).alias("files"))
        p = udf(volume("files"))
        scored = series.select(F.col("series").alias("id"), p.alias("p")).select(
            "id",
            F.col("p")[0].alias("prob_0"),
            F.col("p")[1].alias("prob_1"),
            (F.col("p")[1] > F.col("p")[0]).cast("long").alias("prediction"),
        )
        scored.write.mode("overwrite").parquet(str(out))
        return {}

    try:
        summary = _spark_runs("predict_batch_udf", run, args.runs)
        summary["memory"] = _rss_summary(_python_workers())
        summary["slots"] = slots
    finally:
        apps.close(spark)
    loads = _loads_from_counter(counter)
    summary["model_loads"] = loads
    summary["loads_per_worker"] = round(max(loads.values(), default=0), 3)
    return summary


def one_process_volume(src: str, best: str, out: str, runs: int) -> dict[str, Any]:
    """The one-process contender (child process): headers, series, volumes (the same
    ``prep_series`` and decoder), batches of 8 through the network, a Parquet file."""
    import resource

    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from gpuspark.data.sources import read_header
    from gpuspark.infer import load_volume_model
    from gpuspark.infer.dicom import volume_input
    from gpuspark.infer.volume import build_volume_network

    torch.set_num_threads(1)
    pa.set_cpu_count(1)
    t0 = time.perf_counter()
    loaded = load_volume_model(best)
    net = build_volume_network(loaded.data, loaded.path)
    load_s = time.perf_counter() - t0
    times, rows = [], 0
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        files: dict[str, list[str]] = {}
        for p in sorted(Path(src).rglob("*")):
            if p.is_file():
                try:
                    files.setdefault(str(read_header(str(p)).series_uid), []).append(str(p))
                except Exception:
                    continue
        ids, probs = sorted(files), []
        for start in range(0, len(ids), VOL_BATCH):
            chunk = ids[start : start + VOL_BATCH]
            x = np.stack([volume_input(loaded.options, loaded.decode, files[i])[0] for i in chunk])
            with torch.inference_mode():
                probs.append(net(torch.from_numpy(x)).softmax(1).numpy().astype(np.float64))
        mat = np.concatenate(probs)
        table = pa.table(
            {"id": ids, "prob_0": mat[:, 0], "prob_1": mat[:, 1], "prediction": mat.argmax(1)}
        )
        pq.write_table(table, out)
        rows = len(ids)
        times.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"load_s": load_s, "times": times, "rows": rows, "peak_rss_mb": round(rss / 1024, 1)}


# --------------------------------------------------------------------------------- main


def _compare(name: str, results: dict[str, Any], diffs: dict[str, float]) -> dict[str, Any]:
    """The three side by side, the ratio to predict_batch_udf and Spark's per-core
    efficiency against the one process (1 thread)."""
    gp, udf, one = (results[k] for k in CONTENDERS)
    slots = gp["slots"]
    floor = gp.pop("spark_floor_s", None)
    scan = gp.pop("spark_scan_s", None)
    passthrough = gp.pop("spark_passthrough_s", None)
    out = {
        **results,
        "ratio_vs_predict_batch_udf": round(gp["rows_per_s"] / udf["rows_per_s"], 3),
        "ratio_vs_predict_batch_udf_cold": round(gp["cold_rows_per_s"] / udf["cold_rows_per_s"], 3),
        "per_core_efficiency": round((gp["rows_per_s"] / slots) / one["rows_per_s"], 3),
        "per_core_efficiency_udf": round((udf["rows_per_s"] / udf["slots"]) / one["rows_per_s"], 3),
        "max_prob_diff_vs_one_process": diffs,
    }
    if floor is not None:  # Spark's scan and encoding alone, as if Python and the model were free
        out["spark_floor"] = {
            "seconds": floor,
            "rows_per_s": round(gp["rows"] / floor, 1),
            "per_core_efficiency_bound": round((gp["rows"] / floor / slots) / one["rows_per_s"], 3),
        }
    if "phases_s" in one:
        out["breakdown"] = _breakdown(gp, one, (scan, floor, passthrough))
    out["targets_met"] = {
        "ratio_vs_predict_batch_udf >= 1.2": out["ratio_vs_predict_batch_udf"] >= 1.2,
        "per_core_efficiency >= 0.8": out["per_core_efficiency"] >= 0.8,
        "loads_per_worker == 1": gp["loads_per_worker"] == 1.0,
    }
    print(f"\n{name}")
    _print_table(out, slots)
    return out


_WALLS = ("scan_noop", "scan_encode_noop", "scan_encode_arrow_python_roundtrip_noop", "predict_job")


def _breakdown(gp: dict, one: dict, spark_s: tuple[float | None, ...]) -> dict[str, Any]:
    """Where the time goes, as seconds of the whole input: the one process's phases (1
    thread); Spark's wall times (:func:`_tabular_floor`: the scan; the scan and encoding;
    with the Arrow way into Python and back: full runs only; and the whole job, warm
    median); and the Python side of gpuspark's scoring tasks (their
    :class:`~gpuspark.infer.worker.TaskClock` phases, summed over the tasks: core seconds;
    the median of the warm runs)."""
    warm = [r for app in gp["runs"] for r in app[1:] if r.get("task_seconds")]
    phases = sorted({k for r in warm for k in r["task_seconds"]})
    tasks = {k: round(_median([r["task_seconds"].get(k, 0.0) for r in warm]), 3) for k in phases}
    return {
        "one_process_phases_s": one.get("phases_s", {}),
        "spark_wall_s": {
            k: v for k, v in zip(_WALLS, (*spark_s, gp["median_s"]), strict=True) if v is not None
        },
        "gpuspark_task_core_s": tasks,
        "slots": gp["slots"],
    }


def _print_table(out: dict[str, Any], slots: int) -> None:
    head = f"{'contender':<20}{'cold s':>9}{'median s':>10}{'rows/s':>12}{'loads/wkr':>11}"
    print(head + f"{'peak RSS MB':>13}")
    for name in CONTENDERS:
        r = out[name]
        loads = r.get("loads_per_worker", "-")
        print(
            f"{name:<20}{r['cold_median_s']:>9.2f}{r['median_s']:>10.2f}{r['rows_per_s']:>12,.1f}"
            f"{loads!s:>11}{r['memory']['peak_rss_mb_max']!s:>13}"
        )
    print(
        f"gpuspark / predict_batch_udf: {out['ratio_vs_predict_batch_udf']:.2f}x warm, "
        f"{out['ratio_vs_predict_batch_udf_cold']:.2f}x cold (target >= 1.2); per-core "
        f"efficiency vs one process ({slots} slots vs 1 thread): "
        f"{out['per_core_efficiency']:.2f} (target >= 0.8; predict_batch_udf: "
        f"{out['per_core_efficiency_udf']:.2f}); max |prob diff| vs one process: "
        f"{out['max_prob_diff_vs_one_process']}"
    )
    if "breakdown" in out:
        b = out["breakdown"]
        print(f"one process phases (s): {b['one_process_phases_s']}")
        print(f"Spark wall (s, {b['slots']} slots): {b['spark_wall_s']}")
        print(f"gpuspark task phases (core s, summed over tasks): {b['gpuspark_task_core_s']}")
    if "spark_floor" in out:
        f = out["spark_floor"]
        print(
            f"Spark alone (scan + encoding, no Python): {f['seconds']:.2f} s, "
            f"{f['rows_per_s']:,.0f} rows/s: per-core efficiency at most "
            f"{f['per_core_efficiency_bound']:.2f}"
        )


def _workload(
    name: str,
    apps: _Apps,
    work: Path,
    args: Any,
    conf: dict,
    data: dict,
    which: tuple,
    one: _OneProcess,
) -> dict[str, Any]:
    """``args.rounds`` rounds of the three contenders, in a rotating order (the load of a
    shared machine changes over minutes)."""
    run_gp, run_udf, one_kind, id_col, out_gp, out_udf = which
    one_out = work / f"{one_kind}-one.parquet"
    one_args = [data["src"], data["best"], str(one_out), str(args.runs)]
    fns: dict[str, Callable[[], dict[str, Any]]] = {
        "gpuspark": lambda: run_gp(apps, data, work, args, conf),
        "predict_batch_udf": lambda: run_udf(apps, data, work, args, conf),
        "one process": lambda: one.run(one_args),
    }
    done: dict[str, list[dict[str, Any]]] = {k: [] for k in CONTENDERS}
    for r in range(args.rounds):
        for k in CONTENDERS[r % 3 :] + CONTENDERS[: r % 3]:
            _say(f"{name}: {k}")
            done[k].append(fns[k]())
    rows = args.rows if one_kind == "tabular" else args.studies
    results = {k: _merge(done[k], rows) for k in CONTENDERS}
    ref = _probs(one_out, id_col)
    diffs = {
        "gpuspark": _max_diff(_probs(work / out_gp, id_col), ref),
        "predict_batch_udf": _max_diff(_probs(work / out_udf, id_col), ref),
    }
    return _compare(name, results, diffs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small inputs (< 60 s unloaded)")
    parser.add_argument("--rows", type=int, default=None, help="table rows [1,000,000]")
    parser.add_argument("--studies", type=int, default=None, help="CT studies [200]")
    parser.add_argument("--runs", type=int, default=None, help="warm runs per application [3]")
    parser.add_argument("--rounds", type=int, default=None, help="applications per contender [2]")
    parser.add_argument("--cores", type=int, default=1, help="task slots per Spark worker")
    parser.add_argument(
        "--only", choices=("tabular", "resnet3d"), default=None, help="one workload only"
    )
    parser.add_argument("--one-process", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_process:
        return _serve_one_process(args.one_process)
    args.rows = args.rows or (20_000 if args.quick else 1_000_000)
    args.studies = args.studies or (4 if args.quick else 200)
    args.runs = args.runs or (1 if args.quick else 3)
    args.rounds = args.rounds or (1 if args.quick else 2)
    return _run(args)


def _run(args: Any) -> int:
    from gpuspark.cluster.local import LocalCluster

    os.environ["PYSPARK_PYTHON"] = sys.executable
    work = Path(tempfile.mkdtemp(prefix="gpuspark-bench-predict-"))
    load_before = os.getloadavg()[0]
    t_all = time.perf_counter()
    slots = 2 * args.cores
    cluster = None
    if not args.quick:
        state = work / "c"
        cluster = LocalCluster(workers=2, cores=args.cores, memory="3g", gpus=1, state_dir=state)
    where = (
        f"local[{slots}] (one application for every step)"
        if cluster is None
        else f"LocalCluster(workers=2, cores={args.cores}, gpus=1 simulated)"
    )
    payload: dict[str, Any] = {
        "quick": args.quick,
        "settings": {
            "cluster": where,
            "torch_threads_per_task": 1,
            "one_process_threads": "torch 1, pyarrow 1",
            "warm_runs_per_application": args.runs,
            "rounds": args.rounds,
            "shared_application": args.quick,
            "tabular_rows": args.rows,
            "tabular_batch": TAB_BATCH,
            "studies": args.studies,
            "volume": list(VOLUME),
            "volume_batch": VOL_BATCH,
            "load_avg_1m_before": load_before,
        },
    }
    apps = _Apps(cluster, slots)
    ones = {kind: _OneProcess(kind) for kind in ("tabular", "resnet3d")}
    if args.quick:
        for kind, one in ones.items():
            if args.only in (None, kind):
                one.start()
    try:
        if cluster is not None:
            cluster.start()
        if args.only in (None, "tabular"):
            data = _tabular_data(apps, work, args.rows, 4 if args.quick else 8, {})
            # 4 input splits per task slot: both Spark contenders read the same splits
            split = max(2**20, data["bytes"] // (4 * 2 * args.cores))
            conf = {"spark.sql.files.maxPartitionBytes": str(split)}
            which = (
                _tabular_gpuspark,
                _tabular_udf,
                "tabular",
                "row_id",
                "tab-gpuspark",
                "tab-udf",
            )
            payload["tabular"] = _workload(
                "tabular", apps, work, args, conf, data, which, ones["tabular"]
            )
            payload["tabular"]["input_bytes"] = data["bytes"]
        if args.only in (None, "resnet3d"):
            conf = {"spark.sql.shuffle.partitions": str(4 * args.cores)}
            studies = (args.studies, 2 if args.quick else 8)
            data = _volume_data(apps, work, studies, conf)
            which = (_volume_gpuspark, _volume_udf, "resnet3d", "id", "vol-gpuspark", "vol-udf")
            payload["resnet3d"] = _workload(
                "resnet3d", apps, work, args, conf, data, which, ones["resnet3d"]
            )
            payload["resnet3d"]["input_files"] = data["files"]
    finally:
        for one in ones.values():
            one.stop()
        apps.stop()
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    payload["settings"]["load_avg_1m_after"] = os.getloadavg()[0]
    payload["seconds"] = round(time.perf_counter() - t_all, 1)
    name = "predict" + (f"_{args.only}" if args.only else "") + ("_quick" if args.quick else "")
    print(f"\n{payload['seconds']} s; wrote {write_results(name, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
