"""Folders and files at a *location*: a local path or a URL (``s3://``, ``gs://``, ...), with
one set of calls for both.

Local paths go to the standard library and :class:`pathlib.Path`; URLs go to fsspec. An object
store has no folders: a "folder" is a key prefix, it exists while an object lies below it, and
making one is a no-op. Listings of a URL are always read afresh (fsspec caches them per
process, and ranks in other processes write the same prefix). :func:`as_path` gives a value
with ``.name``, ``.parent`` and ``/`` for either kind, so code that names files does not
branch on the kind; every read and write still goes through this package.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gpuspark.storage.files import (
    filesystem,
    folder_files,
    fresh_filesystem,
    is_url,
    local_path,
    unlisted_files,
)

__all__ = [
    "Location",
    "RemotePath",
    "as_path",
    "files_below",
    "foreign_files_at",
    "is_dir",
    "is_file",
    "local_copy",
    "makedirs",
    "modified",
    "names",
    "read_bytes",
    "remove",
    "text_of",
    "upload_tree",
]


class RemotePath:
    """The URL of an object or of a prefix, named like a :class:`~pathlib.PurePath`
    (``.name``, ``.parent``, ``.suffix``, ``/``); ``str()`` gives the URL.

    It does no I/O: pass it to this module's functions."""

    __slots__ = ("url",)

    def __init__(self, url: str) -> None:
        if not is_url(url):
            raise ValueError(f"not a URL: {url!r}")
        head, _, rest = url.partition("://")
        self.url = f"{head}://{rest.rstrip('/')}" if rest.strip("/") else url

    @property
    def name(self) -> str:
        """The last part of the URL's path (``""`` for a bucket's root)."""
        rest = self.url.partition("://")[2]
        return posixpath.basename(rest) if "/" in rest else ""

    @property
    def suffix(self) -> str:
        """The name's extension, dot included (``".pt"``), or ``""``."""
        return posixpath.splitext(self.name)[1]

    @property
    def parent(self) -> RemotePath:
        """The URL one level up (a bucket's root is its own parent)."""
        head, _, rest = self.url.partition("://")
        return RemotePath(f"{head}://{posixpath.dirname(rest)}") if "/" in rest else self

    def __truediv__(self, name: str) -> RemotePath:
        return RemotePath(f"{self.url}/{name.strip('/')}")

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"RemotePath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)


Location = Path | RemotePath
"""A local path or a URL, as :func:`as_path` returns it."""


def as_path(location: str | os.PathLike[str] | RemotePath) -> Location:
    """A :class:`~pathlib.Path` for a local path or ``file:`` URL, a :class:`RemotePath` for
    a URL."""
    if isinstance(location, RemotePath | Path):
        return location
    text = os.fspath(location)
    return RemotePath(text) if is_url(text) else Path(local_path(text))


def text_of(location: str | os.PathLike[str] | RemotePath) -> str:
    """The path or URL of ``location`` as a string."""
    return str(location) if isinstance(location, RemotePath) else os.fspath(location)


def is_dir(location: Location) -> bool:
    """Whether a local folder exists, or a URL names a folder (a prefix with objects below)."""
    if isinstance(location, Path):
        return location.is_dir()
    fs, inner = fresh_filesystem(str(location))
    return bool(fs.isdir(inner))


def is_file(location: Location) -> bool:
    """Whether a local file, or an object at a URL, exists."""
    if isinstance(location, Path):
        return location.is_file()
    fs, inner = fresh_filesystem(str(location))
    return bool(fs.isfile(inner))


def names(location: Location) -> list[str]:
    """The names of the entries of a folder (files and subfolders), sorted; ``[]`` when it
    does not exist."""
    if isinstance(location, Path):
        return sorted(os.listdir(location)) if location.is_dir() else []
    fs, inner = fresh_filesystem(str(location))
    try:
        found = fs.ls(inner, detail=False)
    except FileNotFoundError:
        return []
    top = inner.rstrip("/")
    return sorted({posixpath.basename(n.rstrip("/")) for n in found if n.rstrip("/") != top})


def modified(location: Location) -> float:
    """The modification time of a file or object (seconds since the epoch; 0.0 when it
    cannot be read). Object stores keep whole seconds."""
    try:
        if isinstance(location, Path):
            return location.stat().st_mtime
        fs, inner = filesystem(str(location))
        stamp = fs.modified(inner)
        return float(stamp.timestamp())
    except (OSError, NotImplementedError, ValueError):
        return 0.0


def read_bytes(location: Location) -> bytes:
    """The whole content of a file or object."""
    if isinstance(location, Path):
        return location.read_bytes()
    fs, inner = filesystem(str(location))
    return bytes(fs.cat_file(inner))


def makedirs(location: Location) -> None:
    """Create a local folder and its parents; nothing for a URL (prefixes need no creating)."""
    if isinstance(location, Path):
        location.mkdir(parents=True, exist_ok=True)


def remove(location: Location) -> None:
    """Remove a file, or a folder with everything below it; nothing when absent. A local
    link is removed, never followed."""
    if isinstance(location, Path):
        if location.is_dir() and not location.is_symlink():
            shutil.rmtree(location, ignore_errors=True)
        else:
            location.unlink(missing_ok=True)
        return
    fs, inner = fresh_filesystem(str(location))
    try:
        fs.rm(inner, recursive=True)
    except FileNotFoundError:
        pass


@contextlib.contextmanager
def local_copy(location: str | os.PathLike[str] | RemotePath) -> Iterator[Path]:
    """A local path holding ``location``'s file or folder for the ``with`` block: the path
    itself when local, else a copy downloaded into a temporary folder (removed after), for
    libraries that read only local files (MLflow's artifact upload)."""
    where = as_path(location)
    if isinstance(where, Path):
        yield where
        return
    with tempfile.TemporaryDirectory(prefix="gpuspark-copy-") as tmp:
        fs, inner = filesystem(str(where))
        target = Path(tmp) / (where.name or "root")
        fs.get(inner, str(target), recursive=is_dir(where))
        yield target


def files_below(location: Location) -> list[str]:
    """Every file below a folder (a URL: every object below the prefix), as relative POSIX
    paths, sorted; ``[]`` when it does not exist."""
    if isinstance(location, Path):
        return sorted(folder_files(location)) if location.is_dir() else []
    fs, inner = fresh_filesystem(str(location))
    top = inner.rstrip("/")
    try:
        found = fs.find(top)
    except FileNotFoundError:
        return []
    return sorted(posixpath.relpath(f, top) for f in found if f.rstrip("/") != top)


def foreign_files_at(location: Location, marker: str, writer: str) -> str | None:
    """Why the folder or prefix ``location`` is not wholly ``writer``'s output (no readable
    ``marker``, or files it does not list), or ``None`` when it is."""
    try:
        text: bytes | None = read_bytes(location / marker)
    except OSError:
        text = None
    return unlisted_files(files_below(location), text, marker, writer)


def upload_tree(folder: Path, url: RemotePath, last: str | None = None) -> list[str]:
    """Copy every file of the local ``folder`` to the same relative names below ``url``,
    ``last`` (a marker) after all others; the relative names, sorted."""
    fs, _ = filesystem(str(url))
    names = sorted(folder_files(folder))
    for batch in ([n for n in names if n != last], [n for n in names if n == last]):
        if batch:  # one call: the async clients (s3fs, gcsfs, adlfs) upload concurrently
            fs.put([str(folder / n) for n in batch], [filesystem(str(url / n))[1] for n in batch])
    return names
