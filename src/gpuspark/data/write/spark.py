"""Spark writers: :func:`write_dataframe` and :func:`write_partitions`.

One task per shard writes under ``_gpuspark_staging-<wid>/p<partition>-a<attempt>/`` (its
``taskAttemptId``) and returns its shard descriptor; the driver commits exactly the attempt
whose result Spark returned for each partition. Retried tasks, speculative duplicates and
attempts on killed executors only ever write inside the staging directory, which is removed
after the commit (:mod:`gpuspark.data.write.commit`).

Only the DataFrame API is used (``mapInArrow``, ``collect``), so a Spark Connect
DataFrame is written the same way: the tasks return their shard descriptors as rows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from gpuspark import storage
from gpuspark._util.spark_compat import is_connect, sql_functions
from gpuspark.data import format as fmt
from gpuspark.data.checks import check_split_name
from gpuspark.data.format import Manifest, ShardInfo
from gpuspark.data.write.commit import (
    build_manifest,
    commit,
    make_provenance,
    shard_name,
    staged_write,
)
from gpuspark.data.write.layout import KEY_COL, partition_keys, plan_dataframe
from gpuspark.data.write.shard_writer import ShardFile
from gpuspark.errors import GpusparkError, did_you_mean

__all__ = ["PartitionFn", "PartitionReport", "SampleFn", "write_dataframe", "write_partitions"]

SampleFn = Callable[[dict[str, Any]], Mapping[str, Any]]
"""``row dict -> sample`` (runs in the tasks)."""


class PartitionReport(dict):
    """What a :func:`write_partitions` task hands back to the driver instead of writing it
    (a quarantined input, a per-task count): a plain JSON-able dict."""


PartitionFn = Callable[[int, Iterable[Any]], Iterable[Mapping[str, Any]]]
"""``(shard index, pyarrow RecordBatches) -> samples and Reports`` (runs in the tasks)."""


def _task_writer(
    staging: str,
    name_of: Callable[[int], str],
    keys: list[int] | None,
    compression: str | None,
    sample_fn: SampleFn | None,
    partition_fn: PartitionFn | None = None,
) -> Callable[[Iterable[Any]], Iterable[Any]]:
    """The ``mapInArrow`` function that writes one shard per task attempt, named
    ``name_of(partition)``: the rows of the partition (through ``sample_fn``), or what
    ``partition_fn`` makes of them."""

    # a store's credentials travel inside the task (never in the Spark conf, which the UI
    # and event logs show): a running cluster's executors were started without them, and
    # the task may read its input from a store (prep dicom s3://…) whatever it writes to
    creds = storage.credential_env()

    def write_partition(batches: Iterable[Any]) -> Iterable[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        os.environ.update(creds)

        ctx = TaskContext.get()
        assert ctx is not None  # always set inside a task
        pid, attempt = ctx.partitionId(), ctx.taskAttemptId()
        rel = f"p{pid:05d}-a{attempt}/{name_of(pid)}"
        local = _attempt_file(staging, rel)
        shard = ShardFile(local, compression)
        key = keys[pid] if keys else None
        reports: list[dict[str, Any]] = []
        try:
            if partition_fn is None:
                for batch in batches:
                    _write_batch(shard, batch, key, sample_fn)
            else:
                checked = (_checked_batch(b, key) for b in batches)
                for item in partition_fn(pid, checked):
                    if isinstance(item, PartitionReport):
                        reports.append(dict(item))
                    else:
                        shard.write(item)
            shard.finish()
            _upload_attempt(local, staging, rel)
        except BaseException:
            shard.discard()
            _drop_local(local, staging)
            raise
        yield pa.RecordBatch.from_pylist(
            [
                {
                    "partition": pid,
                    "attempt": attempt,
                    "file": rel,
                    "records": len(shard.entries),
                    "bytes": shard.bytes,
                    "hash": shard.hash,
                    "schema": json.dumps(shard.schema.schema),
                    "reports": json.dumps(reports),
                }
            ],
            schema=_result_schema(),
        )

    return write_partition


def _attempt_file(staging: str, rel: str) -> str:
    """The local file a task attempt writes its shard to: in its own folder under a local
    staging directory (created without parents: it fails once the driver removed the staging
    directory), or in a temporary folder when the staging prefix is a URL (then uploaded)."""
    if storage.is_url(staging):
        import tempfile

        return os.path.join(tempfile.mkdtemp(prefix="gpuspark-shard-"), rel.rsplit("/", 1)[1])
    attempt_dir = os.path.join(staging, rel.rsplit("/", 1)[0])
    os.mkdir(attempt_dir)
    return os.path.join(staging, rel)


def _upload_attempt(local: str, staging: str, rel: str) -> None:
    """A remote staging prefix: upload the attempt's shard and index under ``rel`` (index
    first, shard last), then drop the local copies."""
    if not storage.is_url(staging):
        return
    fs, inner = storage.filesystem(storage.join(staging, rel))
    try:
        fs.put_file(local + ".idx", inner + ".idx")
        fs.put_file(local, inner)
    finally:
        _drop_local(local, staging)


def _drop_local(local: str, staging: str) -> None:
    """Remove the temporary folder of a shard written for a remote staging prefix."""
    if storage.is_url(staging):
        import shutil

        shutil.rmtree(os.path.dirname(local), ignore_errors=True)


def _checked_batch(batch: Any, key: int | None) -> Any:
    """``batch`` without the shard key column, after checking every row carries ``key``."""
    if key is None:
        return batch
    col = batch.column(batch.schema.get_field_index(KEY_COL))
    if col.null_count or any(v != key for v in set(col.to_pylist())):
        raise GpusparkError(f"internal error: rows of another shard in shard key {key}")
    return batch.drop_columns([KEY_COL])


def _write_batch(shard: ShardFile, batch: Any, key: int | None, sample_fn: SampleFn | None) -> None:
    for row in _checked_batch(batch, key).to_pylist():
        shard.write(sample_fn(row) if sample_fn else row)


_RESULT_DDL = (
    "partition int, attempt long, file string, records long, bytes long, hash string, "
    "schema string, reports string"
)


def _result_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("partition", pa.int32()),
            ("attempt", pa.int64()),
            ("file", pa.string()),
            ("records", pa.int64()),
            ("bytes", pa.int64()),
            ("hash", pa.string()),
            ("schema", pa.string()),
            ("reports", pa.string()),
        ]
    )


def write_dataframe(
    df: Any,
    path: str | os.PathLike[str],
    *,
    num_shards: int | None = None,
    world_size: int | None = None,
    split_col: str | None = None,
    overwrite: bool = False,
    compression: str | None = None,
    provenance: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | Callable[[list[dict[str, Any]]], Mapping[str, Any]] | None = None,
    sample_fn: SampleFn | None = None,
    files: Mapping[str, bytes] | None = None,
    partition_fn: PartitionFn | None = None,
) -> Manifest:
    """Write a Spark DataFrame as a gpuspark dataset: one shard per partition; return the manifest.

    Each row becomes a sample: by default every non-null column is a key (binary -> bytes,
    string -> str, numbers, arrays -> lists); ``sample_fn(row_dict) -> dict`` builds the
    sample instead (it runs in the tasks, so it must be picklable). With ``num_shards`` or
    ``world_size`` the rows are dealt round-robin to ``num_shards`` shards (default: the
    partition count rounded up to a multiple of ``world_size``), so shards differ by at most
    one record. With ``split_col``, each split value gets its own shards (recorded in
    ``manifest.splits``), balanced the same way. ``path`` is a local or shared file-system
    path that the executors can reach, or a URL of an object store (``s3://bucket/ds``: each
    task attempt uploads under its own staging prefix, the driver copies the winners into
    place and uploads the manifest last; the driver's store credentials travel in the
    tasks). ``files`` (``{"name.ext": contents}``) are committed with the shards, before the
    manifest (listed in ``manifest.extra["files"]``, see
    :func:`gpuspark.data.write.commit.commit`).

    ``partition_fn(shard index, Arrow batches)`` replaces the row-by-row path: it yields the
    samples of its shard (e.g. blocks of rows) and :class:`PartitionReport` dicts; ``extra``
    may then be a callable on the winning attempts' reports, each with ``"shard"`` set to its
    shard's path, run on the driver before the commit.
    """
    if compression not in fmt.CODECS:
        raise fmt.unknown_codec_error(compression)
    if world_size is not None and world_size <= 0:
        raise GpusparkError(f"world_size must be > 0, got {world_size}")
    if split_col is not None and split_col not in df.columns:
        raise GpusparkError(
            f"split column {split_col!r} is not in the DataFrame"
            + did_you_mean(split_col, df.columns)
        )
    with staged_write(path, overwrite) as (root, staging, wid, old):
        return _write_spark(
            df,
            root,
            staging,
            wid,
            old,
            num_shards,
            world_size,
            split_col,
            compression,
            sample_fn,
            provenance,
            extra,
            files,
            partition_fn,
        )


def _write_spark(
    df: Any,
    root: str,
    staging: str,
    wid: str,
    old: Manifest | None,
    num_shards: int | None,
    world_size: int | None,
    split_col: str | None,
    compression: str | None,
    sample_fn: SampleFn | None,
    provenance: Mapping[str, Any] | None,
    extra: Mapping[str, Any] | Callable[[list[dict[str, Any]]], Mapping[str, Any]] | None,
    files: Mapping[str, bytes] | None,
    partition_fn: PartitionFn | None = None,
) -> Manifest:
    balance = num_shards is not None or world_size is not None or split_col is not None
    cached = balance and not df.storageLevel.useMemory and not df.storageLevel.useDisk
    if cached:
        # The count pass and the write pass must see the same rows in the same partitions;
        # a recomputed plan need not (e.g. round-robin repartitioning after column pruning).
        df = df.persist()
    try:
        planned, layout, keys = plan_dataframe(df, num_shards, world_size, split_col)
        name_of = _shard_names(layout, wid)
        func = _task_writer(staging, name_of, keys, compression, sample_fn, partition_fn)
        results = planned.mapInArrow(func, _RESULT_DDL).collect()
    finally:
        if cached:
            df.unpersist()
    if layout is None:
        layout = [(None, i) for i in range(len(results))]
    names = [name_of(i) for i in range(len(layout))]
    prov = _spark_provenance(df, provenance, "write_dataframe")
    manifest, staged = _staged_manifest(results, layout, names, staging, compression, prov)
    if callable(extra):
        reports = [
            {**rep, "shard": names[r["partition"]]}
            for r in results
            for rep in json.loads(r["reports"])
        ]
        extra = extra(reports)
    manifest.extra.update(extra or {})
    if world_size:
        manifest.extra.setdefault("world_size", world_size)
    return commit(root, staged, manifest, old, staging, files)


def _shard_names(layout: list[tuple[Any, int]] | None, wid: str) -> Callable[[int], str]:
    """Shard ``i``'s file name: from the planned ``layout``, else ``part-<i>`` (a shard per
    partition, however many the plan has)."""
    if layout is None:
        return partial(shard_name, "part", wid=wid)
    return [shard_name("part" if s is None else s, j, wid) for s, j in layout].__getitem__


def _spark_provenance(df: Any, given: Mapping[str, Any] | None, writer: str) -> dict[str, Any]:
    spark = df.sparkSession
    if is_connect(spark):  # the server's application, read through its settings
        app_id, master = spark.conf.get("spark.app.id", None), spark.conf.get("spark.master", None)
        extra = {"spark_connect": True}
    else:
        app_id, master, extra = spark.sparkContext.applicationId, spark.sparkContext.master, {}
    return make_provenance(
        "spark",
        given,
        writer=writer,
        spark_application_id=app_id,
        spark_master=master,
        **extra,
    )


def _staged_manifest(
    results: list[Any],
    layout: list[tuple[Any, int]],
    names: list[str],
    staging: str,
    compression: str | None,
    prov: dict[str, Any],
) -> tuple[Manifest, list[tuple[str, ShardInfo]]]:
    """The manifest of the shards the winning task attempts staged (one per layout entry)."""
    by_partition = {r["partition"]: r for r in results}
    if sorted(by_partition) != list(range(len(layout))) or len(results) != len(layout):
        raise GpusparkError(
            f"internal error: expected one result per shard ({len(layout)}), got "
            f"{sorted(r['partition'] for r in results)}"
        )
    staged, shards = [], []
    for pid, (split, _) in enumerate(layout):
        r = by_partition[pid]
        src = storage.join(staging, r["file"])
        size = storage.file_size(src)
        if size != r["bytes"]:
            raise GpusparkError(f"shard {src} has {size} bytes, task said {r['bytes']}")
        info = ShardInfo(names[pid], r["records"], r["bytes"], r["hash"], names[pid] + ".idx")
        staged.append((src, info))
        shards.append((info, split, json.loads(r["schema"])))
    return build_manifest(shards, compression, prov, {}), staged


def write_partitions(
    df: Any,
    path: str | os.PathLike[str],
    splits: list[str | None],
    shard_col: str,
    partition_fn: PartitionFn,
    *,
    overwrite: bool = False,
    compression: str | None = None,
    provenance: Mapping[str, Any] | None = None,
    extra: Callable[[list[dict[str, Any]]], Mapping[str, Any]] | None = None,
    world_size: int | None = None,
    files: Callable[[list[dict[str, Any]]], Mapping[str, bytes]] | None = None,
) -> tuple[Manifest, list[dict[str, Any]]]:
    """Write a dataset whose shards the caller has planned: shard ``i`` (split ``splits[i]``)
    is made from the rows whose int column ``shard_col`` is ``i``, by
    ``partition_fn(i, batches)``, in one task; return the manifest and the :class:`PartitionReport`
    records of the winning task attempts.

    For jobs that do their heavy work while writing (read, assemble, transform each input,
    one at a time), so nothing is cached or shuffled after it. ``partition_fn`` yields the
    samples to write and ``PartitionReport`` dicts to return (quarantined inputs, counts); the
    manifest's ``extra`` is ``extra(reports)``, and ``files(reports)`` are committed with the
    shards (as in :func:`write_dataframe`). Both run on the driver before the commit: an
    exception they raise aborts the write and leaves the old dataset (if any) as it was.
    Same staging and commit as :func:`write_dataframe`: exactly one attempt's shard and
    reports count per shard.
    """
    F = sql_functions(df)
    if compression not in fmt.CODECS:
        raise fmt.unknown_codec_error(compression)
    for name in {s for s in splits if s is not None}:
        check_split_name(name)
    with staged_write(path, overwrite) as (root, staging, wid, old):
        layout: list[tuple[Any, int]] = []
        seen: dict[str | None, int] = {}
        for split in splits:
            seen[split] = seen.get(split, -1) + 1
            layout.append((split, seen[split]))
        names = [shard_name("part" if s is None else s, j, wid) for s, j in layout]
        keys = partition_keys(len(layout))
        key_of = F.element_at(F.array(*[F.lit(k) for k in keys]), F.col(shard_col) + F.lit(1))
        keyed = df.withColumn(KEY_COL, key_of).repartition(len(layout), KEY_COL)
        func = _task_writer(staging, names.__getitem__, keys, compression, None, partition_fn)
        results = keyed.mapInArrow(func, _RESULT_DDL).collect()
        reports = [rep for r in results for rep in json.loads(r["reports"])]
        prov = _spark_provenance(df, provenance, "write_partitions")
        manifest, staged = _staged_manifest(results, layout, names, staging, compression, prov)
        manifest.extra.update(extra(reports) if extra else {})
        if world_size:
            manifest.extra.setdefault("world_size", world_size)
        more = files(reports) if files else None
        return commit(root, staged, manifest, old, staging, more), reports
