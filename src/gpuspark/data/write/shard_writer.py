"""One shard file as it is written (framing, index, size, hash, schema) and :class:`ShardWriter`,
the plain-Python writer that rolls shards by size and commits on ``close()``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from gpuspark.data import format as fmt
from gpuspark.data.checks import check_split_name
from gpuspark.data.format import Manifest, ShardInfo
from gpuspark.data.write.commit import (
    STAGING_PREFIX,
    abort_write,
    build_manifest,
    commit,
    make_provenance,
    new_write_id,
    prepare_target,
    shard_name,
)
from gpuspark.errors import GpusparkError

__all__ = ["DEFAULT_TARGET_SHARD_BYTES", "ShardFile", "ShardWriter"]

DEFAULT_TARGET_SHARD_BYTES = 128 * 1024 * 1024


class ShardFile:
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
        self._old = prepare_target(self.root, overwrite)
        self.target_shard_bytes = target_shard_bytes
        self.compression = compression
        self._wid = new_write_id()
        self._staging = os.path.join(self.root, STAGING_PREFIX + self._wid)
        os.mkdir(self._staging)
        self._open: dict[str | None, ShardFile] = {}
        self._next_index: dict[str | None, int] = {}
        self._done: list[tuple[str, ShardInfo, str | None, dict[str, Any]]] = []
        self._provenance = make_provenance("python", provenance, writer="ShardWriter")
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

    def _open_shard(self, split: str | None) -> ShardFile:
        prefix = "part" if split is None else check_split_name(split)
        index = self._next_index.get(split, 0)
        self._next_index[split] = index + 1
        name = shard_name(prefix, index, self._wid)
        shard = ShardFile(os.path.join(self._staging, name), self.compression)
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
            manifest = build_manifest(
                [(info, split, schema) for _, info, split, schema in self._done],
                self.compression,
                self._provenance,
                self._extra,
            )
            staged = [(src, info) for src, info, _, _ in self._done]
            self.manifest = commit(self.root, staged, manifest, self._old, self._staging)
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
        abort_write(self.root, self._staging, self._created_root)
