"""Shard access: the open shards of one reader, and one record's payload from them.

Local shards are memory-mapped; remote ones are fetched into the node-local cache first
(:class:`~gpuspark.data.load.cache.ShardCache`) or read by range requests through fsspec.
Each open shard costs its index (16 bytes per record) and one file descriptor; a reader keeps
enough open for one shuffle window to be read without reopening any
(``shuffle_window / smallest shard + 2``, between ``MIN_OPEN_SHARDS`` and
``MAX_OPEN_SHARDS``), least recently used closed first. The page cache, not the process,
holds their bytes.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections import OrderedDict
from typing import Any

import numpy as np

from gpuspark.data import format as fmt
from gpuspark.data.load.cache import ShardCache

__all__ = ["MAX_OPEN_SHARDS", "MIN_OPEN_SHARDS", "OpenShards"]

MIN_OPEN_SHARDS = 8
MAX_OPEN_SHARDS = 256  # file descriptors

_Entry = tuple[Any, Any, np.ndarray]
"""An open shard: ``(file object, memoryview or None, index)``."""


def _join(root: str, rel: str) -> str:
    return f"{root.rstrip('/')}/{rel}" if "://" in root else os.path.join(root, rel)


class OpenShards:
    """Open shards of one reader: local files are memory-mapped; remote ones are fetched into
    the node cache first (``cache``) or read by range requests through fsspec."""

    def __init__(
        self, root: str, shards: list[fmt.ShardInfo], cache: ShardCache | None, window: int
    ) -> None:
        self.root = root
        self.shards = shards
        self.cache = cache
        smallest = min((s.records for s in shards if s.records), default=1)
        spanned = -(-window // smallest) + 2  # shards one shuffle window can touch
        self.capacity = max(MIN_OPEN_SHARDS, min(spanned, MAX_OPEN_SHARDS))
        self._open: OrderedDict[int, _Entry] = OrderedDict()
        self._fs: Any = None
        self._remote = "://" in root and not root.startswith("file://")
        if root.startswith("file://"):
            self.root = root[len("file://") :]

    def _filesystem(self) -> tuple[Any, str]:
        import fsspec

        fs, path = fsspec.core.url_to_fs(self.root)
        return fs, path

    def _open_shard(self, i: int) -> _Entry:
        info = self.shards[i]
        fileobj: Any
        if not self._remote:
            path = _join(self.root, info.path)
            index = fmt.read_index(_join(self.root, info.index))
            fileobj = open(path, "rb")  # noqa: SIM115 - closed in close()
        else:
            if self._fs is None:
                self._fs, self._base = self._filesystem()
            path = _join(self._base, info.path)
            index_path = _join(self._base, info.index)
            if self.cache is not None:
                with self.cache.open(self._fs, index_path, url=_join(self.root, info.index)) as f:
                    index = fmt.read_index(f)
                fileobj = self.cache.open(self._fs, path, url=_join(self.root, info.path))
            else:
                with self._fs.open(index_path, "rb") as f:
                    index = fmt.read_index(f)
                fileobj = self._fs.open(path, "rb")
        view = _map(fileobj)
        return fileobj, view, index

    def get(self, i: int) -> _Entry:
        """Shard ``i`` (position in ``shards``) as ``(file, memoryview or None, index)``,
        opening it and closing the least recently used one above ``capacity``."""
        entry = self._open.get(i)
        if entry is None:
            entry = self._open_shard(i)
            self._open[i] = entry
            while len(self._open) > self.capacity:
                _, old = self._open.popitem(last=False)
                _close(old)
        else:
            self._open.move_to_end(i)
        return entry

    def payload(self, shard: int, record: int, verify: bool) -> bytes | memoryview:
        """The payload of ``record`` in ``shard`` (a view into the mapped file when local);
        ``verify`` checks its CRC and raises ``CorruptRecordError`` naming the location."""
        fileobj, view, index = self.get(shard)
        offset, length = (int(x) for x in index[record])
        path = _join(self.root, self.shards[shard].path)
        if view is None:
            return fmt.read_record(fileobj, offset, length, verify=verify, path=path, record=record)
        return fmt.parse_framed(
            view[offset : offset + length], verify=verify, path=path, record=record, offset=offset
        )

    def close(self) -> None:
        """Close every open shard."""
        while self._open:
            _close(self._open.popitem()[1])


def _map(fileobj: Any) -> memoryview | None:
    """A read-only memoryview of a local file (``None`` for remote or empty files)."""
    try:
        fd = fileobj.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    if os.fstat(fd).st_size == 0:
        return None
    return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))


def _close(entry: _Entry) -> None:
    fileobj, view, _ = entry
    if view is not None:
        mm = view.obj
        with contextlib.suppress(BufferError):  # arrays still point into it: GC closes it
            view.release()
            mm.close()
    fileobj.close()
