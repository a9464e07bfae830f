"""Writing gpuspark datasets: :class:`ShardWriter` (plain Python) and :func:`write_dataframe`.

Both writers stage shards in ``<dataset>/_gpuspark_staging-<wid>/`` (invisible to readers,
which only follow ``manifest.json``), move finished shards to their final names, commit the
manifest last with an atomic rename, then delete the staging directory and, on overwrite,
the previous dataset's shards. A failure at any point leaves either the old dataset or no
dataset, never a half-written one.

Spark: one task per shard writes under ``_gpuspark_staging-<wid>/p<partition>-a<attempt>/``
(its ``taskAttemptId``) and returns its shard descriptor; the driver commits exactly the
attempt whose result Spark returned for each partition. Retried tasks, speculative
duplicates and attempts on killed executors only ever write inside the staging directory,
which is removed after the commit.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from gpuspark.data import format as fmt
from gpuspark.data.format import (
    MANIFEST_NAME,
    DatasetExistsError,
    Manifest,
    ShardInfo,
)
from gpuspark.errors import GpusparkError, did_you_mean

__all__ = [
    "DEFAULT_TARGET_SHARD_BYTES",
    "Report",
    "ShardWriter",
    "balanced_counts",
    "write_dataframe",
    "write_partitions",
]

DEFAULT_TARGET_SHARD_BYTES = 128 * 1024 * 1024
_STAGING_PREFIX = "_gpuspark_staging-"
_SHARD_RE = re.compile(r"^[\w.=-]+-\d{5}-[0-9a-f]{8}\.tfrecord(\.idx)?$")
_KEY_COL = "__gpuspark_shard_key"
SampleFn = Callable[[dict[str, Any]], Mapping[str, Any]]


class Report(dict):
    """What a :func:`write_partitions` task hands back to the driver instead of writing it
    (a quarantined input, a per-task count): a plain JSON-able dict."""


PartitionFn = Callable[[int, Iterable[Any]], Iterable[Mapping[str, Any]]]
"""``(shard index, pyarrow RecordBatches) -> samples and Reports`` (runs in the tasks)."""


# --------------------------------------------------------------------------- one shard file


class _ShardFile:
    """A TFRecord shard being written: framing, index entries, size and hash as it goes."""

    def __init__(self, path: str, compression: str | None) -> None:
        import xxhash

        self.path = path
        self.compression = compression
        self._f = open(path, "wb")  # noqa: SIM115 - closed in finish()/discard()
        self._hash = xxhash.xxh3_128()
        self.entries: list[tuple[int, int]] = []
        self.bytes = 0
        self.schema = _SchemaAccumulator()

    def write(self, sample: Mapping[str, Any]) -> None:
        payload = fmt.encode_example(sample)
        record = fmt.frame(fmt.compress(payload, self.compression) if self.compression else payload)
        self._f.write(record)
        self._hash.update(record)
        self.entries.append((self.bytes, len(record)))
        self.bytes += len(record)
        self.schema.add(sample)

    def finish(self) -> None:
        """Flush and fsync the shard, then write its index next to it."""
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        fmt.write_index(self.path + ".idx", self.entries)

    def discard(self) -> None:
        self._f.close()

    @property
    def hash(self) -> str:
        return f"xxh3_128:{self._hash.hexdigest()}"


class _SchemaAccumulator:
    """Schema of many samples, merged cheaply (a full merge only when a key's spec changes)."""

    def __init__(self) -> None:
        self.schema: dict[str, dict[str, Any]] = {}
        self._last: dict[str, dict[str, Any]] = {}

    def add(self, sample: Mapping[str, Any]) -> None:
        for key, value in sample.items():
            if value is None:
                continue
            spec = fmt.value_spec(key, value)
            cur = self.schema.get(key)
            if cur is None:
                self.schema[key] = {**spec, "count": 1}
            elif self._last.get(key) == spec:
                cur["count"] += 1
            else:
                self.schema[key] = fmt.merge_spec(cur, {**spec, "count": 1})
            self._last[key] = spec


# --------------------------------------------------------------------------- dataset dir


def _new_wid() -> str:
    return uuid.uuid4().hex[:8]


def _shard_name(prefix: str, index: int, wid: str) -> str:
    return f"{prefix}-{index:05d}-{wid}.tfrecord"


def _check_split_name(split: str) -> str:
    if not re.fullmatch(r"[\w.=-]+", split):
        raise GpusparkError(
            f"split name {split!r} is not usable in a file name",
            remedy="use letters, digits, '_', '-', '.' or '='",
        )
    return split


def _is_leftover(name: str, keep: set[str]) -> bool:
    """A file or directory an interrupted gpuspark write may have left behind."""
    if name.startswith(_STAGING_PREFIX) or name.startswith(".tmp-"):
        return True
    return bool(_SHARD_RE.match(name)) and name not in keep


def _prepare_target(root: str, overwrite: bool) -> Manifest | None:
    """Check the target directory; return the current manifest (if overwriting one)."""
    if os.path.exists(root) and not os.path.isdir(root):
        raise DatasetExistsError(f"{root} exists and is a file, not a dataset directory")
    if not os.path.isdir(root):
        os.makedirs(root, exist_ok=True)
        return None
    old = None
    if os.path.exists(os.path.join(root, MANIFEST_NAME)):
        if not overwrite:
            raise DatasetExistsError(
                f"{root} already holds a gpuspark dataset",
                remedy="pass overwrite=True (--overwrite) to replace it, or choose another path",
            )
        old = fmt.load_manifest(root)
    keep = _manifest_files(old)
    # Files next to a committed dataset (e.g. prep's quarantine.parquet) belong to it and are
    # left alone on overwrite; an uncommitted directory must hold only gpuspark leftovers.
    others = (
        []
        if old is not None
        else [
            n
            for n in os.listdir(root)
            if n != MANIFEST_NAME and n not in keep and not _is_leftover(n, keep)
        ]
    )
    if others:
        raise DatasetExistsError(
            f"{root} is not empty and is not a gpuspark dataset (found {sorted(others)[:3]})",
            remedy="write to a new or empty directory",
        )
    _clean_leftovers(root, keep)
    return old


def _manifest_files(manifest: Manifest | None) -> set[str]:
    if manifest is None:
        return set()
    return {p for s in manifest.shards for p in (s.path, s.index)}


def _clean_leftovers(root: str, keep: set[str]) -> None:
    """Remove staging dirs, temp files and unreferenced shards of interrupted writes."""
    for name in os.listdir(root):
        if _is_leftover(name, keep):
            _remove(os.path.join(root, name))


def _remove(path: str) -> None:
    """Delete a file or directory tree; retry a tree a few times (late writers may race)."""
    for _ in range(5):
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.2)
    shutil.rmtree(path, ignore_errors=True)


