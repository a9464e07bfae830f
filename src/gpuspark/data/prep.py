"""Spark preprocessing jobs: DICOM series and image folders to gpuspark shards.

The work is Spark's: files are listed by Spark's ``binaryFile`` source (only ``path`` and
``length`` are selected, so the listing reads no file contents), headers and pixels are read
inside executor tasks by path, a DICOM series is assembled in one task
(``repartition(n, series_uid).groupBy(series_uid).applyInArrow``), and the rows go through
:func:`gpuspark.data.write.write_dataframe` with shards balanced for the training world size.

Every input ends up either in a row or in ``quarantine.parquet`` (path, series if known,
reason, exception type, stage) inside the dataset directory; the counts are in the manifest's
``extra["quarantine"]`` and in :class:`PrepResult`: ``inputs == files_in_rows + quarantined``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuspark.data.sources import QuarantineError
from gpuspark.errors import GpusparkError

__all__ = ["PrepError", "PrepResult", "Progress", "prep_dicom", "prep_images", "spark_for_job"]

QUARANTINE_FILE = "quarantine.parquet"
SHARD_BYTES = 128 << 20
Progress = Callable[[dict[str, Any]], None]

_HEADER_DDL = "path string, length long, series_uid string, reason string, error_type string"
_SERIES_DDL = (
    "status string, id string, series_uid string, study_uid string, patient_hash string, "
    "modality string, label int, split string, volume binary, shape array<int>, "
    "dtype string, spacing array<double>, orig_spacing array<double>, orig_shape array<int>, "
    "slices int, files int, window string, q_paths array<string>, reason string, "
    "error_type string"
)
_IMAGE_DDL = (
    "status string, id string, label int, label_name string, split string, image binary, "
    "format string, shape array<int>, width int, height int, path string, reason string, "
    "error_type string"
)


class PrepError(GpusparkError):
    """A preprocessing job cannot start or finish (bad source, destination or options)."""


@dataclass
class PrepResult:
    """What a prep job did. ``inputs == files_in_rows + quarantined`` always holds."""

    dataset: str
    kind: str
    inputs: int
    rows: int
    files_in_rows: int
    quarantined: int
    quarantined_items: int
    by_reason: dict[str, int]
    splits: dict[str, int]
    shards: int
    bytes: int
    seconds: float
    quarantine_path: str | None
    label_map: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain-data view (for ``--json``)."""
        return asdict(self)


# --------------------------------------------------------------------------- session


