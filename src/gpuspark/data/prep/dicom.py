"""The DICOM job: files below a folder (any names, nested, mixed series) to volume shards.

Two Spark jobs: tasks walk the source tree (the driver plans units from its top levels,
:mod:`gpuspark.data.sources.listing`) and read every file's header; then one task per planned
shard (:mod:`~gpuspark.data.prep.shards`) assembles its series one at a time and writes them
(:func:`gpuspark.data.write.write_partitions`), so volumes are written once and nothing is
cached or shuffled after they are made. The quarantine table is committed with the shards.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from gpuspark.data.prep.common import (
    SHARD_BYTES,
    PrepResult,
    WriteOptions,
    arrow_schema,
    by_reason,
    check_source,
    check_split,
    check_world,
    cores,
    quarantine_table,
    read_label_table,
    record_batches,
)
from gpuspark.data.prep.job import PrepRun, Where, run_prep
from gpuspark.data.prep.progress import Progress
from gpuspark.data.prep.shards import deal_shards
from gpuspark.data.sources import (
    WINDOW_PRESETS,
    DicomOptions,
    Window,
    assign_split,
    deal,
    hash_patient,
    parse_window,
    plan_units,
    prep_series,
    read_header,
    walk_unit,
)
from gpuspark.errors import PrepError, QuarantineError, did_you_mean

if TYPE_CHECKING:
    from gpuspark.data.sources import Window

__all__ = ["prep_dicom"]

_HEADER_DDL = (
    "path string, length long, series_uid string, split string, reason string, error_type string"
)
_SUMMARY_DDL = (
    "series_uid string, split string, n long, b long, path string, reason string, error_type string"
)
_UNIT_DDL = "path string, is_dir boolean, size long"
_SHARD = "_gpuspark_shard"


def prep_dicom(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    labels: str | os.PathLike[str] | None = None,
    spacing: Sequence[float] | None = None,
    shape: Sequence[int] | None = None,
    window: Window | tuple[float, float] | str | None = "soft-tissue",
    dtype: str = "uint8",
    split: Sequence[float] | None = (0.8, 0.1, 0.1),
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
    team: str | None = None,
) -> PrepResult:
    """DICOM files below ``src`` (any names, nested folders, mixed series) to a volume dataset.

    One sample per series: ``volume`` (``(z, y, x)``, uint8/float16 windowed or int16 HU),
    ``label`` (from the ``labels`` CSV, keyed by series UID or patient id), hashed patient id,
    UIDs, modality, original and output spacing/shape. ``spacing`` (mm) and ``shape``
    (voxels) are ``(z, y, x)``; ``window`` is a preset name (``soft-tissue``, ``lung``,
    ``bone``), ``(level, width)``, a :class:`~gpuspark.data.sources.Window`, or ``hu``/None
    for raw HU; ``split`` the train/val/test fractions, by a stable hash of the patient id.

    Everything that can be checked on the driver is checked before a cluster starts. A job
    that makes no record fails with :class:`PrepError` and commits nothing. Runs on
    ``spark``, else on ``master`` or the spec's master, see
    :func:`gpuspark.cluster.session.job_session`.
    ``team``: submit under that team of the spec (default: the user's team per ``members``;
    its queue, labels or caps, see :func:`gpuspark.quota.team.team_conf`).
    """

    t0 = time.monotonic()
    src_s = check_source(src)
    check_world(world_size, num_shards)
    try:
        options = DicomOptions(
            spacing=_triple(spacing, float, "spacing"),
            shape=_triple(shape, int, "shape"),
            window=_window(window),
            dtype=dtype,
            min_slices=min_slices,
            salt=salt,
        )
    except ValueError as exc:
        raise PrepError(str(exc)) from exc
    write = WriteOptions(check_split(split), world_size, num_shards, overwrite, compression)
    table = read_label_table(labels)

    where = Where(spark, master, spec, team, progress, t0)
    return run_prep(
        "dicom", src_s, dst, write, partial(_run_dicom, options=options, table=table), where
    )


def _triple(value: Sequence[Any] | None, kind: type, name: str) -> Any:
    """``(z, y, x)`` of positive numbers of type ``kind``; text is the CLI's to parse."""
    if value is None:
        return None
    if isinstance(value, str):
        raise PrepError(f"{name} must be a tuple (z, y, x), got text {value!r}")
    try:
        out = tuple(kind(x) for x in value)
        exact = all(kind(x) == x for x in value)
    except (TypeError, ValueError) as exc:
        raise PrepError(f"{name} must be three numbers (z, y, x), got: {value!r}") from exc
    if len(out) != 3 or min(out) <= 0 or not exact:
        what = "integers" if kind is int else "numbers"
        raise PrepError(f"{name} must be three positive {what} (z, y, x), got: {value!r}")
    return out


def _window(window: Any) -> Window:
    """A :class:`Window` from a preset name, ``hu``/None, ``(level, width)`` or a Window."""

    if isinstance(window, str) and window.lower() not in {*WINDOW_PRESETS, "hu", "raw", "none"}:
        raise PrepError(
            f"window {window!r} is not a preset{did_you_mean(window, list(WINDOW_PRESETS))}",
            remedy=f"use one of {', '.join(WINDOW_PRESETS)}, hu, or a (level, width) pair",
        )
    if isinstance(window, Sequence) and not isinstance(window, str):
        if len(window) != 2:
            raise PrepError(f"window must be (level, width), got: {window!r}")
        window = (float(window[0]), float(window[1]))
    elif window is not None and not isinstance(window, str | Window):
        raise PrepError(f"window must be a preset name, (level, width) or a Window: {window!r}")
    return parse_window(window)


