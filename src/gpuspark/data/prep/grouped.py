"""The Spark body of a prep job over a :class:`~gpuspark.data.sources.Source` whose samples
are groups of files (a DICOM series; one file each for simpler inputs).

Two Spark jobs: tasks walk the source tree (the driver plans units from its top levels,
:mod:`gpuspark.data.sources.listing`) and read every file's header (``source.read_header``,
``source.sample_key`` and the sample's split); then one task per planned shard
(:mod:`~gpuspark.data.prep.shards`) reads its samples one at a time (``source.read_sample``)
and writes them (:func:`gpuspark.data.write.write_partitions`), so samples are made once and
nothing is cached or shuffled after they are made. The quarantine table is committed with
the shards; its ``series_uid`` column holds the sample key.

A job over a new source is its :class:`~gpuspark.data.sources.Source` and a thin entry: check
the options, then ``run_prep(kind, source, dst, write, partial(run_grouped,
job=GroupedJob(...)), where)`` (see :func:`gpuspark.data.prep.prep_dicom`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuspark import storage
from gpuspark._util.spark_compat import sql_functions
from gpuspark.data.prep.common import (
    SHARD_BYTES,
    PrepResult,
    arrow_schema,
    by_reason,
    cores,
    quarantine_table,
    record_batches,
)
from gpuspark.data.prep.job import PrepRun
from gpuspark.data.prep.shards import deal_shards
from gpuspark.data.sources import Source, assign_split, deal, plan_units, walk_unit
from gpuspark.errors import PrepError, QuarantineError

__all__ = ["GroupedJob", "run_grouped"]

_HEADER_DDL = "path string, length long, key string, split string, reason string, error_type string"
_SUMMARY_DDL = (
    "key string, split string, n long, b long, path string, reason string, error_type string"
)
_UNIT_DDL = "path string, is_dir boolean, size long"
_SHARD = "_gpuspark_shard"
_TASK = "_gpuspark_task"

Sample = dict[str, Any]


@dataclass(frozen=True)
class GroupedJob:
    """What a job adds to its source. ``split_of`` and ``to_sample`` run in the Spark tasks
    (plain functions, or methods of the source: picklable); ``extra`` on the driver."""

    split_of: Callable[[Any], str | None] | None = None
    """The split of a file's sample from the file's header (a DICOM series: by its patient);
    None: by a hash of the sample key. Asked only when the job splits."""
    to_sample: Callable[[Sample], Sample] | None = None
    """What is written of a row of ``source.read_sample`` (None: the row)."""
    extra: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None
    """``manifest.extra`` from the inputs listed and the counts (``rows``, ``files_in_rows``,
    ``samples_quarantined``, ``q_rows``); None: :func:`grouped_extra`."""
    header_error: str = "unreadable input"
    """The reason of a file whose header fails with an unexpected error."""
    sample_error: str = "sample failed"
    """The reason of a sample that fails with an unexpected error."""
    split_error: str = "files of the sample name different splits"
    """The reason of a sample whose row names another split than its files' headers."""
    phase: str = "samples+write"
    """The progress phase of the second job."""
    stage: str = "sample"
    """The quarantine table's ``stage`` of the files of a quarantined sample."""


def run_grouped(run: PrepRun, spark: Any, job: GroupedJob) -> PrepResult:
    """Two jobs: (1) list and read headers in tasks, count files per sample; (2) one task
    per planned shard reads its samples and writes them (``write_partitions``)."""
    from pyspark import StorageLevel

    from gpuspark.data.write import write_partitions

    F = sql_functions(spark)

    source, src, opts = run.require_source(), run.src, run.write
    split_of = job.split_of if opts.fractions else None
    done: dict[str, Any] = {}
    with run.watching(spark, phase="headers") as watch:
        fn = _header_fn(source, run.counters["quarantined"], opts.fractions, split_of, job)
        fn = storage.with_credentials(fn, src)  # the tasks read src
        heads = _source_units(spark, src).mapInArrow(fn, _HEADER_DDL)
        heads = heads.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            n_files, samples, q_head = _sample_table(heads)
            run.counted(quarantined=len(q_head))
            if n_files == 0:
                raise PrepError(f"source {src} holds no files", remedy="check the path")
            if not samples:  # nothing readable: fail before the write job
                run.check_outcome(n_files, 0, q_head)
            layout, assign = deal_shards(
                samples,
                world_size=opts.world_size,
                num_shards=opts.num_shards,
                tasks=2 * cores(spark),
                shard_bytes=SHARD_BYTES,
            )
            keyed = spark.createDataFrame(sorted(assign.items()), f"key string, {_SHARD} int")
            good = heads.filter(F.col("reason").isNull()).select("path", "key")
            watch.phase = job.phase

            def extra(reports: list[dict[str, Any]]) -> dict[str, Any]:
                # runs on the driver before the commit: a job without records commits nothing
                done.update(_tally(reports, q_head, job.stage))
                run.counted(done["rows"], len(done["q_rows"]) - len(q_head))
                run.check_outcome(n_files, done["rows"], done["q_rows"])
                make = job.extra or (lambda n, counts: grouped_extra(run, n, counts))
                return make(n_files, done)

            manifest, _ = write_partitions(
                good.join(F.broadcast(keyed), "key"),
                run.root,
                layout,
                _SHARD,
                _sample_writer(source, job, layout, run.counters),
                overwrite=opts.overwrite,
                compression=opts.compression,
                provenance={"source": src, "job": run.job},
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
        quarantined_items=done["samples_quarantined"] + len(q_head),
        label_map=manifest.extra.get("label_map", {}),
    )


