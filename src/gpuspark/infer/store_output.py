"""Predictions written to an object store (``predict -o s3://bucket/preds``): the same folder
as a local one (:mod:`gpuspark.infer.output`), committed without a rename.

An object store cannot rename a folder, and Spark's own Parquet writer needs a Hadoop client
for the store (``hadoop-aws`` for ``s3a://``), which the pyspark wheel does not carry. So:

- each task writes its partition with pyarrow and uploads it under the run's staging prefix
  ``<dst>/_staging-<id>/``, in a name of its own attempt (``_attempts/p00003-a17.parquet``);
- the driver keeps the attempt Spark reported for each partition (a retried or speculative
  attempt's file is left out), names it ``part-00003-<id>.parquet`` and writes the marker,
  every file listed, last;
- the commit copies the staged files into ``<dst>`` (server-side), the marker last, in one
  PUT; then removes the earlier predictions' files that the new marker does not list, and
  the staging prefix.

A failed run removes its staging prefix and leaves the earlier predictions as they were. A
reader that goes by the marker sees the old predictions or the new ones, never a mix; a plain
folder reader may see both runs' part files for the moments of the commit (their names
differ by the run's id). Credentials travel inside the tasks, never in the Spark conf.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from gpuspark import storage
from gpuspark.errors import DatasetExistsError
from gpuspark.storage import RemotePath

__all__ = [
    "check_remote",
    "commit_remote",
    "count_remote_rows",
    "remote_parquet_files",
    "remote_reasons",
    "staged_remote",
    "write_remote_marker",
    "write_remote_parquet",
    "write_remote_table",
]

log = logging.getLogger(__name__)

_STAGING = "_staging-"
_ATTEMPTS = "_attempts"
_RESULT_DDL = "partition int, attempt long, file string, rows long"


def check_remote(root: RemotePath, overwrite: bool, marker: str) -> None:
    """Refuse now (one line) a destination URL that cannot be written, or that holds files
    other than an earlier ``predict``'s (those only with ``overwrite``)."""
    storage.check_writable(str(root), "destination")
    _check_present(root, _present(root), overwrite, marker)


def _present(root: RemotePath) -> list[str]:
    """The objects below ``root``, staging prefixes left out."""
    return [f for f in storage.files_below(root) if not f.startswith(_STAGING)]


def _check_present(root: RemotePath, present: list[str], overwrite: bool, marker: str) -> None:
    """Refuse ``root`` holding ``present`` unless empty, or (``overwrite``) wholly an earlier
    ``predict``'s output."""
    if not present:
        return
    if not overwrite:
        raise DatasetExistsError(
            f"destination {root} already holds {len(present)} objects",
            remedy="choose another destination, or pass --overwrite to replace earlier predictions",
        )
    try:
        text: bytes | None = storage.read_bytes(root / marker)
    except OSError:
        text = None
    problem = storage.unlisted_files(present, text, marker, "gpuspark predict")
    if problem:
        raise DatasetExistsError(
            f"{root} {problem}; --overwrite replaces only predictions gpuspark predict wrote, "
            "and nothing was changed",
            remedy="choose a new or empty destination, or remove those objects yourself",
        )


@contextmanager
def staged_remote(root: RemotePath, overwrite: bool, marker: str) -> Iterator[RemotePath]:
    """A staging prefix below ``root`` to write into: committed when the block ends
    (:func:`commit_remote`), removed when it fails."""
    staging = root / f"{_STAGING}{secrets.token_hex(6)}"
    try:
        yield staging
        commit_remote(staging, root, overwrite, marker)
    finally:
        _drop(staging)


def _drop(staging: RemotePath) -> None:
    """Remove the staging prefix; when the store cannot be reached (often the reason the
    block failed) it is left, with a warning: readers skip names starting with ``_`` and the
    marker does not list it."""
    try:
        storage.remove(staging)
    except Exception as exc:  # any client's error: the block's own error must show, not this
        log.warning("could not remove the staging prefix %s: %s", staging, type(exc).__name__)


def commit_remote(staging: RemotePath, root: RemotePath, overwrite: bool, marker: str) -> None:
    """Copy the staged files into ``root``, ``marker`` last; then drop the earlier run's
    files the new marker does not list. ``root`` is checked again first (objects may have
    appeared while the new predictions were written)."""
    present = _present(root)
    _check_present(root, present, overwrite, marker)
    fs, _ = storage.fresh_filesystem(str(root))
    new = storage.files_below(staging)
    for rel in [f for f in new if f != marker] + [marker]:
        fs.copy(_inner(staging / rel), _inner(root / rel))
    for rel in sorted(set(present) - set(new)):
        storage.remove(root / rel)