def _source_units(spark: Any, src: str) -> Any:
    """The units of ``src`` (files, and directories the tasks walk) as a DataFrame of two
    tasks per core with even shares of bytes (:mod:`gpuspark.data.sources.listing`); refuses a
    source with nothing in it."""

    n = cores(spark)
    units = plan_units(src, want=8 * n)
    if not units:
        raise PrepError(f"source {src} holds no files", remedy="check the path")
    parts = deal(units, 2 * n)
    rdd = spark.sparkContext.parallelize(parts, len(parts)).flatMap(lambda part: part)
    return spark.createDataFrame(rdd, _UNIT_DDL)


def _walk(batches: Iterable[Any]) -> Iterator[tuple[str, int]]:
    """Every file of the units in ``batches`` (runs in the tasks)."""

    for batch in batches:
        cols = [batch.column(c).to_pylist() for c in ("path", "is_dir", "size")]
        for unit in zip(*cols, strict=True):
            yield from walk_unit(unit)


def _header_fn(
    q_acc: Any, fractions: Sequence[float] | None, salt: str
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """List the units and read the header of every file: its series and split (by the hashed
    patient id, the rule ``prep_series`` applies), or why it is quarantined."""

    def headers(batches: Iterator[Any]) -> Iterator[Any]:
        rows = (_header_row(path, n, fractions, salt, q_acc) for path, n in _walk(batches))
        return record_batches(rows, _HEADER_DDL, 512)

    return headers


def _header_row(
    path: str, length: int, fractions: Sequence[float] | None, salt: str, q_acc: Any
) -> dict[str, Any]:

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
        from gpuspark.data.write import PartitionReport

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
                yield PartitionReport(series_uid=uid, paths=paths, reason=qe.reason, error_type=err)
                continue
            rows_acc.add(1)
            rows, in_rows = rows + 1, in_rows + len(paths)
            yield _dicom_sample(row)
        yield PartitionReport(rows=rows, files_in_rows=in_rows)

    return shard_task


_SAMPLE_KEYS = (
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


def _dicom_sample(row: dict[str, Any]) -> dict[str, Any]:
    """``prep_series`` row -> shard sample."""
    sample = {key: row[key] for key in _SAMPLE_KEYS}
    if row.get("label") is not None:
        sample["label"] = int(row["label"])
    return sample


def _run_dicom(run: PrepRun, spark: Any, options: Any, table: Any) -> PrepResult:
    """Two jobs: (1) list and read headers in tasks, count files per series; (2) one task
    per planned shard assembles its series and writes them (``write_partitions``)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from gpuspark.data.write import write_partitions

    sc = spark.sparkContext
    src, root, opts = run.src, run.root, run.write
    done: dict[str, Any] = {}
    with run.watching(spark, phase="headers") as watch:
        fn = _header_fn(run.counters["quarantined"], opts.fractions, options.salt)
        heads = _source_units(spark, src).mapInArrow(fn, _HEADER_DDL)
        heads = heads.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            n_files, series, q_head = _series_table(heads)
            if n_files == 0:
                raise PrepError(f"source {src} holds no files", remedy="check the path")
            if not series:  # nothing readable: fail before the write job
                run.check_outcome(n_files, 0, q_head)
            layout, assign = deal_shards(
                series,
                world_size=opts.world_size,
                num_shards=opts.num_shards,
                tasks=2 * cores(spark),
                shard_bytes=SHARD_BYTES,
            )
            table_rdd = sc.parallelize(sorted(assign.items()), 1)  # 1 task
            keyed = spark.createDataFrame(table_rdd, f"series_uid string, {_SHARD} int")
            good = heads.filter(F.col("reason").isNull()).select("path", "series_uid")
            watch.phase = "series+write"

            def extra(reports: list[dict[str, Any]]) -> dict[str, Any]:
                # runs on the driver before the commit: a job without records commits nothing
                done.update(_tally(reports, q_head))
                run.check_outcome(n_files, done["rows"], done["q_rows"])
                return _dicom_extra(src, options, table, opts.fractions, n_files, done)

            manifest, _ = write_partitions(
                good.join(F.broadcast(keyed), "series_uid"),
                root,
                layout,
                _SHARD,
                _series_writer(options, table, opts.fractions, layout, run.counters),
                overwrite=opts.overwrite,
                compression=opts.compression,
                provenance={"source": src, "job": "prep dicom"},
                extra=extra,
                world_size=opts.world_size,
                files=lambda _reports: quarantine_table(done["q_rows"]),
            )
        finally:
            heads.unpersist()
    return run.result(
        manifest,
        inputs=n_files,
        files_in_rows=done["files_in_rows"],
        q_rows=done["q_rows"],
        quarantined_items=done["series_quarantined"] + len(q_head),
        label_map=manifest.extra.get("label_map", {}),
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
    yield pa.RecordBatch.from_pylist(rows + quarantined, schema=arrow_schema(_SUMMARY_DDL))


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


def _dicom_extra(
    src: str, options: Any, table: Any, fractions: Any, n_files: int, done: dict[str, Any]
) -> dict[str, Any]:
    w = options.window
    q_rows = done["q_rows"]
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
            "inputs": n_files,
            "rows": int(done["rows"]),
            "files_in_rows": int(done["files_in_rows"]),
            "files": len(q_rows),
            "series": int(done["series_quarantined"]),
            "by_reason": by_reason(q_rows),
        },
    }
    if table is not None:
        extra["label_map"] = {str(k): v for k, v in table.names.items()}
        extra["labels"] = {"source": table.source, "key": table.key}
    return extra
