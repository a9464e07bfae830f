"""The predictions folder: written beside the destination, renamed into place when complete.

The folder holds Spark's Parquet part files, the quarantine table in ``_quarantine/`` and
:data:`MARKER` (what the job wrote and from what); Spark, pyarrow and pandas skip names
starting with ``_`` or ``.``, so reading the folder reads the predictions only. An existing
destination is refused unless ``overwrite``, and even then only a folder that ``predict``
wrote (its marker lists every file) is replaced: a user's folder is never emptied. The old
folder is moved aside and removed only after the new one is in place, so a failed run leaves
the old predictions as they were. (The same rule as ``gpuspark datasets``' generated folders.)

A URL destination (``s3://bucket/preds``) holds the same files, staged below it and committed
without a rename (:mod:`gpuspark.infer.store_output`); the functions here take either.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark.errors import DatasetExistsError, GpusparkError
from gpuspark.infer import store_output as remote
from gpuspark.storage import Location, RemotePath

__all__ = [
    "MARKER",
    "QUARANTINE_DIR",
    "check_destination",
    "count_by_reason",
    "count_rows",
    "parquet_files",
    "staged_output",
    "write_marker",
    "write_parquet",
    "write_table",
]

MARKER = "_gpuspark-predict.json"
QUARANTINE_DIR = "_quarantine"


def check_destination(dst: str | os.PathLike[str], overwrite: bool, source: str | None) -> Location:
    """``dst`` as an absolute local path or a URL, refused now (before any Spark job) when it
    is a file, cannot be created (a URL: cannot be written), exists without ``overwrite``, is
    not a predictions folder, holds the current directory, or is (or holds, or lies in) the
    source."""
    text = os.fspath(dst)
    if _overlaps(source, text):
        raise GpusparkError(
            f"destination {text} overlaps the input {source}",
            remedy="write the predictions to another folder",
        )
    if storage.is_url(text):
        url = RemotePath(storage.location(text))
        remote.check_remote(url, overwrite, MARKER)
        return url
    root = Path(os.path.abspath(os.path.expanduser(storage.local_path(text))))
    problem = storage.directory_problem(root)
    if problem is not None:
        raise GpusparkError(f"destination {text} {problem.text}", remedy=problem.remedy)
    _check_replaceable(root, overwrite)
    return root


def _overlaps(source: str | None, dst: str) -> bool:
    """Whether the input ``source`` is, holds or lies in ``dst`` (paths or URLs)."""
    if source is None:
        return False
    return storage.is_within(source, dst) or storage.is_within(dst, source)


def _check_replaceable(root: Path, overwrite: bool) -> None:
    if not root.is_dir() or not any(root.iterdir()):
        return
    if not overwrite:
        raise DatasetExistsError(
            f"destination {root} already exists and is not empty",
            remedy="choose another destination, or pass --overwrite (overwrite=True) to "
            "replace earlier predictions",
        )
    if storage.holds_cwd(root):
        raise DatasetExistsError(
            f"{root} is the current directory or holds it; --overwrite does not replace it",
            remedy="choose a new destination, e.g. a subfolder",
        )
    problem = storage.foreign_files(root, MARKER, "gpuspark predict")
    if problem:
        raise DatasetExistsError(
            f"{root} {problem}; --overwrite replaces only a folder gpuspark predict wrote, "
            "and nothing was changed",
            remedy="choose a new or empty destination, or remove that folder yourself",
        )


@contextmanager
def staged_output(root: Location, overwrite: bool) -> Iterator[Location]:
    """A new folder beside ``root`` (a URL: a staging prefix below it) to write into: when
    the block ends it replaces ``root`` (with :data:`MARKER`: the caller's
    :func:`write_marker`, else one without a summary); when the block fails it is removed
    and ``root`` stays as it was."""
    if isinstance(root, RemotePath):
        with remote.staged_remote(root, overwrite, MARKER) as staging:
            yield staging
            if not storage.is_file(staging / MARKER):
                write_marker(staging, {})
        return
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = storage.new_dir_beside(root)
    try:
        yield tmp
        _commit(tmp, root, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_marker(folder: Location, summary: dict[str, Any]) -> None:
    """:data:`MARKER`: ``summary`` and every file of ``folder`` (written last)."""
    payload = {"command": "predict", **summary}
    if isinstance(folder, RemotePath):
        remote.write_remote_marker(folder, MARKER, payload)
    else:
        storage.write_file_list(folder, MARKER, payload)


def write_parquet(df: Any, folder: Location) -> None:
    """The rows of the Spark DataFrame ``df`` appended to ``folder`` as Parquet part files
    (Spark's writer; a URL: one file per task, :mod:`~gpuspark.infer.store_output`)."""
    if isinstance(folder, RemotePath):
        remote.write_remote_parquet(df, folder)
    else:
        df.write.mode("append").parquet(str(folder))


def write_table(folder: Location, table: Any) -> None:
    """The pyarrow ``table`` as the one part file of the new folder ``folder`` (written by
    the driver: the quarantine tables)."""
    if isinstance(folder, RemotePath):
        remote.write_remote_table(folder, table)
        return
    import pyarrow.parquet as pq

    folder.mkdir()
    pq.write_table(table, folder / "part-00000.parquet")


def _commit(tmp: Path, root: Path, overwrite: bool) -> None:
    """Move ``tmp`` into place; an old ``root`` is checked again (files may have appeared
    while the new one was written) and removed only after."""
    if not (tmp / MARKER).is_file():
        write_marker(tmp, {})
    _check_replaceable(root, overwrite)
    storage.swap_into_place(tmp, root)


def parquet_files(folder: Path) -> list[Path]:
    """The Parquet part files of ``folder`` (names starting with ``.`` or ``_`` left out)."""
    return sorted(p for p in folder.glob("*.parquet") if not p.name.startswith((".", "_")))


def count_rows(folder: Location) -> int:
    """Rows of the Parquet part files in ``folder`` (from their footers)."""
    import pyarrow.parquet as pq

    if isinstance(folder, RemotePath):
        return remote.count_remote_rows(folder)
    return sum(pq.ParquetFile(p).metadata.num_rows for p in parquet_files(folder))


def count_by_reason(folder: Location, key: Callable[[str], str] = str) -> dict[str, int]:
    """Rows of the quarantine table ``folder`` per ``key(reason)``, most first."""
    out: dict[str, int] = {}
    for reason in _reasons(folder):
        k = key(reason)
        out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _reasons(folder: Location) -> list[str]:
    import pyarrow.parquet as pq

    if isinstance(folder, RemotePath):
        return remote.remote_reasons(folder)
    found: list[str] = []
    for p in parquet_files(folder):
        found += [str(r) for r in pq.read_table(p, columns=["reason"]).column("reason").to_pylist()]
    return found