def grouped_extra(run: PrepRun, n_files: int, done: dict[str, Any]) -> dict[str, Any]:
    """The default ``manifest.extra``: the job, its source and split, the quarantine counts."""
    fractions = run.write.fractions
    return {
        "prep": {
            "kind": run.kind,
            "source": run.src,
            "split": list(fractions) if fractions else None,
        },
        "quarantine": {
            "inputs": n_files,
            "rows": int(done["rows"]),
            "files_in_rows": int(done["files_in_rows"]),
            "files": len(done["q_rows"]),
            "samples": int(done["samples_quarantined"]),
            "by_reason": by_reason(done["q_rows"]),
        },
    }


# --------------------------------------------------------------------------- listing, headers


def _source_units(spark: Any, src: str) -> Any:
    """The units of ``src`` (files, and directories the tasks walk) as a DataFrame of two
    tasks per core with even shares of bytes (:mod:`gpuspark.data.sources.listing`); refuses a
    source with nothing in it.

    DataFrame API only (it runs over Spark Connect too): partition ``i`` of a ``range`` of one
    number per task holds ``i`` alone, and a broadcast join with the units of task ``i``
    keeps that partitioning (no shuffle), so each task gets exactly its share.
    """
    F = sql_functions(spark)
    n = cores(spark)
    units = plan_units(src, want=8 * n)
    if not units:
        raise PrepError(f"source {src} holds no files", remedy="check the path")
    parts = deal(units, 2 * n)
    rows = [(i, *unit) for i, part in enumerate(parts) for unit in part]
    table = spark.createDataFrame(rows, f"{_TASK} int, {_UNIT_DDL}")
    tasks = spark.range(0, len(parts), 1, len(parts))
    joined = tasks.join(F.broadcast(table), F.col("id") == F.col(_TASK))
    return joined.select("path", "is_dir", "size")


def _walk(batches: Iterable[Any]) -> Iterator[tuple[str, int]]:
    """Every file of the units in ``batches`` (runs in the tasks)."""

    for batch in batches:
        cols = [batch.column(c).to_pylist() for c in ("path", "is_dir", "size")]
        for unit in zip(*cols, strict=True):
            yield from walk_unit(unit)