def _local_cores_per_worker(workers: int) -> int:
    return max(1, (os.cpu_count() or 2) // workers)


@contextlib.contextmanager
def spark_for_job(spark: Any = None, master: str | None = None, **conf: Any) -> Iterator[Any]:
    """A SparkSession for one job: ``spark`` as given; else one on ``master``; else one on the
    running embedded cluster; else an embedded cluster started for the job and stopped after.
    Sessions built here are stopped at the end."""
    if spark is not None:
        yield spark
        return
    from gpuspark.cluster.builder import session
    from gpuspark.cluster.local import LocalCluster

    if master is None and LocalCluster.running() is None:
        with LocalCluster(workers=2, cores=_local_cores_per_worker(2)) as cluster:
            s = cluster.session(**conf)
            try:
                yield s
            finally:
                s.stop()
        return
    from pyspark.sql import SparkSession

    before = SparkSession.getActiveSession()
    s = session(master=master, **conf)
    try:
        yield s
    finally:
        if s is not before:  # never stop a session the caller already had
            s.stop()


# --------------------------------------------------------------------------- progress


class _Watcher:
    """Polls Spark's status tracker and reports tasks done/total and accumulators."""

    def __init__(self, spark: Any, progress: Progress | None, counters: dict[str, Any]) -> None:
        self.sc = spark.sparkContext
        self.progress = progress
        self.counters = counters
        self.stages: dict[int, tuple[int, int]] = {}
        self._open: set[int] = set()
        self._phase = "listing"
        self.t0 = time.monotonic()
        self._t_phase = self.t0
        self.timings: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def phase(self) -> str:
        """The current phase of the job (listing, headers+series or images, write)."""
        return self._phase

    @phase.setter
    def phase(self, value: str) -> None:
        now = time.monotonic()
        self.timings[self._phase] = round(now - self._t_phase, 3)
        self._phase, self._t_phase = value, now

    def __enter__(self) -> _Watcher:
        if self.progress is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.phase = "done"
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
            self._report()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(Exception):
                self._report()

    def _report(self) -> None:
        tracker = self.sc.statusTracker()
        active = set(tracker.getActiveStageIds())
        # one more look at stages that just finished, then they are final
        for sid in active | (self._open - active):
            info = tracker.getStageInfo(sid)
            if info is not None:
                self.stages[sid] = (info.numTasks, info.numCompletedTasks)
        self._open = active
        total = sum(n for n, _ in self.stages.values())
        done = sum(d for _, d in self.stages.values())
        elapsed = time.monotonic() - self.t0
        rows = self.counters["rows"].value
        assert self.progress is not None
        self.progress(
            {
                "phase": self._phase,
                "tasks_done": done,
                "tasks_total": total,
                "rows": rows,
                "quarantined": self.counters["quarantined"].value,
                "rows_per_s": rows / elapsed if elapsed > 0 else 0.0,
                "elapsed_s": elapsed,
            }
        )


# --------------------------------------------------------------------------- helpers


def _check_src(src: str) -> str:
    if "://" in src and not src.startswith("file:"):
        return src
    p = Path(src.removeprefix("file:")).expanduser()
    if not p.is_dir():
        raise PrepError(
            f"source {src} is not a directory", remedy="pass the folder holding the files"
        )
    return str(p.resolve())


def _list_files(spark: Any, src: str) -> Any:
    """(path, length) of every file below ``src``: Spark lists; contents are not read."""
    reader = spark.read.format("binaryFile").option("recursiveFileLookup", "true")
    return reader.load(src).select("path", "length")


def _task_count(spark: Any, items: int, per_task: int, per_core: int = 4) -> int:
    """Enough tasks to balance the cores, but at least ``per_task`` items per task."""
    return max(1, min(-(-items // per_task), spark.sparkContext.defaultParallelism * per_core))


def _write_quarantine(dst: str, rows: list[dict[str, Any]]) -> str | None:
    """Write ``quarantine.parquet`` atomically into ``dst`` (always, even when empty)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [(n, pa.string()) for n in ("path", "series_uid", "reason", "error_type", "stage")]
    )
    table = pa.Table.from_pylist(rows, schema=schema)
    final = os.path.join(dst, QUARANTINE_FILE)
    tmp = os.path.join(dst, f".tmp-{os.getpid()}-{QUARANTINE_FILE}")
    pq.write_table(table, tmp)
    os.replace(tmp, final)
    return final


def _prepare_dst(dst: str, overwrite: bool) -> str:
    root = os.path.abspath(os.path.expanduser(dst))
    old = os.path.join(root, QUARANTINE_FILE)
    if overwrite and os.path.exists(old):
        os.unlink(old)  # write_dataframe refuses unknown files in a dataset directory
    return root


def _by_reason(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        key = r["reason"].split(":")[0][:80]
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _split_counts(manifest: Any) -> dict[str, int]:
    records = {s.path: s.records for s in manifest.shards}
    return {name: sum(records[p] for p in paths) for name, paths in manifest.splits.items()}


# --------------------------------------------------------------------------- DICOM


def _arrow_schema(ddl: str) -> Any:
    """The pyarrow schema of a Spark DDL string made of the few types used here."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "long": pa.int64(),
        "int": pa.int32(),
        "binary": pa.binary(),
        "array<int>": pa.list_(pa.int32()),
        "array<double>": pa.list_(pa.float64()),
        "array<string>": pa.list_(pa.string()),
    }
    return pa.schema([(n, types[t]) for n, t in (c.split(" ", 1) for c in ddl.split(", "))])


def _header_fn(rows_acc: Any, q_acc: Any) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def headers(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from gpuspark.data.dicom import read_header

        schema = _arrow_schema(_HEADER_DDL)
        for batch in batches:
            out = []
            paths = batch.column("path").to_pylist()
            lengths = batch.column("length").to_pylist()
            for path, length in zip(paths, lengths, strict=True):
                rec = {"path": path, "length": length}
                try:
                    rec["series_uid"] = read_header(path).series_uid
                except Exception as e:  # never fail the job on one file
                    q_acc.add(1)
                    qe = QuarantineError.wrap(e, "unreadable DICOM", path)
                    rec.update(reason=qe.reason, error_type=qe.error_type)
                out.append(rec)
            yield pa.RecordBatch.from_pylist(out, schema=schema)

    return headers


def _series_fn(
    options: Any, labels: Any, split: Sequence[float] | None, rows_acc: Any, q_acc: Any
) -> Callable[[Any], Any]:
    cols = [c.split()[0] for c in _SERIES_DDL.split(", ")]

    def one_series(table: Any) -> Any:
        import pyarrow as pa

        from gpuspark.data.dicom import prep_series

        schema = _arrow_schema(_SERIES_DDL)
        files = sorted(table.column("path").to_pylist())
        uid = table.column("series_uid")[0].as_py()
        try:
            row = prep_series(files, options, labels=labels, split=split)
        except Exception as e:
            qe = QuarantineError.wrap(e, "series failed")
            q_acc.add(len(files))
            err = qe.error_type if qe.path is None else f"{qe.error_type} ({qe.path})"
            rec = {
                "status": "quarantined",
                "series_uid": uid,
                "q_paths": files,
                "reason": qe.reason,
                "error_type": err,
            }
            return pa.Table.from_pylist([rec], schema=schema)
        rows_acc.add(1)
        vol = row.pop("volume")
        row.update(status="ok", volume=vol.tobytes(), shape=list(vol.shape), dtype=str(vol.dtype))
        return pa.Table.from_pylist([{c: row.get(c) for c in cols}], schema=schema)

    return one_series


def _dicom_sample(row: dict[str, Any]) -> dict[str, Any]:
    """Spark row -> shard sample (runs in the write tasks)."""
    import numpy as np

    vol = np.frombuffer(row["volume"], dtype=row["dtype"]).reshape(row["shape"])
    sample = {
        "volume": vol,
        "id": row["id"],
        "series_uid": row["series_uid"],
        "study_uid": row["study_uid"],
        "patient_hash": row["patient_hash"],
        "modality": row["modality"],
        "spacing": [float(x) for x in row["spacing"]],
        "orig_spacing": [float(x) for x in row["orig_spacing"]],
        "orig_shape": [int(x) for x in row["orig_shape"]],
        "slices": int(row["slices"]),
    }
    if row.get("label") is not None:
        sample["label"] = int(row["label"])
    return sample


def _parse_triple(value: Any, kind: type, name: str) -> tuple[Any, ...] | None:
    if value is None:
        return None
    try:
        parts = value.split(",") if isinstance(value, str) else list(value)
        out = tuple(kind(x) for x in parts)
    except (TypeError, ValueError) as exc:
        raise PrepError(f"{name} must be three numbers z,y,x, got: {value!r}") from exc
    if len(out) != 3 or min(out) <= 0:
        raise PrepError(f"{name} must be three positive numbers z,y,x, got: {value!r}")
    return out


def prep_dicom(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    labels: str | os.PathLike[str] | None = None,
    spacing: Sequence[float] | str | None = None,
    shape: Sequence[int] | str | None = None,
    window: str | tuple[float, float] | None = "soft-tissue",
    dtype: str = "uint8",
    split: Sequence[float] | str | None = (0.8, 0.1, 0.1),
    world_size: int | None = None,
    num_shards: int | None = None,
    min_slices: int = 3,
    salt: str = "",
    overwrite: bool = False,
    compression: str | None = None,
    spark: Any = None,
    master: str | None = None,
    progress: Progress | None = None,
) -> PrepResult:
    """DICOM files below ``src`` (any names, nested folders, mixed series) to a volume dataset.

    One sample per series: ``volume`` (``(z, y, x)``, uint8/float16 windowed or int16 HU),
    ``label`` (from the ``labels`` CSV, keyed by series UID or patient id), hashed patient id,
    UIDs, modality, original and output spacing/shape. Splits by a stable hash of the patient
    id. Runs on ``spark``, else on ``master``, else on the embedded cluster (started for the
    job and stopped after if it was not running).
    """
    from gpuspark.data.dicom import DicomOptions, parse_window
    from gpuspark.data.sources import parse_split, read_labels

    t0 = time.monotonic()
    src_s = _check_src(os.fspath(src))
    try:
        options = DicomOptions(
            spacing=_parse_triple(spacing, float, "spacing"),
            shape=_parse_triple(shape, int, "shape"),
            window=parse_window(window),
            dtype=dtype,
            min_slices=min_slices,
            salt=salt,
        )
        fractions = parse_split(split)
    except ValueError as exc:
        raise PrepError(str(exc)) from exc
    table = read_labels(labels) if labels is not None else None
    root = _prepare_dst(os.fspath(dst), overwrite)
    with spark_for_job(spark, master) as sp:
        opts = _WriteOptions(fractions, world_size, num_shards, overwrite, compression)
        return _run_dicom(sp, src_s, root, options, table, opts, progress, t0)


@dataclass(frozen=True)
class _WriteOptions:
    """How a prep job's rows become shards (passed through to ``write_dataframe``)."""

    fractions: Any
    world_size: int | None
    num_shards: int | None
    overwrite: bool
    compression: str | None


def _list_nonempty(spark: Any, src: str) -> tuple[Any, int]:
    """The persisted file listing of ``src`` and its size; refuses an empty source."""
    files = _list_files(spark, src).persist()
    n_files = files.count()
    if n_files == 0:
        files.unpersist()
        raise PrepError(f"source {src} holds no files", remedy="check the path")
    return files, n_files


def _write_shards(df: Any, root: str, opts: _WriteOptions, **kwargs: Any) -> Any:
    """``write_dataframe`` with the job's shard options; one split column when splitting."""
    from gpuspark.data.write import write_dataframe

    return write_dataframe(
        df,
        root,
        world_size=opts.world_size,
        num_shards=opts.num_shards,
        split_col="split" if opts.fractions else None,
        overwrite=opts.overwrite,
        compression=opts.compression,
        **kwargs,
    )


def _run_dicom(
    spark: Any,
    src: str,
    root: str,
    options: Any,
    table: Any,
    opts: _WriteOptions,
    progress: Progress | None,
    t0: float,
) -> PrepResult:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    fractions = opts.fractions
    counters = {"rows": sc.accumulator(0), "quarantined": sc.accumulator(0)}
    cached = []
    with _Watcher(spark, progress, counters) as watch:
        files, n_files = _list_nonempty(spark, src)
        cached.append(files)
        watch.phase = "headers+series"  # lazy: both run in the stats job below
        heads = (
            files.repartition(_task_count(spark, n_files, 64))
            .mapInArrow(_header_fn(counters["rows"], counters["quarantined"]), _HEADER_DDL)
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        cached.append(heads)
        good = heads.filter(F.col("reason").isNull()).select("path", "series_uid")
        fn = _series_fn(options, table, fractions, counters["rows"], counters["quarantined"])
        out = (
            good.repartition(_task_count(spark, n_files, 32), "series_uid")
            .groupBy("series_uid")
            .applyInArrow(fn, _SERIES_DDL)
            .persist(StorageLevel.DISK_ONLY)
        )
        cached.append(out)
        stats = out.groupBy("status").agg(
            F.count("*").alias("n"), F.sum("files").alias("f"), F.sum(F.length("volume")).alias("b")
        )
        stats_rows = stats.collect()
        status = {r["status"]: r["n"] for r in stats_rows}
        files_in_rows = sum(r["f"] or 0 for r in stats_rows if r["status"] == "ok")
        ok_bytes = sum(r["b"] or 0 for r in stats_rows if r["status"] == "ok")
        q_rows = _collect_quarantine(heads, out)
        # shards of about SHARD_BYTES: no empty shards for small cohorts (write_dataframe
        # rounds the count up to a multiple of the world size per split)
        ok = out.filter(F.col("status") == "ok").coalesce(max(1, -(-ok_bytes // SHARD_BYTES)))
        watch.phase = "write"
        extra = _dicom_extra(src, options, table, fractions, n_files, status, files_in_rows, q_rows)
        manifest = _write_shards(
            ok.drop("status", "q_paths", "reason", "error_type"),
            root,
            opts,
            provenance={"source": src, "job": "prep dicom"},
            extra=extra,
            sample_fn=_dicom_sample,
        )
    for df in cached:
        df.unpersist()
    qpath = _write_quarantine(root, q_rows)
    return PrepResult(
        dataset=root,
        kind="dicom",
        inputs=n_files,
        rows=manifest.total_records,
        files_in_rows=int(files_in_rows),
        quarantined=len(q_rows),
        quarantined_items=int(status.get("quarantined", 0))
        + sum(1 for r in q_rows if r["stage"] == "header"),
        by_reason=_by_reason(q_rows),
        splits=_split_counts(manifest),
        shards=len(manifest.shards),
        bytes=sum(s.bytes for s in manifest.shards),
        seconds=round(time.monotonic() - t0, 3),
        quarantine_path=qpath,
        label_map=extra.get("label_map", {}),
        timings=watch.timings,
    )


def _collect_quarantine(heads: Any, out: Any) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    h = heads.filter(F.col("reason").isNotNull()).select(
        "path", "series_uid", "reason", "error_type", F.lit("header").alias("stage")
    )
    s = out.filter(F.col("status") == "quarantined").select(
        F.explode("q_paths").alias("path"),
        "series_uid",
        "reason",
        "error_type",
        F.lit("series").alias("stage"),
    )
    return [r.asDict() for r in h.unionByName(s).collect()]


def _dicom_extra(
    src: str,
    options: Any,
    table: Any,
    fractions: Any,
    n_files: int,
    status: dict[str, int],
    files_in_rows: int,
    q_rows: list[dict[str, Any]],
) -> dict[str, Any]:
    w = options.window
    extra: dict[str, Any] = {
        "prep": {
            "kind": "dicom",
            "source": src,
            "spacing": list(options.spacing) if options.spacing else None,
            "shape": list(options.shape) if options.shape else None,
            "axes": "zyx",
            "window": {"name": w.name, "level": w.level, "width": w.width},
            "dtype": options.out_dtype,
            "split": list(fractions) if fractions else None,
            "split_by": "sha256 of hashed patient id",
            "min_slices": options.min_slices,
        },
        "quarantine": {
            "file": QUARANTINE_FILE,
            "inputs": n_files,
            "rows": int(status.get("ok", 0)),
            "files_in_rows": int(files_in_rows),
            "files": len(q_rows),
            "series": int(status.get("quarantined", 0)),
            "by_reason": _by_reason(q_rows),
        },
    }
    if table is not None:
        extra["label_map"] = {str(k): v for k, v in table.names.items()}
        extra["labels"] = {"source": table.source, "key": table.key}
    return extra


# --------------------------------------------------------------------------- images


def _image_fn(
    root: str, options: Any, index: dict[str, int], split: Any, rows_acc: Any, q_acc: Any
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def images(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        schema = _arrow_schema(_IMAGE_DDL)
        for batch in batches:
            out: list[dict[str, Any]] = []
            for path in batch.column("path").to_pylist():
                out.append(_one_image(path, root, options, index, split, rows_acc, q_acc))
                if len(out) >= 64:
                    yield pa.RecordBatch.from_pylist(out, schema=schema)
                    out = []
            if out:
                yield pa.RecordBatch.from_pylist(out, schema=schema)

    return images


def _one_image(
    path: str,
    root: str,
    options: Any,
    index: dict[str, int],
    split: Any,
    rows_acc: Any,
    q_acc: Any,
) -> dict[str, Any]:
    from gpuspark.data.images import class_of, prep_image
    from gpuspark.data.sources import assign_split, read_bytes

    rec: dict[str, Any] = {"path": path}
    try:
        name, rel = class_of(path, root)
        row = prep_image(read_bytes(path), options)
        img = row.pop("image")
        rec.update(row, status="ok", id=rel, label=index[name], label_name=name)
        if hasattr(img, "shape"):
            rec.update(image=img.tobytes(), shape=list(img.shape))
        else:
            rec["image"] = img
        if split is not None:
            rec["split"] = assign_split(rel, split)
        rows_acc.add(1)
    except Exception as e:
        qe = QuarantineError.wrap(e, "image failed", path)
        rec.update(status="quarantined", reason=qe.reason, error_type=qe.error_type)
        q_acc.add(1)
    return rec


def _image_sample(row: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from gpuspark.data.format import EncodedImage

    if row["format"] == "raw":
        image: Any = np.frombuffer(row["image"], dtype=np.uint8).reshape(row["shape"])
    else:
        image = EncodedImage(row["image"], row["format"])
    return {
        "image": image,
        "label": int(row["label"]),
        "label_name": row["label_name"],
        "id": row["id"],
        "width": int(row["width"]),
        "height": int(row["height"]),
    }


def _class_names(files: Any, root: str) -> list[str]:
    from gpuspark.data.images import class_of

    def names(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        seen: set[str] = set()
        for batch in batches:
            for path in batch.column("path").to_pylist():
                with contextlib.suppress(QuarantineError):
                    seen.add(class_of(path, root)[0])
        yield pa.RecordBatch.from_pydict(
            {"name": sorted(seen)}, schema=pa.schema([("name", pa.string())])
        )

    rows = files.mapInArrow(names, "name string").distinct().collect()
    return sorted(r["name"] for r in rows)


def prep_images(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    mode: str = "keep",
    size: int = 224,
    split: Sequence[float] | str | None = None,
    world_size: int | None = None,
    num_shards: int | None = None,
    overwrite: bool = False,
    compression: str | None = None,
    spark: Any = None,
    master: str | None = None,
    progress: Progress | None = None,
) -> PrepResult:
    """An image folder ``src/<label>/<file>.{jpg,jpeg,png}`` to an image dataset.

    ``mode``: ``keep`` (original bytes), ``resize`` (JPEG, shorter side = ``size``) or
    ``predecode`` (``size`` x ``size`` x 3 uint8). Labels are the sorted folder names
    (``extra["label_map"]``); optional splits by a stable hash of the relative path.
    """
    from gpuspark.data.images import ImageOptions
    from gpuspark.data.sources import parse_split

    t0 = time.monotonic()
    src_s = _check_src(os.fspath(src))
    try:
        options = ImageOptions(mode=mode, size=size)
        fractions = parse_split(split)
    except ValueError as exc:
        raise PrepError(str(exc)) from exc
    root = _prepare_dst(os.fspath(dst), overwrite)
    with spark_for_job(spark, master) as sp:
        opts = _WriteOptions(fractions, world_size, num_shards, overwrite, compression)
        return _run_images(sp, src_s, root, options, opts, progress, t0)


def _run_images(
    spark: Any,
    src: str,
    root: str,
    options: Any,
    opts: _WriteOptions,
    progress: Progress | None,
    t0: float,
) -> PrepResult:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    fractions = opts.fractions
    counters = {"rows": sc.accumulator(0), "quarantined": sc.accumulator(0)}
    with _Watcher(spark, progress, counters) as watch:
        files, n_files = _list_nonempty(spark, src)
        names = _class_names(files, src)
        if not names:
            raise PrepError(
                f"source {src} has no class folders with images",
                remedy="use the layout SRC/<label>/<file>.jpg",
            )
        index = {n: i for i, n in enumerate(names)}
        watch.phase = "images"
        fn = _image_fn(src, options, index, fractions, counters["rows"], counters["quarantined"])
        out = (
            files.repartition(_task_count(spark, n_files, 32))
            .mapInArrow(fn, _IMAGE_DDL)
            .persist(StorageLevel.DISK_ONLY)
        )
        q_rows = [
            {**r.asDict(), "series_uid": None, "stage": "image"}
            for r in out.filter(F.col("status") == "quarantined")
            .select("path", "reason", "error_type")
            .collect()
        ]
        watch.phase = "write"
        label_map = {str(i): n for n, i in index.items()}
        extra = {
            "prep": {
                "kind": "images",
                "source": src,
                "mode": options.mode,
                "size": options.size,
                "split": list(fractions) if fractions else None,
                "split_by": "relative path",
            },
            "label_map": label_map,
            "quarantine": {
                "file": QUARANTINE_FILE,
                "inputs": n_files,
                "rows": n_files - len(q_rows),
                "files": len(q_rows),
                "by_reason": _by_reason(q_rows),
            },
        }
        manifest = _write_shards(
            out.filter(F.col("status") == "ok").drop("status", "reason", "error_type", "path"),
            root,
            opts,
            provenance={"source": src, "job": "prep images"},
            extra=extra,
            sample_fn=_image_sample,
        )
    out.unpersist()
    files.unpersist()
    qpath = _write_quarantine(root, q_rows)
    return PrepResult(
        dataset=root,
        kind="images",
        inputs=n_files,
        rows=manifest.total_records,
        files_in_rows=manifest.total_records,
        quarantined=len(q_rows),
        quarantined_items=len(q_rows),
        by_reason=_by_reason(q_rows),
        splits=_split_counts(manifest),
        shards=len(manifest.shards),
        bytes=sum(s.bytes for s in manifest.shards),
        seconds=round(time.monotonic() - t0, 3),
        quarantine_path=qpath,
        label_map=label_map,
        timings=watch.timings,
    )
