"""Content hashes of shard files, as recorded in the manifest and checked by verify."""

from __future__ import annotations

import os

from gpuspark import storage

__all__ = ["file_hash", "hash_matches"]


def file_hash(path: str | os.PathLike[str]) -> str:
    """Return ``"xxh3_128:<hex>"`` of a file's bytes (``"sha256:<hex>"`` is also accepted)."""
    import xxhash

    h = xxhash.xxh3_128()
    with storage.open_file(path) as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return f"xxh3_128:{h.hexdigest()}"


def hash_matches(path: str, expected: str) -> tuple[bool, str]:
    """Whether a file's hash equals ``expected`` (``xxh3_128:`` or ``sha256:``), and the
    hash actually found, in the same algorithm."""
    algo = expected.split(":", 1)[0]
    if algo == "sha256":
        import hashlib

        h = hashlib.sha256()
        with storage.open_file(path) as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        actual = f"sha256:{h.hexdigest()}"
    else:
        actual = file_hash(path)
    return actual == expected, actual
