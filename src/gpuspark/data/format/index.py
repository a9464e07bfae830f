"""The shard index: DALI's ``tfrecord2idx`` text layout, one "offset length" line per record.

``length`` is the whole framed record (header, payload and CRC), so a reader can fetch one
record with a single ranged read.
"""

from __future__ import annotations

import os
from typing import IO

import numpy as np

from gpuspark import storage
from gpuspark.errors import GpusparkError

__all__ = ["read_index", "write_index"]


def read_index(path_or_fileobj: str | os.PathLike[str] | IO[bytes]) -> np.ndarray:
    """Read a DALI ``tfrecord2idx`` index: an ``(N, 2)`` int64 array of (offset, length)."""
    if isinstance(path_or_fileobj, (str, os.PathLike)):
        with storage.open_file(path_or_fileobj) as f:
            text = f.read()
    else:
        text = path_or_fileobj.read()
    try:
        values = np.array(text.split(), dtype=np.int64)
    except ValueError as exc:
        name = (
            path_or_fileobj
            if isinstance(path_or_fileobj, str)
            else storage.display_name(path_or_fileobj)
        )
        raise GpusparkError(
            f"index {name}: not an 'offset length' text index ({exc})",
            remedy="rebuild it with `gpuspark shards verify` or rewrite the dataset",
        ) from None
    if values.size % 2:
        raise GpusparkError(f"index {path_or_fileobj}: odd number of fields")
    return values.reshape(-1, 2)


def write_index(path: str | os.PathLike[str], entries: np.ndarray | list[tuple[int, int]]) -> None:
    """Write ``(offset, length)`` pairs as a DALI index file, atomically."""
    text = "".join(f"{int(o)} {int(n)}\n" for o, n in entries)
    storage.atomic_write_bytes(path, text.encode())
