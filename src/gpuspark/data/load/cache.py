"""Node-local cache of remote shards (the role Alluxio plays in front of object storage).

Each remote file is copied to ``cache_dir`` once, atomically (temporary name in the same
directory, then ``os.replace``), under an exclusive ``fcntl.flock`` on a per-file lock, so
any number of processes on a node asking for the same shard at once cause one fetch: the
first takes the lock and downloads, the others wait on the lock and then find the file.

Least-recently-used files are evicted when the cache holds more than ``limit_bytes``; use is
recorded in the file's mtime (``os.utime`` on every hit). A file being read is safe to
evict: callers get an open file object, and POSIX keeps unlinked open files readable.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from gpuspark.errors import CacheError

__all__ = ["CacheError", "CacheStats", "ShardCache"]

_LOCK_SUFFIX = ".lock"
_TMP_MARK = ".tmp-"
_EVICT_LOCK = ".evict.lock"


@dataclass
class CacheStats:
    """Counters of one process: ``hits``/``misses`` are file requests, ``bytes_fetched`` the
    bytes copied from remote storage, ``evictions`` the files removed to respect the limit."""

    hits: int = 0
    misses: int = 0
    bytes_fetched: int = 0
    evictions: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict (for ``loader.stats()`` and JSON)."""
        return {
            "cache_hits": self.hits,
            "cache_misses": self.misses,
            "cache_bytes_fetched": self.bytes_fetched,
            "cache_evictions": self.evictions,
        }


class ShardCache:
    """A directory of whole-file copies of remote files, shared by all processes of a node."""

    def __init__(self, cache_dir: str | os.PathLike[str], limit_bytes: int | None = None) -> None:
        if limit_bytes is not None and limit_bytes <= 0:
            raise ValueError(f"cache_limit_bytes must be > 0 or None, got: {limit_bytes}")
        self.cache_dir = os.fspath(cache_dir)
        self.limit_bytes = limit_bytes
        self.stats = CacheStats()
        try:
            os.makedirs(self.cache_dir, exist_ok=True)
        except OSError as exc:
            raise CacheError(
                f"cache_dir {self.cache_dir!r} cannot be created: {exc.strerror}",
                remedy="pass a writable node-local directory as cache_dir",
            ) from exc

    def local_name(self, url: str) -> str:
        """The cache file name of ``url``: a hash of the full URL plus its base name."""
        digest = hashlib.sha1(url.encode()).hexdigest()[:16]
        return f"{digest}-{os.path.basename(url.rstrip('/')) or 'file'}"

    def open(self, fs: Any, remote_path: str, url: str | None = None) -> IO[bytes]:
        """Open the local copy of ``remote_path`` on fsspec filesystem ``fs`` for reading,
        fetching it first if needed. ``url`` (default ``remote_path``) names the cache entry."""
        local = os.path.join(self.cache_dir, self.local_name(url or remote_path))
        handle = _open_existing(local)
        if handle is not None:
            self._hit(local)
            return handle
        with _flock(local + _LOCK_SUFFIX):
            handle = _open_existing(local)  # another process fetched it while we waited
            if handle is not None:
                self._hit(local)
                return handle
            size = self._fetch(fs, remote_path, local)
            handle = open(local, "rb")  # noqa: SIM115 - returned to the caller
        self.stats.misses += 1
        self.stats.bytes_fetched += size
        if self.limit_bytes is not None:
            self.evict(keep=local)
        return handle

    def _hit(self, local: str) -> None:
        self.stats.hits += 1
        with contextlib.suppress(FileNotFoundError):  # evicted meanwhile: still open
            os.utime(local)

    def _fetch(self, fs: Any, remote_path: str, local: str) -> int:
        tmp = f"{local}{_TMP_MARK}{os.getpid()}"
        try:
            fs.get_file(remote_path, tmp)  # one streamed request on HTTP / object stores
            size = os.path.getsize(tmp)
            os.replace(tmp, local)
        except BaseException as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise CacheError(
                    f"cannot fetch {remote_path!r} into cache {self.cache_dir!r}: {exc}",
                    remedy="check the URL, credentials and free space of cache_dir",
                ) from exc
            raise
        return size

    def entries(self) -> list[tuple[str, int, float]]:
        """Committed cache files as ``(path, bytes, last_used)``, oldest use first."""
        rows = []
        for name in os.listdir(self.cache_dir):
            if name.startswith(".") or name.endswith(_LOCK_SUFFIX) or _TMP_MARK in name:
                continue
            path = os.path.join(self.cache_dir, name)
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(path)
                rows.append((path, st.st_size, st.st_mtime))
        rows.sort(key=lambda row: row[2])
        return rows

    def size_bytes(self) -> int:
        """Bytes held by committed cache files."""
        return sum(size for _, size, _ in self.entries())

    def evict(self, keep: str | None = None) -> int:
        """Remove least-recently-used files until the cache is within ``limit_bytes``;
        ``keep`` (the file just fetched) is never removed. Returns the files removed."""
        if self.limit_bytes is None:
            return 0
        removed = 0
        with _flock(os.path.join(self.cache_dir, _EVICT_LOCK)):
            rows = self.entries()
            total = sum(size for _, size, _ in rows)
            for path, size, _ in rows:
                if total <= self.limit_bytes:
                    break
                if path == keep or not _try_remove_unlocked(path):
                    continue
                total -= size
                removed += 1
        self.stats.evictions += removed
        return removed


def _open_existing(path: str) -> IO[bytes] | None:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def _flock(lock_path: str) -> Iterator[None]:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _try_remove_unlocked(path: str) -> bool:
    """Remove ``path`` unless a fetch of it holds its lock right now."""
    fd = os.open(path + _LOCK_SUFFIX, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)