def _inner(url: RemotePath) -> str:
    return storage.filesystem(str(url))[1]


def write_remote_marker(folder: RemotePath, marker: str, payload: dict[str, Any]) -> None:
    """``folder/marker``: ``payload`` and every file of ``folder`` (write it last)."""
    files = [f for f in storage.files_below(folder) if f != marker and not f.startswith(_ATTEMPTS)]
    text = json.dumps({**payload, "files": files}, indent=2, default=str) + "\n"
    fs, inner = storage.filesystem(str(folder / marker))
    fs.pipe_file(inner, text.encode())


def write_remote_table(folder: RemotePath, table: Any) -> None:
    """One Parquet file, ``part-00000.parquet``, holding ``table`` (written by the driver)."""
    import pyarrow.parquet as pq

    fs, inner = storage.filesystem(str(folder / "part-00000.parquet"))
    with fs.open(inner, "wb") as out:
        pq.write_table(table, out)


def write_remote_parquet(df: Any, folder: RemotePath) -> None:
    """The rows of ``df`` as Parquet files in ``folder``, one per non-empty partition, each
    written by its task and uploaded; an empty ``df`` gives one file with its columns."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema)
    attempts = folder / _ATTEMPTS
    task = storage.with_credentials(_task_writer(str(attempts), schema), str(attempts))
    rows = df.mapInArrow(task, _RESULT_DDL).collect()
    fs, _ = storage.fresh_filesystem(str(folder))
    token = secrets.token_hex(6)
    kept = sorted(rows, key=lambda r: r["partition"])
    for r in kept:
        name = f"part-{r['partition']:05d}-{token}.parquet"
        fs.mv(_inner(attempts / r["file"]), _inner(folder / name))
    if not kept:
        write_remote_table(folder, schema.empty_table())
    storage.remove(attempts)  # a retried or speculative attempt's file


def _task_writer(attempts: str, schema: Any) -> Any:
    """The ``mapInArrow`` function: the partition's batches to one Parquet file of this
    attempt, uploaded below ``attempts``; yields ``(partition, attempt, file, rows)``."""

    def write(batches: Iterable[Any]) -> Iterator[Any]:
        import tempfile

        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None  # always set inside a task
        pid, attempt = ctx.partitionId(), ctx.taskAttemptId()
        name, count = f"p{pid:05d}-a{attempt}.parquet", 0
        with tempfile.TemporaryDirectory(prefix="gpuspark-predict-") as tmp:
            local = os.path.join(tmp, name)
            with pq.ParquetWriter(local, schema) as out:
                for batch in batches:
                    out.write_batch(batch.cast(schema) if batch.schema != schema else batch)
                    count += batch.num_rows
            if count:
                fs, inner = storage.filesystem(storage.join(attempts, name))
                fs.put_file(local, inner)
        if count:
            yield pa.RecordBatch.from_pylist(
                [{"partition": pid, "attempt": attempt, "file": name, "rows": count}],
                schema=pa.schema(
                    [
                        ("partition", pa.int32()),
                        ("attempt", pa.int64()),
                        ("file", pa.string()),
                        ("rows", pa.int64()),
                    ]
                ),
            )

    return write


def remote_parquet_files(folder: RemotePath) -> list[RemotePath]:
    """The Parquet part files of ``folder`` (names starting with ``.`` or ``_`` left out)."""
    return [
        folder / n
        for n in storage.names(folder)
        if n.endswith(".parquet") and not n.startswith((".", "_"))
    ]


def count_remote_rows(folder: RemotePath) -> int:
    """Rows of the Parquet part files in ``folder`` (from their footers)."""
    import pyarrow.parquet as pq

    total = 0
    for part in remote_parquet_files(folder):
        fs, inner = storage.filesystem(str(part))
        with fs.open(inner, "rb") as f:
            total += pq.ParquetFile(f).metadata.num_rows
    return total


def remote_reasons(folder: RemotePath) -> list[str]:
    """The ``reason`` column of the quarantine table ``folder``, every row."""
    import pyarrow.parquet as pq

    out: list[str] = []
    for part in remote_parquet_files(folder):
        fs, inner = storage.filesystem(str(part))
        with fs.open(inner, "rb") as f:
            table = pq.read_table(f, columns=["reason"])
        out.extend(str(r) for r in table.column("reason").to_pylist())
    return out
