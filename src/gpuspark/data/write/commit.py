"""The commit protocol shared by every writer: stage, move into place, manifest last.

The root may be a local path or a URL (``s3://bucket/ds``). An object store has no rename, so
there each task attempt still writes under its own staging prefix, the driver *copies* the
winning attempts' objects to their final names (a server-side copy), and the manifest is one
upload, last; a reader trusts only the manifest. Objects of abandoned attempts go with the
staging prefix after the commit, and anything an interrupted write left (staging prefixes,
shards no manifest names) is removed by the next write, exactly as on a local disk.

A write stages its shards in ``<dataset>/_gpuspark_staging-<wid>/`` (invisible to readers,
which only follow ``manifest.json``), moves finished shards - and the extra files of the
dataset, such as prep's quarantine table, listed in ``manifest.extra["files"]`` - to their
final names, commits the manifest last with an atomic rename, then deletes the staging
directory and, on overwrite, the previous dataset's files. A failure at any point leaves
either the old dataset or no dataset, never a half-written one. Leftovers of an interrupted
write (staging directories, temporary files, shards and extra files no manifest names) are
removed by the next write to the directory.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from gpuspark import __version__, storage
from gpuspark.data import format as fmt
from gpuspark.data.format import MANIFEST_NAME, DatasetExistsError, Manifest, ShardInfo
from gpuspark.errors import GpusparkError, NotADatasetError

__all__ = [
    "STAGING_PREFIX",
    "abort_write",
    "build_manifest",
    "check_target",
    "commit",
    "extra_file_name",
    "make_provenance",
    "new_write_id",
    "prepare_target",
    "shard_name",
    "staged_write",
]

STAGING_PREFIX = "_gpuspark_staging-"
_SHARD_RE = re.compile(r"^[\w.=-]+-\d{5}-[0-9a-f]{8}\.tfrecord(\.idx)?$")
_EXTRA_RE = re.compile(r"^[\w=-]+-[0-9a-f]{8}\.[\w.]+$")  # extra_file_name()


# --------------------------------------------------------------------------- names


def new_write_id() -> str:
    """A fresh per-write id (8 hex digits), part of every shard name of one write."""
    return uuid.uuid4().hex[:8]


def shard_name(prefix: str, index: int, wid: str) -> str:
    """The file name of shard ``index`` of split ``prefix`` (``part`` without splits)."""
    return f"{prefix}-{index:05d}-{wid}.tfrecord"


# --------------------------------------------------------------------------- target directory


def _is_leftover(name: str, keep: set[str]) -> bool:
    """A file or directory an interrupted gpuspark write may have left behind."""
    if name.startswith(STAGING_PREFIX) or name.startswith(".tmp-"):
        return True
    return bool(_SHARD_RE.match(name) or _EXTRA_RE.match(name)) and name not in keep


def _replaceable_manifest(root: str) -> Manifest | None:
    """The manifest an overwrite replaces, or ``None`` when it does not parse."""

    try:
        return fmt.load_manifest(root)
    except NotADatasetError:
        return None


def check_target(root: str, overwrite: bool) -> Manifest | None:
    """Check that a write may go to ``root`` (a local path or a URL), changing nothing;
    return the manifest it would replace. Callers with a long job ahead call it first, to
    refuse before any work."""
    where = storage.as_path(root)
    if storage.is_file(where):
        raise DatasetExistsError(f"{root} exists and is a file, not a dataset directory")
    names = storage.names(where)
    if not names:
        return None
    old = None
    if MANIFEST_NAME in names:
        if not overwrite:
            raise DatasetExistsError(
                f"{root} already holds a gpuspark dataset",
                remedy="pass --overwrite (overwrite=True) to replace it, or choose another path",
            )
        old = _replaceable_manifest(root)
        if old is None:  # a broken manifest: the directory was a dataset; overwrite replaces it
            return None
    keep = _manifest_files(old)
    # Files next to a committed dataset belong to it and are left alone on overwrite; an
    # uncommitted directory must hold only gpuspark leftovers.
    others = (
        []
        if old is not None
        else [
            n for n in names if n != MANIFEST_NAME and n not in keep and not _is_leftover(n, keep)
        ]
    )
    if others:
        raise DatasetExistsError(
            f"{root} is not empty and is not a gpuspark dataset (found {sorted(others)[:3]})",
            remedy="write to a new or empty directory",
        )
    return old


def prepare_target(root: str, overwrite: bool) -> Manifest | None:
    """Check the target directory (:func:`check_target`), create it or remove the leftovers
    of interrupted writes; return the current manifest (if overwriting one)."""
    old = check_target(root, overwrite)
    storage.makedirs(storage.as_path(root))
    _clean_leftovers(root, _manifest_files(old))
    return old


def _manifest_files(manifest: Manifest | None) -> set[str]:
    """The files a manifest owns: its shards, their indexes and its extra files."""
    if manifest is None:
        return set()
    return {p for s in manifest.shards for p in (s.path, s.index)} | set(_extra_files(manifest))


def _extra_files(manifest: Manifest) -> list[str]:
    files = [f for f in (manifest.extra.get("files") or {}).values() if isinstance(f, str)]
    # prep datasets written before extra files were listed named their quarantine table here
    legacy = (manifest.extra.get("quarantine") or {}).get("file")
    return [*files, legacy] if isinstance(legacy, str) else files


def extra_file_name(name: str, wid: str) -> str:
    """The name under which extra file ``name`` of write ``wid`` is committed:
    ``quarantine.parquet`` -> ``quarantine-<wid>.parquet``. New for every write, so that the
    old dataset keeps its own until the new manifest replaces it."""
    stem, dot, ext = name.partition(".")
    return f"{stem}-{wid}{dot}{ext}"


def _clean_leftovers(root: str, keep: set[str]) -> None:
    """Remove staging dirs, temp files and unreferenced shards of interrupted writes."""
    for name in storage.names(storage.as_path(root)):
        if _is_leftover(name, keep):
            _remove(storage.join(root, name))


def _remove(path: str) -> None:
    """Delete a file or directory tree; retry a tree a few times (late writers may race)."""
    if storage.is_url(path):
        storage.remove(storage.as_path(path))
        return
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


@contextlib.contextmanager
def staged_write(
    path: str | os.PathLike[str], overwrite: bool
) -> Iterator[tuple[str, str, str, Manifest | None]]:
    """``(root, staging dir, write id, manifest being replaced)`` of a write that ends in one
    :func:`commit`; on any error the staging directory (and a root this write created) is
    removed."""
    text = os.fspath(path)
    root = text if storage.is_url(text) else os.path.abspath(storage.local_path(text))
    created_root = not storage.exists(root)
    old = prepare_target(root, overwrite)
    wid = new_write_id()
    staging = storage.join(root, STAGING_PREFIX + wid)
    storage.makedirs(storage.as_path(staging))
    try:
        yield root, staging, wid, old
    except BaseException:
        abort_write(root, staging, created_root)
        raise


# --------------------------------------------------------------------------- manifest


def make_provenance(source: str, given: Mapping[str, Any] | None, **more: Any) -> dict[str, Any]:
    """The manifest's provenance: source, gpuspark version, time, ``more``, then ``given``."""

    prov = {
        "source": source,
        "gpuspark_version": __version__,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **more,
    }
    prov.update(given or {})
    return prov


