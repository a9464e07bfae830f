"""Spark preprocessing jobs: DICOM series and image folders to gpuspark shards.

The work is Spark's. DICOM (:func:`prep_dicom`) is two jobs: tasks walk the source tree
(the driver plans units from its top levels, :mod:`gpuspark.data.sources.listing`) and read every
file's header; then one task per planned shard assembles its series one at a time and writes
them (:func:`gpuspark.data.write.write_partitions`), so volumes are written once and nothing
is cached or shuffled after they are made. Image folders (:func:`prep_images`) are listed by
Spark's ``binaryFile`` source (only ``path`` and ``length``), read in executor tasks and
written by :func:`gpuspark.data.write.write_dataframe`, balanced for the training world size.

Every input ends up either in a row or in ``quarantine.parquet`` (path, series if known,
reason, exception type, stage) inside the dataset directory; the counts are in the manifest's
``extra["quarantine"]`` and in :class:`PrepResult`: ``inputs == files_in_rows + quarantined``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuspark.cluster.session import JobKind, job_session
from gpuspark.data.sources import QuarantineError
from gpuspark.errors import PrepError

__all__ = ["PrepError", "PrepResult", "Progress", "prep_dicom", "prep_images"]

QUARANTINE_FILE = "quarantine.parquet"
SHARD_BYTES = 128 << 20
Progress = Callable[[dict[str, Any]], None]

_HEADER_DDL = (
    "path string, length long, series_uid string, split string, reason string, error_type string"
)
_IMAGE_DDL = (
    "status string, id string, label int, label_name string, split string, image binary, "
    "format string, shape array<int>, width int, height int, path string, reason string, "
    "error_type string"
)


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


# --------------------------------------------------------------------------- progress


class _Watcher:
    """Polls Spark's status tracker and reports tasks done/total and accumulators."""

    def __init__(
        self,
        spark: Any,
        progress: Progress | None,
        counters: dict[str, Any],
        phase: str = "listing",
    ) -> None:
        self.sc = spark.sparkContext
        self.progress = progress
        self.counters = counters
        self.stages: dict[int, tuple[int, int]] = {}
        self._open: set[int] = set()
        self._phase = phase
        self.t0 = time.monotonic()
        self._t_phase = self.t0
        self.timings: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def phase(self) -> str:
        """The current phase: headers, series+write (DICOM); listing, images, write (images)."""
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


def _cores(spark: Any) -> int:
    """Task slots of the cluster now (registered executors); ``defaultParallelism`` while
    none has registered yet."""
    sc = spark.sparkContext
    try:
        jsc = sc._jsc.sc()
        slots = int(
            jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile())
        )
    except Exception:  # an API of Spark's own scheduler, not public: fall back
        slots = 0
    return slots if slots > 0 else max(1, sc.defaultParallelism)