def _provenance(source: str, given: Mapping[str, Any] | None, **more: Any) -> dict[str, Any]:
    from gpuspark import __version__

    prov = {
        "source": source,
        "gpuspark_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **more,
    }
    prov.update(given or {})
    return prov


def _commit(
    root: str,
    staged: list[tuple[str, ShardInfo]],
    manifest: Manifest,
    old: Manifest | None,
    staging: str,
) -> Manifest:
    """Move staged shards into place, commit the manifest, then drop old shards and staging."""
    for src, info in staged:
        os.replace(src + ".idx", os.path.join(root, info.index))
        os.replace(src, os.path.join(root, info.path))
    fmt.write_manifest(root, manifest)
    _fsync_dir(root)
    new_files = _manifest_files(manifest)
    for name in _manifest_files(old) - new_files:
        _remove(os.path.join(root, name))
    _remove(staging)
    return manifest


def _fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _abort(root: str, staging: str, created_root: bool) -> None:
    _remove(staging)
    if created_root:
        with contextlib.suppress(OSError):
            os.rmdir(root)  # only if still empty


# --------------------------------------------------------------------------- ShardWriter


class ShardWriter:
    """Write a dataset from plain Python, rolling shards by size; atomic on ``close()``.

    ::

        with ShardWriter("out/ds", target_shard_bytes=64 << 20) as w:
            for sample in samples:
                w.write(sample, split="train")
        manifest = w.manifest

    An exception inside the ``with`` block leaves no dataset (or the previous one, when
    overwriting) and no temporary files. ``split`` groups shards into named splits, recorded
    in ``manifest.splits``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES,
        compression: str | None = None,
        overwrite: bool = False,
        provenance: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        if compression not in fmt.CODECS:
            raise fmt.unknown_codec_error(compression)
        if target_shard_bytes <= 0:
            raise GpusparkError(f"target_shard_bytes must be > 0, got {target_shard_bytes}")
        self.root = os.path.abspath(os.fspath(path))
        self._created_root = not os.path.exists(self.root)
        self._old = _prepare_target(self.root, overwrite)
        self.target_shard_bytes = target_shard_bytes
        self.compression = compression
        self._wid = _new_wid()
        self._staging = os.path.join(self.root, _STAGING_PREFIX + self._wid)
        os.mkdir(self._staging)
        self._open: dict[str | None, _ShardFile] = {}
        self._next_index: dict[str | None, int] = {}
        self._done: list[tuple[str, ShardInfo, str | None, dict[str, Any]]] = []
        self._provenance = _provenance("python", provenance, writer="ShardWriter")
        self._extra = dict(extra or {})
        self.manifest: Manifest | None = None
        self._closed = False

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def write(self, sample: Mapping[str, Any], split: str | None = None) -> None:
        """Append one sample (a dict; see :mod:`gpuspark.data.format`) to ``split``'s shard."""
        if self._closed:
            raise GpusparkError(f"ShardWriter for {self.root} is already closed")
        shard = self._open.get(split)
        if shard is None:
            shard = self._open_shard(split)
        shard.write(sample)
        if shard.bytes >= self.target_shard_bytes:
            self._finish_shard(split)

    def _open_shard(self, split: str | None) -> _ShardFile:
        prefix = "part" if split is None else _check_split_name(split)
        index = self._next_index.get(split, 0)
        self._next_index[split] = index + 1
        name = _shard_name(prefix, index, self._wid)
        shard = _ShardFile(os.path.join(self._staging, name), self.compression)
        self._open[split] = shard
        return shard

    def _finish_shard(self, split: str | None) -> None:
        shard = self._open.pop(split)
        shard.finish()
        name = os.path.basename(shard.path)
        info = ShardInfo(name, len(shard.entries), shard.bytes, shard.hash, name + ".idx")
        self._done.append((shard.path, info, split, shard.schema.schema))

    def close(self) -> Manifest:
        """Finish the open shards and commit the dataset; return its manifest."""
        if self._closed:
            if self.manifest is None:
                raise GpusparkError(f"ShardWriter for {self.root} was aborted")
            return self.manifest
        try:
            for split in list(self._open):
                self._finish_shard(split)
            manifest = _build_manifest(
                [(info, split, schema) for _, info, split, schema in self._done],
                self.compression,
                self._provenance,
                self._extra,
            )
            staged = [(src, info) for src, info, _, _ in self._done]
            self.manifest = _commit(self.root, staged, manifest, self._old, self._staging)
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return self.manifest

    def abort(self) -> None:
        """Drop everything written so far; the previous dataset (if any) stays as it was."""
        for shard in self._open.values():
            shard.discard()
        self._open.clear()
        self._closed = True
        _abort(self.root, self._staging, self._created_root)