def build_manifest(
    shards: Iterable[tuple[ShardInfo, str | None, dict[str, Any]]],
    compression: str | None,
    provenance: dict[str, Any],
    extra: dict[str, Any],
) -> Manifest:
    """The manifest of ``(shard, split, shard schema)`` entries: shards sorted by name,
    schemas of non-empty shards merged, splits listed."""
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


# --------------------------------------------------------------------------- commit / abort


def commit(
    root: str,
    staged: list[tuple[str, ShardInfo]],
    manifest: Manifest,
    old: Manifest | None,
    staging: str,
    files: Mapping[str, bytes] | None = None,
) -> Manifest:
    """Move staged shards and ``files`` (name -> contents, e.g. a quarantine table) into place,
    commit the manifest, then drop the old dataset's files and the staging directory.

    Each of ``files`` is written into the staging directory and renamed into ``root``
    before the manifest, under a name new to this write (:func:`extra_file_name`);
    ``manifest.extra["files"]`` maps each given name to it. On an error the files already
    moved are removed again: the old dataset stays as it was, with its own extra files (a
    killed process leaves them to the next write, which removes them as leftovers).
    """
    wid = staging.rstrip("/").rsplit("/", 1)[-1].removeprefix(STAGING_PREFIX)
    names = {name: extra_file_name(_plain_name(name), wid) for name in files or {}}
    if names:
        manifest.extra["files"] = dict(sorted(names.items()))
    moved: list[str] = []
    try:
        for name, data in (files or {}).items():
            moved.append(names[name])
            _put(root, staging, names[name], data)
        for src, info in staged:
            moved.append(info.index)
            _move(src + ".idx", storage.join(root, info.index))
            moved.append(info.path)
            _move(src, storage.join(root, info.path))
        fmt.write_manifest(root, manifest)
    except BaseException:
        for name in moved:
            _remove(storage.join(root, name))
        raise
    if not storage.is_url(root):
        _fsync_dir(root)
    new_files = _manifest_files(manifest)
    for name in _manifest_files(old) - new_files:
        _remove(storage.join(root, name))
    _remove(staging)
    return manifest


def _put(root: str, staging: str, name: str, data: bytes) -> None:
    """Write ``root/name`` whole: locally through the staging folder and a rename, on an
    object store in one upload (visible only once complete)."""
    if storage.is_url(root):
        storage.atomic_write_bytes(storage.join(root, name), data)
        return
    tmp = os.path.join(staging, name)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(root, name))


def _move(src: str, dst: str) -> None:
    """A staged file to its final name: a rename locally; on an object store a server-side
    copy (the staged object goes with its staging prefix after the commit)."""
    if storage.is_url(src):
        fs, inner = storage.filesystem(src)
        fs.copy(inner, storage.filesystem(dst)[1])
        return
    os.replace(src, dst)


def _plain_name(name: str) -> str:
    if not re.fullmatch(r"[\w=-]+\.[\w.]+", name):
        raise GpusparkError(
            f"extra dataset file name {name!r} must look like 'name.ext' (letters, digits, "
            "'_', '-', '=')"
        )
    return name


def _fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def abort_write(root: str, staging: str, created_root: bool) -> None:
    """Drop a write's staging directory, and ``root`` when this write created it (if empty)."""
    _remove(staging)
    if created_root and not storage.is_url(root):
        with contextlib.suppress(OSError):
            os.rmdir(root)  # only if still empty
