"""Inspect a dataset (summary from its manifest) and verify it (every CRC, index entry,
size and hash)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from gpuspark import storage
from gpuspark.data.format.compression import decompress
from gpuspark.data.format.example import decode_example
from gpuspark.data.format.hashing import hash_matches
from gpuspark.data.format.index import read_index
from gpuspark.data.format.manifest import (
    MANIFEST_NAME,
    Manifest,
    ShardInfo,
    dataset_root,
    load_manifest,
)
from gpuspark.data.format.tfrecord import FOOTER_BYTES, HEADER_BYTES, iter_records
from gpuspark.errors import CorruptRecordError, GpusparkError

__all__ = ["Problem", "inspect_dataset", "verify_dataset"]


@dataclass
class Problem:
    """One problem found by :func:`verify_dataset`."""

    shard: str
    record: int | None
    offset: int | None
    message: str

    def __str__(self) -> str:
        where = self.shard
        if self.record is not None:
            where += f" record {self.record}"
        if self.offset is not None:
            where += f" (byte {self.offset})"
        return f"{where}: {self.message}"


def inspect_dataset(dataset_path_or_url: str | os.PathLike[str]) -> dict[str, Any]:
    """Summary of a dataset from its manifest: shards, records, bytes, schema, balance."""
    root = dataset_root(dataset_path_or_url)
    m = load_manifest(root)
    counts = m.shard_records() or [0]
    return {
        "path": root,
        "version": m.version,
        "shards": len(m.shards),
        "records": m.total_records,
        "bytes": sum(s.bytes for s in m.shards),
        "compression": m.compression,
        "min_records_per_shard": min(counts),
        "max_records_per_shard": max(counts),
        "splits": {k: len(v) for k, v in m.splits.items()},
        "schema": m.schema,
        "provenance": m.provenance,
        "shard_list": [asdict(s) for s in m.shards],
    }


def verify_dataset(dataset_path_or_url: str | os.PathLike[str]) -> list[Problem]:
    """Re-check every record CRC, index entry, file size and hash; return the problems found.

    An empty list means the dataset is intact. A missing manifest raises
    :class:`NotADatasetError`.
    """
    root = dataset_root(dataset_path_or_url)
    manifest = load_manifest(root)
    problems: list[Problem] = []
    total = 0
    for shard in manifest.shards:
        problems.extend(_verify_shard(root, shard, manifest))
        total += shard.records
    if total != manifest.total_records:
        problems.append(
            Problem(MANIFEST_NAME, None, None, f"total_records {manifest.total_records} != {total}")
        )
    return problems


def _verify_shard(root: str, shard: ShardInfo, manifest: Manifest) -> list[Problem]:
    path = storage.join(root, shard.path)
    if not storage.exists(path):
        return [Problem(shard.path, None, None, "shard file is missing")]
    problems: list[Problem] = []
    ok, actual = hash_matches(path, shard.hash)
    if not ok:
        problems.append(Problem(shard.path, None, None, f"hash {actual} != manifest {shard.hash}"))
    entries, scan_problems = _scan(path, shard.path, manifest)
    problems.extend(scan_problems)
    size = storage.file_size(path)
    if size != shard.bytes:
        problems.append(Problem(shard.path, None, None, f"size {size} != manifest {shard.bytes}"))
    if not scan_problems and len(entries) != shard.records:
        problems.append(
            Problem(shard.path, None, None, f"{len(entries)} records != manifest {shard.records}")
        )
    problems.extend(_verify_index(root, shard, entries, complete=not scan_problems))
    return problems


def _scan(path: str, rel: str, manifest: Manifest) -> tuple[list[tuple[int, int]], list[Problem]]:
    """Read every record; return (offset, length) entries and the first problem, if any."""
    entries: list[tuple[int, int]] = []
    offset = 0
    try:
        with storage.open_file(path) as f:
            for i, payload in enumerate(iter_records(f)):
                n = HEADER_BYTES + len(payload) + FOOTER_BYTES
                entries.append((offset, n))
                try:
                    decode_example(decompress(payload, manifest.compression))
                except Exception as exc:  # bad payload behind a good CRC
                    return entries, [Problem(rel, i, offset, f"payload does not decode: {exc}")]
                offset += n
    except CorruptRecordError as exc:
        return entries, [Problem(rel, exc.record, exc.offset, exc.what)]
    return entries, []


def _verify_index(
    root: str, shard: ShardInfo, entries: list[tuple[int, int]], complete: bool
) -> list[Problem]:
    index_path = storage.join(root, shard.index)
    if not storage.exists(index_path):
        return [Problem(shard.index, None, None, "index file is missing")]
    try:
        index = read_index(index_path)
    except GpusparkError as exc:
        return [Problem(shard.index, None, None, str(exc))]
    problems = []
    for i, (off, n) in enumerate(index.tolist()):
        if i < len(entries) and (off, n) != entries[i]:
            problems.append(
                Problem(shard.index, i, off, f"index entry ({off}, {n}) != record {entries[i]}")
            )
            break
    if complete and len(index) != len(entries):
        problems.append(
            Problem(shard.index, None, None, f"{len(index)} entries != {len(entries)} records")
        )
    return problems