def _build_manifest(
    shards: Iterable[tuple[ShardInfo, str | None, dict[str, Any]]],
    compression: str | None,
    provenance: dict[str, Any],
    extra: dict[str, Any],
) -> Manifest:
    schema: dict[str, Any] = {}
    infos: list[ShardInfo] = []
    splits: dict[str, list[str]] = {}
    for info, split, shard_schema in shards:
        infos.append(info)
        if info.records:
            schema = fmt.merge_schema(schema, shard_schema)
        if split is not None:
            splits.setdefault(split, []).append(info.path)
    infos.sort(key=lambda s: s.path)
    splits = {name: sorted(paths) for name, paths in sorted(splits.items())}
    return Manifest(
        schema=schema,
        shards=infos,
        total_records=sum(s.records for s in infos),
        compression=compression,
        splits=splits,
        provenance=provenance,
        extra=extra,
    )


# --------------------------------------------------------------------------- Spark


def balanced_counts(total: int, shards: int) -> list[int]:
    """Records per shard when ``total`` records are dealt round-robin to ``shards`` shards."""
    return [total // shards + (1 if i < total % shards else 0) for i in range(shards)]


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _shards_per_split(
    counts: dict[Any, int], num_shards: int | None, world_size: int | None, partitions: int
) -> dict[Any, int]:
    """Number of shards for each split (``None`` = no split column)."""
    ws = world_size or 1
    if num_shards is not None:
        if num_shards <= 0:
            raise GpusparkError(f"num_shards must be > 0, got {num_shards}")
        if num_shards % ws:
            raise GpusparkError(
                f"num_shards={num_shards} is not a multiple of world_size={ws}: ranks would "
                "get unequal numbers of shards",
                remedy=f"pass num_shards={_round_up(num_shards, ws)} or leave it out",
            )
        return {s: num_shards for s in counts}
    total = sum(counts.values()) or 1
    return {s: _round_up(max(1, round(partitions * n / total)), ws) for s, n in counts.items()}


_M32 = 0xFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash(int_col)`` (``Murmur3_x86_32.hashInt``, seed 42), as a signed int32."""
    k1 = _rotl32((value & _M32) * 0xCC9E2D51 & _M32, 15) * 0x1B873593 & _M32
    h1 = (_rotl32(seed ^ k1, 13) * 5 + 0xE6546B64) & _M32
    h1 ^= 4
    h1 = (h1 ^ (h1 >> 16)) * 0x85EBCA6B & _M32
    h1 = (h1 ^ (h1 >> 13)) * 0xC2B2AE35 & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def partition_keys(n: int) -> list[int]:
    """For each partition p < n, a small int that ``repartition(n, col)`` sends to p.

    Spark hash partitioning places a row in ``pmod(murmur3(col, 42), n)`` (the same value as
    ``F.hash``); choosing these keys makes the shuffle an exact assignment. The write tasks
    check that every row they get carries their key.
    """
    keys: list[int | None] = [None] * n
    missing, v = n, 0
    while missing:
        b = spark_hash_int(v) % n
        if keys[b] is None:
            keys[b] = v
            missing -= 1
        v += 1
    return [int(k) for k in keys if k is not None]


def _plan(
    df: Any,
    num_shards: int | None,
    world_size: int | None,
    split_col: str | None,
) -> tuple[Any, list[tuple[Any, int]], list[int] | None]:
    """Return the DataFrame to write, each shard's (split, index) and the shard hash keys.

    The DataFrame has one partition per shard.

    Without ``num_shards``, ``world_size`` or ``split_col`` the DataFrame's partitions are the
    shards. Otherwise every row gets a global position within its split (partition offset +
    ``monotonically_increasing_id``'s row number) and is dealt round-robin to the split's
    shards, so shard sizes within a split differ by at most one record. This needs a
    deterministic row order per input partition (files, ``range``, cached data): cache or
    checkpoint a DataFrame that comes out of an unordered shuffle first.
    """
    from pyspark.sql import functions as F

    if num_shards is None and world_size is None and split_col is None:
        return df, [(None, i) for i in range(df.rdd.getNumPartitions())], None
    partitions = df.rdd.getNumPartitions()
    split_expr = F.col(split_col).cast("string") if split_col else F.lit(None).cast("string")
    count_rows = (
        df.select(F.spark_partition_id().alias("p"), split_expr.alias("s"))
        .groupBy("p", "s")
        .count()
        .collect()
    )
    if split_col and any(r["s"] is None for r in count_rows):
        raise GpusparkError(
            f"split column {split_col!r} has null values",
            remedy="fill or filter them before writing",
        )
    per_split: dict[Any, int] = {}
    for r in count_rows:
        per_split[r["s"]] = per_split.get(r["s"], 0) + r["count"]
    if not per_split:
        per_split = {None: 0}
    for s in per_split:
        if s is not None:
            _check_split_name(s)
    n_shards = _shards_per_split(per_split, num_shards, world_size, partitions)
    layout: list[tuple[Any, int]] = []
    base: dict[Any, int] = {}
    for s in sorted(n_shards, key=lambda x: (x is None, x)):
        base[s] = len(layout)
        layout.extend((s, j) for j in range(n_shards[s]))
    keys = partition_keys(len(layout))
    offsets = _partition_offsets(count_rows)
    parts = []
    for s in base:
        sub = df.filter(split_expr == F.lit(s)) if split_col else df
        parts.append(_with_key(sub, s, offsets, base[s], n_shards[s], keys))
    keyed = parts[0]
    for p in parts[1:]:
        keyed = keyed.unionByName(p)
    return keyed.repartition(len(layout), _KEY_COL), layout, keys


def _partition_offsets(count_rows: list[Any]) -> dict[Any, dict[int, int]]:
    """Per split: the number of the split's rows in all earlier input partitions."""
    offsets: dict[Any, dict[int, int]] = {}
    totals: dict[Any, int] = {}
    for r in sorted(count_rows, key=lambda r: r["p"]):
        offsets.setdefault(r["s"], {})[r["p"]] = totals.get(r["s"], 0)
        totals[r["s"]] = totals.get(r["s"], 0) + r["count"]
    return offsets


def _with_key(
    df: Any, split: Any, offsets: dict[Any, dict[int, int]], base: int, n: int, keys: list[int]
) -> Any:
    from pyspark.sql import functions as F

    offs = offsets.get(split) or {0: 0}  # partitions without rows of this split: no entry
    offset_map = F.create_map(*[F.lit(x) for p, o in offs.items() for x in (p, o)])
    mid = F.monotonically_increasing_id()
    position = F.element_at(offset_map, F.spark_partition_id()) + (mid % F.lit(1 << 33))
    key_array = F.array(*[F.lit(k) for k in keys[base : base + n]])
    shard = (position % F.lit(n)).cast("int")
    return df.withColumn(_KEY_COL, F.element_at(key_array, shard + F.lit(1)))


def _task_writer(
    staging: str,
    names: list[str],
    keys: list[int] | None,
    compression: str | None,
    sample_fn: SampleFn | None,
    partition_fn: PartitionFn | None = None,
) -> Callable[[Iterable[Any]], Iterable[Any]]:
    """The ``mapInArrow`` function that writes one shard per task attempt: the rows of the
    partition (through ``sample_fn``), or what ``partition_fn`` makes of them."""

    def write_partition(batches: Iterable[Any]) -> Iterable[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None  # always set inside a task
        pid, attempt = ctx.partitionId(), ctx.taskAttemptId()
        attempt_dir = os.path.join(staging, f"p{pid:05d}-a{attempt}")
        os.mkdir(attempt_dir)  # no parents: fails once the driver removed the staging dir
        shard = _ShardFile(os.path.join(attempt_dir, names[pid]), compression)
        key = keys[pid] if keys else None
        reports: list[dict[str, Any]] = []
        try:
            if partition_fn is None:
                for batch in batches:
                    _write_batch(shard, batch, key, sample_fn)
            else:
                checked = (_checked_batch(b, key) for b in batches)
                for item in partition_fn(pid, checked):
                    if isinstance(item, Report):
                        reports.append(dict(item))
                    else:
                        shard.write(item)
            shard.finish()
        except BaseException:
            shard.discard()
            raise
        yield pa.RecordBatch.from_pylist(
            [
                {
                    "partition": pid,
                    "attempt": attempt,
                    "file": os.path.relpath(shard.path, staging),
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


def _checked_batch(batch: Any, key: int | None) -> Any:
    """``batch`` without the shard key column, after checking every row carries ``key``."""
    if key is None:
        return batch
    col = batch.column(batch.schema.get_field_index(_KEY_COL))
    if col.null_count or any(v != key for v in set(col.to_pylist())):
        raise GpusparkError(f"internal error: rows of another shard in shard key {key}")
    return batch.drop_columns([_KEY_COL])


def _write_batch(
    shard: _ShardFile, batch: Any, key: int | None, sample_fn: SampleFn | None
) -> None:
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
    extra: Mapping[str, Any] | None = None,
    sample_fn: SampleFn | None = None,
) -> Manifest:
    """Write a Spark DataFrame as a gpuspark dataset: one shard per partition; return the manifest.

    Each row becomes a sample: by default every non-null column is a key (binary -> bytes,
    string -> str, numbers, arrays -> lists); ``sample_fn(row_dict) -> dict`` builds the
    sample instead (it runs in the tasks, so it must be picklable). With ``num_shards`` or
    ``world_size`` the rows are dealt round-robin to ``num_shards`` shards (default: the
    partition count rounded up to a multiple of ``world_size``), so shards differ by at most
    one record. With ``split_col``, each split value gets its own shards (recorded in
    ``manifest.splits``), balanced the same way. ``path`` must be a local or shared
    file-system path that the executors can reach.
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
    with _staging(path, overwrite) as (root, staging, wid, old):
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
        )


@contextlib.contextmanager
def _staging(
    path: str | os.PathLike[str], overwrite: bool
) -> Iterator[tuple[str, str, str, Manifest | None]]:
    """``(root, staging dir, write id, manifest being replaced)`` of a Spark write; on any
    error the staging directory (and a root this write created) is removed."""
    root = os.path.abspath(os.fspath(path))
    created_root = not os.path.exists(root)
    old = _prepare_target(root, overwrite)
    wid = _new_wid()
    staging = os.path.join(root, _STAGING_PREFIX + wid)
    os.mkdir(staging)
    try:
        yield root, staging, wid, old
    except BaseException:
        _abort(root, staging, created_root)
        raise


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
    extra: Mapping[str, Any] | None,
) -> Manifest:
    balance = num_shards is not None or world_size is not None or split_col is not None
    cached = balance and not df.storageLevel.useMemory and not df.storageLevel.useDisk
    if cached:
        # The count pass and the write pass must see the same rows in the same partitions;
        # a recomputed plan need not (e.g. round-robin repartitioning after column pruning).
        df = df.persist()
    try:
        planned, layout, keys = _plan(df, num_shards, world_size, split_col)
        names = [_shard_name("part" if s is None else s, j, wid) for s, j in layout]
        func = _task_writer(staging, names, keys, compression, sample_fn)
        results = planned.mapInArrow(func, _RESULT_DDL).collect()
    finally:
        if cached:
            df.unpersist()
    prov = _spark_provenance(df, provenance, "write_dataframe")
    manifest, staged = _staged_manifest(results, layout, names, staging, compression, prov)
    manifest.extra.update(extra or {})
    if world_size:
        manifest.extra.setdefault("world_size", world_size)
    return _commit(root, staged, manifest, old, staging)


def _spark_provenance(df: Any, given: Mapping[str, Any] | None, writer: str) -> dict[str, Any]:
    sc = df.sparkSession.sparkContext
    return _provenance(
        "spark",
        given,
        writer=writer,
        spark_application_id=sc.applicationId,
        spark_master=sc.master,
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
        src = os.path.join(staging, r["file"])
        if os.path.getsize(src) != r["bytes"]:
            raise GpusparkError(
                f"shard {src} has {os.path.getsize(src)} bytes, task said {r['bytes']}"
            )
        info = ShardInfo(names[pid], r["records"], r["bytes"], r["hash"], names[pid] + ".idx")
        staged.append((src, info))
        shards.append((info, split, json.loads(r["schema"])))
    return _build_manifest(shards, compression, prov, {}), staged


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
) -> tuple[Manifest, list[dict[str, Any]]]:
    """Write a dataset whose shards the caller has planned: shard ``i`` (split ``splits[i]``)
    is made from the rows whose int column ``shard_col`` is ``i``, by
    ``partition_fn(i, batches)``, in one task; return the manifest and the :class:`Report`
    records of the winning task attempts.

    For jobs that do their heavy work while writing (read, assemble, transform each input,
    one at a time), so nothing is cached or shuffled after it. ``partition_fn`` yields the
    samples to write and ``Report`` dicts to return (quarantined inputs, counts); the
    manifest's ``extra`` is ``extra(reports)``. Same staging and commit as
    :func:`write_dataframe`: exactly one attempt's shard and reports count per shard.
    """
    from pyspark.sql import functions as F

    if compression not in fmt.CODECS:
        raise fmt.unknown_codec_error(compression)
    for name in {s for s in splits if s is not None}:
        _check_split_name(name)
    with _staging(path, overwrite) as (root, staging, wid, old):
        layout: list[tuple[Any, int]] = []
        seen: dict[str | None, int] = {}
        for split in splits:
            seen[split] = seen.get(split, -1) + 1
            layout.append((split, seen[split]))
        names = [_shard_name("part" if s is None else s, j, wid) for s, j in layout]
        keys = partition_keys(len(layout))
        key_of = F.element_at(F.array(*[F.lit(k) for k in keys]), F.col(shard_col) + F.lit(1))
        keyed = df.withColumn(_KEY_COL, key_of).repartition(len(layout), _KEY_COL)
        func = _task_writer(staging, names, keys, compression, None, partition_fn)
        results = keyed.mapInArrow(func, _RESULT_DDL).collect()
        reports = [rep for r in results for rep in json.loads(r["reports"])]
        prov = _spark_provenance(df, provenance, "write_partitions")
        manifest, staged = _staged_manifest(results, layout, names, staging, compression, prov)
        manifest.extra.update(extra(reports) if extra else {})
        if world_size:
            manifest.extra.setdefault("world_size", world_size)
        return _commit(root, staged, manifest, old, staging), reports