def _header_fn(
    source: Source,
    q_acc: Any,
    fractions: Sequence[float] | None,
    split_of: Callable[[Any], str | None] | None,
    job: GroupedJob,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """List the units and read the header of every file: its sample and split, or why it is
    quarantined."""
    what = job.header_error

    def headers(batches: Iterator[Any]) -> Iterator[Any]:
        rows = (
            _header_row(path, n, source, fractions, split_of, what, q_acc)
            for path, n in _walk(batches)
        )
        return record_batches(rows, _HEADER_DDL, 512)

    return headers


def _header_row(
    path: str,
    length: int,
    source: Source,
    fractions: Sequence[float] | None,
    split_of: Callable[[Any], str | None] | None,
    what: str,
    q_acc: Any,
) -> dict[str, Any]:

    rec: dict[str, Any] = {"path": path, "length": length}
    try:
        header = source.read_header(path)
        key = source.sample_key(path, header)
        if fractions:
            rec["split"] = split_of(header) if split_of else assign_split(key, fractions)
    except Exception as e:  # never fail the job on one file
        q_acc.add(1)
        qe = QuarantineError.wrap(e, what, path)
        rec.update(split=None, reason=qe.reason, error_type=qe.error_type)
        return rec
    rec["key"] = key
    return rec


# --------------------------------------------------------------------------- samples


def _sample_writer(
    source: Source, job: GroupedJob, layout: list[str | None], counters: dict[str, Any]
) -> Callable[[int, Iterable[Any]], Iterator[Any]]:
    """The task of one shard: read its samples one at a time (one sample's data in memory),
    write each, report the quarantined ones and the counts."""
    rows_acc, q_acc = counters["rows"], counters["quarantined"]
    to_sample, sample_error, split_error = job.to_sample, job.sample_error, job.split_error

    def shard_task(shard: int, batches: Iterable[Any]) -> Iterator[Any]:
        from gpuspark.data.write import PartitionReport

        files: dict[str, list[str]] = {}
        for batch in batches:
            paths, keys = batch.column("path").to_pylist(), batch.column("key").to_pylist()
            for path, key in zip(paths, keys, strict=True):
                files.setdefault(key, []).append(path)
        rows = in_rows = 0
        for key in sorted(files):
            paths = sorted(files[key])
            try:
                row = source.read_sample(paths)
                if row.get("split", layout[shard]) != layout[shard]:
                    raise QuarantineError(split_error, "Split")
            except Exception as e:  # never fail the job on one sample
                q_acc.add(len(paths))
                qe = QuarantineError.wrap(e, sample_error)
                err = qe.error_type if qe.path is None else f"{qe.error_type} ({qe.path})"
                yield PartitionReport(series_uid=key, paths=paths, reason=qe.reason, error_type=err)
                continue
            rows_acc.add(1)
            rows, in_rows = rows + 1, in_rows + len(paths)
            yield row if to_sample is None else to_sample(row)
        yield PartitionReport(rows=rows, files_in_rows=in_rows)

    return shard_task


# --------------------------------------------------------------------------- counts


def _add_sample(table: dict[str, list[Any]], key: str, split: Any, files: int, nbytes: int) -> None:
    """Add files and bytes to a sample's ``[split, files, bytes]``; the split is the smallest
    name seen (files of one sample that disagree are quarantined when it is read)."""
    acc = table.setdefault(key, [split, 0, 0])
    acc[1], acc[2] = acc[1] + files, acc[2] + nbytes
    if split is not None and (acc[0] is None or split < acc[0]):
        acc[0] = split


def _summarize(batches: Iterator[Any]) -> Iterator[Any]:
    """Per task: files and bytes of each sample, and the files quarantined at the header
    (runs in the header tasks themselves: no shuffle, no second pass over the headers)."""
    import pyarrow as pa

    per_sample: dict[str, list[Any]] = {}
    quarantined: list[dict[str, Any]] = []
    for batch in batches:
        for r in batch.to_pylist():
            if r["key"] is None:
                quarantined.append({k: r[k] for k in ("path", "reason", "error_type")})
                continue
            _add_sample(per_sample, r["key"], r["split"], 1, max(r["length"] or 0, 0))
    rows = [{"key": k, "split": v[0], "n": v[1], "b": v[2]} for k, v in per_sample.items()]
    yield pa.RecordBatch.from_pylist(rows + quarantined, schema=arrow_schema(_SUMMARY_DDL))


def _sample_table(heads: Any) -> tuple[int, dict[str, tuple[Any, int, int]], list[dict]]:
    """Files listed; each sample's (split, readable files, bytes); the files quarantined at
    the header. One job: the listing and header tasks summarise what they just read."""
    samples: dict[str, list[Any]] = {}
    q_rows: list[dict[str, Any]] = []
    for r in heads.mapInArrow(_summarize, _SUMMARY_DDL).collect():
        if r["key"] is None:
            q_rows.append(
                {
                    "path": r["path"],
                    "series_uid": None,
                    "reason": r["reason"],
                    "error_type": r["error_type"],
                    "stage": "header",
                }
            )
            continue
        _add_sample(samples, r["key"], r["split"], r["n"], r["b"])
    table = {key: (v[0], int(v[1]), int(v[2])) for key, v in samples.items()}
    return sum(v[1] for v in table.values()) + len(q_rows), table, q_rows


def _tally(
    reports: list[dict[str, Any]], q_head: list[dict[str, Any]], stage: str
) -> dict[str, Any]:
    """Counts and quarantine rows from the shard tasks' reports."""
    q_rows = list(q_head)
    samples_q = 0
    for rep in reports:
        if "paths" in rep:
            samples_q += 1
            q_rows.extend(
                {
                    "path": path,
                    "series_uid": rep["series_uid"],
                    "reason": rep["reason"],
                    "error_type": rep["error_type"],
                    "stage": stage,
                }
                for path in rep["paths"]
            )
    counts = [rep for rep in reports if "rows" in rep]
    return {
        "rows": sum(rep["rows"] for rep in counts),
        "files_in_rows": sum(rep["files_in_rows"] for rep in counts),
        "samples_quarantined": samples_q,
        "q_rows": q_rows,
    }
