"""The manifest: ``manifest.json``, committed last; its presence makes a directory a dataset."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuspark import storage
from gpuspark.errors import NotADatasetError

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "Manifest",
    "ShardInfo",
    "check_manifest_fields",
    "dataset_root",
    "load_manifest",
    "write_manifest",
]

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1


@dataclass
class ShardInfo:
    """One shard of a dataset: paths relative to the dataset directory."""

    path: str
    records: int
    bytes: int
    hash: str
    index: str


@dataclass
class Manifest:
    """The ``manifest.json`` of a dataset; its presence is what makes a directory a dataset.

    ``schema`` maps each key to ``{"kind": "int"|"float"|"bytes"|"str"|"list"|"ndarray"|
    "encoded"|"mixed", "count": records having it, ...}`` (``dtype``/``shape`` for arrays,
    ``None`` in ``shape`` where it varies; ``item`` for lists). ``splits`` maps a split name
    to its shard paths (``{}`` when none). ``extra`` is free-form (label map, quarantine
    counts, prep parameters).
    """

    version: int = FORMAT_VERSION
    schema: dict[str, Any] = field(default_factory=dict)
    shards: list[ShardInfo] = field(default_factory=list)
    total_records: int = 0
    compression: str | None = None
    splits: dict[str, list[str]] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Serialize to indented JSON."""
        return json.dumps(asdict(self), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        """Parse :meth:`to_json` output (unknown top-level fields are kept in ``extra``)."""
        raw = json.loads(text)
        version = raw.get("version") if isinstance(raw, dict) else None
        if isinstance(version, int) and version > FORMAT_VERSION:
            return cls(version=version)  # a newer format: the caller says so, fields may differ
        check_manifest_fields(raw)
        known = {f for f in cls.__dataclass_fields__ if f != "shards"}
        kwargs = {k: v for k, v in raw.items() if k in known}
        extra = dict(kwargs.pop("extra", {}) or {})
        extra.update({k: v for k, v in raw.items() if k not in known and k != "shards"})
        shards = [ShardInfo(**s) for s in raw.get("shards", [])]
        return cls(shards=shards, extra=extra, **kwargs)

    def shard_records(self) -> list[int]:
        """Records per shard, in manifest order."""
        return [s.records for s in self.shards]


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "version": int,
    "schema": dict,
    "shards": list,
    "total_records": int,
}
_SHARD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "path": str,
    "records": int,
    "bytes": int,
    "hash": str,
    "index": str,
}


def _check_fields(obj: Any, fields: dict[str, Any], where: str) -> None:
    if not isinstance(obj, dict):
        raise ValueError(f"{where} is {type(obj).__name__}, expected an object")
    for name, kind in fields.items():
        if name not in obj:
            raise ValueError(f"{where} has no '{name}'")
        if not isinstance(obj[name], kind) or isinstance(obj[name], bool):
            raise ValueError(
                f"{where}.{name}={obj[name]!r} is not {getattr(kind, '__name__', kind)}"
            )


def check_manifest_fields(raw: Any) -> None:
    """Raise ``ValueError`` naming the first field of a parsed ``manifest.json`` that is
    missing or of the wrong type, or a total that disagrees with its shards."""
    _check_fields(raw, _REQUIRED, "manifest")
    for i, shard in enumerate(raw["shards"]):
        _check_fields(shard, _SHARD_FIELDS, f"shards[{i}]")
    total = sum(s["records"] for s in raw["shards"])
    if total != raw["total_records"]:
        raise ValueError(f"total_records={raw['total_records']} but the shards hold {total}")
    paths = {s["path"] for s in raw["shards"]}
    for name, members in (raw.get("splits") or {}).items():
        missing = [m for m in members if m not in paths]
        if missing:
            raise ValueError(f"splits.{name} names {missing[0]}, which is not a shard")


def dataset_root(dataset_path_or_url: str | os.PathLike[str]) -> str:
    """The dataset directory of a dataset path or of its ``manifest.json`` path."""
    path = os.fspath(dataset_path_or_url).rstrip("/")
    if path.endswith("/" + MANIFEST_NAME) or path == MANIFEST_NAME:
        path = path[: -len(MANIFEST_NAME)].rstrip("/") or "."
    return path


def load_manifest(dataset_path_or_url: str | os.PathLike[str]) -> Manifest:
    """Load a dataset's manifest from a local path or an fsspec URL.

    Raises :class:`NotADatasetError` when there is no committed ``manifest.json``.
    """
    root = dataset_root(dataset_path_or_url)
    url = storage.join(root, MANIFEST_NAME)
    try:
        with storage.open_file(url) as f:
            text = f.read()
    except (FileNotFoundError, NotADirectoryError):
        what = "does not exist" if not storage.exists(root) else f"has no {MANIFEST_NAME}"
        raise NotADatasetError(
            f"{root} is not a gpuspark dataset: it {what} (a dataset is visible only once its "
            "manifest is committed, last)",
            remedy="point at a dataset directory written by ShardWriter / write_dataframe, "
            "or re-run the write that did not finish",
        ) from None
    except OSError as exc:  # e.g. manifest.json is a directory
        raise NotADatasetError(
            f"{url}: cannot read the manifest ({exc.strerror or type(exc).__name__})",
            remedy="point at a dataset directory written by gpuspark, or rewrite the dataset",
        ) from None
    try:
        manifest = Manifest.from_json(text)
    except (ValueError, TypeError) as exc:
        raise NotADatasetError(
            f"{url}: manifest is not valid ({exc})", remedy="rewrite the dataset"
        ) from None
    if manifest.version > FORMAT_VERSION:
        raise NotADatasetError(
            f"{url}: format version {manifest.version} is newer than this gpuspark's "
            f"({FORMAT_VERSION})",
            remedy="upgrade gpuspark",
        )
    return manifest


def write_manifest(dataset_path: str | os.PathLike[str], manifest: Manifest) -> None:
    """Commit ``manifest.json`` atomically (temp file + rename): the dataset becomes visible."""
    storage.atomic_write_text(storage.join(dataset_path, MANIFEST_NAME), manifest.to_json())