def _task_count(spark: Any, items: int, per_task: int, per_core: int = 4) -> int:
    """Enough tasks to balance the cores, but at least ``per_task`` items per task."""
    return max(1, min(-(-items // per_task), _cores(spark) * per_core))


_UNIT_DDL = "path string, is_dir boolean, size long"


def _source_units(spark: Any, src: str) -> Any:
    """The units of ``src`` (files, and directories the tasks walk) as a DataFrame of two
    tasks per core with even shares of bytes (:mod:`gpuspark.data.sources.listing`); refuses a
    source with nothing in it."""
    from gpuspark.data.sources import deal, plan_units

    cores = _cores(spark)
    units = plan_units(src, want=8 * cores)
    if not units:
        raise PrepError(f"source {src} holds no files", remedy="check the path")
    parts = deal(units, 2 * cores)
    rdd = spark.sparkContext.parallelize(parts, len(parts)).flatMap(lambda part: part)
    return spark.createDataFrame(rdd, _UNIT_DDL)


def _walk(batches: Iterable[Any]) -> Iterator[tuple[str, int]]:
    """Every file of the units in ``batches`` (runs in the tasks)."""
    from gpuspark.data.sources import walk_unit

    for batch in batches:
        cols = [batch.column(c).to_pylist() for c in ("path", "is_dir", "size")]
        for unit in zip(*cols, strict=True):
            yield from walk_unit(unit)


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


def _record_batches(rows: Iterable[dict[str, Any]], ddl: str, size: int) -> Iterator[Any]:
    """``rows`` as Arrow record batches of ``size`` rows (the last one shorter)."""
    import itertools

    import pyarrow as pa

    schema = _arrow_schema(ddl)
    it = iter(rows)
    while chunk := list(itertools.islice(it, size)):
        yield pa.RecordBatch.from_pylist(chunk, schema=schema)


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


def _header_fn(
    q_acc: Any, fractions: Sequence[float] | None, salt: str
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """List the units and read the header of every file: its series and split (by the hashed
    patient id, the rule ``prep_series`` applies), or why it is quarantined."""

    def headers(batches: Iterator[Any]) -> Iterator[Any]:
        rows = (_header_row(path, n, fractions, salt, q_acc) for path, n in _walk(batches))
        return _record_batches(rows, _HEADER_DDL, 512)

    return headers


def _header_row(
    path: str, length: int, fractions: Sequence[float] | None, salt: str, q_acc: Any
) -> dict[str, Any]:
    from gpuspark.data.sources import assign_split, hash_patient, read_header

    rec: dict[str, Any] = {"path": path, "length": length}
    try:
        h = read_header(path)
    except Exception as e:  # never fail the job on one file
        q_acc.add(1)
        qe = QuarantineError.wrap(e, "unreadable DICOM", path)
        rec.update(reason=qe.reason, error_type=qe.error_type)
        return rec
    rec["series_uid"] = h.series_uid
    if fractions:
        patient = hash_patient(h.patient_id or h.study_uid or h.series_uid, salt)
        rec["split"] = assign_split(patient, fractions)
    return rec


def _series_writer(
    options: Any,
    labels: Any,
    fractions: Sequence[float] | None,
    layout: list[str | None],
    counters: dict[str, Any],
) -> Callable[[int, Iterable[Any]], Iterator[Any]]:
    """The task of one shard: assemble its series one at a time (one series' pixels in
    memory), write each as a sample, report the quarantined ones and the counts."""
    rows_acc, q_acc = counters["rows"], counters["quarantined"]

    def shard_task(shard: int, batches: Iterable[Any]) -> Iterator[Any]:
        from gpuspark.data.sources import prep_series
        from gpuspark.data.write import Report

        files: dict[str, list[str]] = {}
        for batch in batches:
            paths, uids = batch.column("path").to_pylist(), batch.column("series_uid").to_pylist()
            for path, uid in zip(paths, uids, strict=True):
                files.setdefault(uid, []).append(path)
        rows = in_rows = 0
        for uid in sorted(files):
            paths = sorted(files[uid])
            try:
                row = prep_series(paths, options, labels=labels, split=fractions)
                if row.get("split") != layout[shard]:
                    raise QuarantineError("files of the series name different patients", "Split")
            except Exception as e:  # never fail the job on one series
                q_acc.add(len(paths))
                qe = QuarantineError.wrap(e, "series failed")
                err = qe.error_type if qe.path is None else f"{qe.error_type} ({qe.path})"
                yield Report(series_uid=uid, paths=paths, reason=qe.reason, error_type=err)
                continue
            rows_acc.add(1)
            rows, in_rows = rows + 1, in_rows + len(paths)
            yield _dicom_sample(row)
        yield Report(rows=rows, files_in_rows=in_rows)

    return shard_task


def _dicom_sample(row: dict[str, Any]) -> dict[str, Any]:
    """``prep_series`` row -> shard sample."""
    sample = {
        key: row[key]
        for key in (
            "volume",
            "id",
            "series_uid",
            "study_uid",
            "patient_hash",
            "modality",
            "spacing",
            "orig_spacing",
            "orig_shape",
            "slices",
        )
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
    spec: Any = None,
    progress: Progress | None = None,
) -> PrepResult:
    """DICOM files below ``src`` (any names, nested folders, mixed series) to a volume dataset.

    One sample per series: ``volume`` (``(z, y, x)``, uint8/float16 windowed or int16 HU),
    ``label`` (from the ``labels`` CSV, keyed by series UID or patient id), hashed patient id,
    UIDs, modality, original and output spacing/shape. Splits by a stable hash of the patient
    id. Runs on ``spark``, else on ``master`` or the spec's master (``spec``: a
    :class:`~gpuspark.spec.ClusterSpec` or file; default ``$GPUSPARK_SPEC`` or the built-in
    one), see :func:`gpuspark.cluster.session.job_session`.
    """
    from gpuspark.data.sources import DicomOptions, parse_split, parse_window, read_labels

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
    with job_session(JobKind.DATA, spark=spark, master=master, spec=spec) as sp:
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
    """Two jobs: (1) list and read headers in tasks, count files per series; (2) one task
    per planned shard assembles its series and writes them (``write_partitions``)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from gpuspark.data.write import write_partitions

    sc = spark.sparkContext
    counters = {"rows": sc.accumulator(0), "quarantined": sc.accumulator(0)}
    with _Watcher(spark, progress, counters, phase="headers") as watch:
        heads = (
            _source_units(spark, src)
            .mapInArrow(
                _header_fn(counters["quarantined"], opts.fractions, options.salt), _HEADER_DDL
            )
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        try:
            n_files, series, q_head = _series_table(heads)
            if n_files == 0:
                raise PrepError(f"source {src} holds no files", remedy="check the path")
            layout, assign = plan_shards(
                series,
                world_size=opts.world_size,
                num_shards=opts.num_shards,
                tasks=2 * _cores(spark),
                shard_bytes=SHARD_BYTES,
            )
            table_rdd = sc.parallelize(sorted(assign.items()) or [("", 0)], 1)  # 1 task
            keyed = spark.createDataFrame(table_rdd, f"series_uid string, {_SHARD} int")
            good = heads.filter(F.col("reason").isNull()).select("path", "series_uid")
            watch.phase = "series+write"
            done: dict[str, Any] = {}

            def extra(reports: list[dict[str, Any]]) -> dict[str, Any]:
                done.update(_tally(reports, q_head))
                status = {"ok": done["rows"], "quarantined": done["series_quarantined"]}
                return _dicom_extra(
                    src,
                    options,
                    table,
                    opts.fractions,
                    n_files,
                    status,
                    done["files_in_rows"],
                    done["q_rows"],
                )

            manifest, _ = write_partitions(
                good.join(F.broadcast(keyed), "series_uid"),
                root,
                layout,
                _SHARD,
                _series_writer(options, table, opts.fractions, layout, counters),
                overwrite=opts.overwrite,
                compression=opts.compression,
                provenance={"source": src, "job": "prep dicom"},
                extra=extra,
                world_size=opts.world_size,
            )
        finally:
            heads.unpersist()
    q_rows = done["q_rows"]
    qpath = _write_quarantine(root, q_rows)
    return PrepResult(
        dataset=root,
        kind="dicom",
        inputs=n_files,
        rows=manifest.total_records,
        files_in_rows=done["files_in_rows"],
        quarantined=len(q_rows),
        quarantined_items=done["series_quarantined"] + len(q_head),
        by_reason=_by_reason(q_rows),
        splits=_split_counts(manifest),
        shards=len(manifest.shards),
        bytes=sum(s.bytes for s in manifest.shards),
        seconds=round(time.monotonic() - t0, 3),
        quarantine_path=qpath,
        label_map=manifest.extra.get("label_map", {}),
        timings=watch.timings,
    )


_SHARD = "_gpuspark_shard"


_SUMMARY_DDL = (
    "series_uid string, split string, n long, b long, path string, reason string, error_type string"
)


def _add_series(table: dict[str, list[Any]], uid: str, split: Any, files: int, nbytes: int) -> None:
    """Add files and bytes to a series' ``[split, files, bytes]``; the split is the smallest
    name seen (files of one series that disagree are quarantined when it is assembled)."""
    acc = table.setdefault(uid, [split, 0, 0])
    acc[1], acc[2] = acc[1] + files, acc[2] + nbytes
    if split is not None and (acc[0] is None or split < acc[0]):
        acc[0] = split


def _summarize(batches: Iterator[Any]) -> Iterator[Any]:
    """Per task: files and bytes of each series, and the files quarantined at the header
    (runs in the header tasks themselves: no shuffle, no second pass over the headers)."""
    import pyarrow as pa

    per_series: dict[str, list[Any]] = {}
    quarantined: list[dict[str, Any]] = []
    for batch in batches:
        for r in batch.to_pylist():
            if r["series_uid"] is None:
                quarantined.append({k: r[k] for k in ("path", "reason", "error_type")})
                continue
            _add_series(per_series, r["series_uid"], r["split"], 1, max(r["length"] or 0, 0))
    rows = [{"series_uid": u, "split": v[0], "n": v[1], "b": v[2]} for u, v in per_series.items()]
    yield pa.RecordBatch.from_pylist(rows + quarantined, schema=_arrow_schema(_SUMMARY_DDL))


def _series_table(heads: Any) -> tuple[int, dict[str, tuple[Any, int, int]], list[dict]]:
    """Files listed; each series' (split, readable files, bytes); the files quarantined at
    the header. One job: the listing and header tasks summarise what they just read."""
    series: dict[str, list[Any]] = {}
    q_head: list[dict[str, Any]] = []
    for r in heads.mapInArrow(_summarize, _SUMMARY_DDL).collect():
        if r["series_uid"] is None:
            q_head.append({**r.asDict(), "stage": "header"})
            continue
        _add_series(series, r["series_uid"], r["split"], r["n"], r["b"])
    table = {uid: (v[0], int(v[1]), int(v[2])) for uid, v in series.items()}
    q_rows = [
        {k: q[k] for k in ("path", "series_uid", "reason", "error_type", "stage")} for q in q_head
    ]
    return sum(v[1] for v in table.values()) + len(q_rows), table, q_rows


def _tally(reports: list[dict[str, Any]], q_head: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts and quarantine rows from the shard tasks' reports."""
    q_rows = list(q_head)
    series_q = 0
    for rep in reports:
        if "paths" in rep:
            series_q += 1
            q_rows.extend(
                {
                    "path": path,
                    "series_uid": rep["series_uid"],
                    "reason": rep["reason"],
                    "error_type": rep["error_type"],
                    "stage": "series",
                }
                for path in rep["paths"]
            )
    counts = [rep for rep in reports if "rows" in rep]
    return {
        "rows": sum(rep["rows"] for rep in counts),
        "files_in_rows": sum(rep["files_in_rows"] for rep in counts),
        "series_quarantined": series_q,
        "q_rows": q_rows,
    }


def plan_shards(
    series: dict[str, tuple[Any, int, int]],
    *,
    world_size: int | None,
    num_shards: int | None,
    tasks: int,
    shard_bytes: int,
) -> tuple[list[Any], dict[str, int]]:
    """The shards of a series job and the shard of each series: ``(split of each shard,
    {series: shard})`` from ``{series: (split, files, bytes)}``.

    Each split gets a multiple of ``world_size`` shards (``num_shards`` each if given; else
    enough for ``shard_bytes`` of input per shard and, across splits, about ``tasks`` shards
    in proportion to their series, but no more than its series); series are dealt largest
    first in a snake order, so a split's shards differ by at most one series and carry about
    the same work.
    """
    ws = world_size or 1
    if num_shards is not None and (num_shards <= 0 or num_shards % ws):
        raise PrepError(
            f"num_shards={num_shards} must be a positive multiple of world_size={ws}",
            remedy="leave it out to size shards automatically",
        )
    by_split: dict[Any, list[tuple[str, int, int]]] = {}
    for uid, (split, files, nbytes) in series.items():
        by_split.setdefault(split, []).append((uid, files, nbytes))
    if not by_split:
        return [None] * (num_shards or ws), {}
    layout: list[Any] = []
    assign: dict[str, int] = {}
    for split in sorted(by_split, key=lambda x: (x is None, x)):
        items = sorted(by_split[split], key=lambda t: (-t[1], t[0]))
        wanted = max(
            -(-sum(t[2] for t in items) // shard_bytes),
            round(tasks * len(items) / len(series)),
        )
        # never more shards than series (rounded up to the world size): no empty shards
        k = num_shards or _round_up(max(1, min(wanted, len(items))), ws)
        for i, (uid, _, _) in enumerate(items):
            lap, col = divmod(i, k)
            assign[uid] = len(layout) + (col if lap % 2 == 0 else k - 1 - col)
        layout.extend([split] * k)
    return layout, assign


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


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
        rows = (
            _one_image(path, root, options, index, split, rows_acc, q_acc)
            for batch in batches
            for path in batch.column("path").to_pylist()
        )
        return _record_batches(rows, _IMAGE_DDL, 64)

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
    from gpuspark.data.sources import assign_split, class_of, prep_image, read_bytes

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
    from gpuspark.data.sources import class_of

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
    spec: Any = None,
    progress: Progress | None = None,
) -> PrepResult:
    """An image folder ``src/<label>/<file>.{jpg,jpeg,png}`` to an image dataset.

    ``mode``: ``keep`` (original bytes), ``resize`` (JPEG, shorter side = ``size``) or
    ``predecode`` (``size`` x ``size`` x 3 uint8). Labels are the sorted folder names
    (``extra["label_map"]``); optional splits by a stable hash of the relative path.
    """
    from gpuspark.data.sources import ImageOptions, parse_split

    t0 = time.monotonic()
    src_s = _check_src(os.fspath(src))
    try:
        options = ImageOptions(mode=mode, size=size)
        fractions = parse_split(split)
    except ValueError as exc:
        raise PrepError(str(exc)) from exc
    root = _prepare_dst(os.fspath(dst), overwrite)
    with job_session(JobKind.DATA, spark=spark, master=master, spec=spec) as sp:
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
