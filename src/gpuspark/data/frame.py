""":func:`from_dataframe`: a Spark DataFrame to training data, cached by its plan.

The role Petastorm's ``make_spark_converter(df)`` played: materialise the DataFrame once as
a table dataset (:func:`~gpuspark.data.format.table.write_table`), then hand out exact,
resumable, rank-split readers (:class:`gpuspark.data.load.TableDataset`). The cache key is a
hash of the DataFrame's analysed plan (expression ids removed), its input files (with sizes
and modification times, so changed data is a new key), the plan's semantic hash where the
plan holds in-memory data, and the options; a second call with the same DataFrame finds the
committed dataset and starts no Spark job.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from gpuspark import storage
from gpuspark._util import envvars
from gpuspark._util.spark_compat import sql_functions
from gpuspark.data import format as fmt
from gpuspark.data.format.table.batch import TableBatch
from gpuspark.data.format.table.columns import DEFAULT_BLOCK_ROWS, TABLE_VERSION, TableInfo
from gpuspark.data.format.table.write import write_table
from gpuspark.data.load import TableDataset
from gpuspark.data.write.layout import num_partitions
from gpuspark.errors import TableError, did_you_mean

__all__ = ["CACHE_ENV", "DataFrameShards", "FeaturesLabel", "cache_key", "from_dataframe"]

CACHE_ENV = envvars.CACHE_DIR.name
"""Environment variable naming the DataFrame cache folder (default: ``gpuspark-data/dataframes``
under the working directory, the spec's default storage root)."""
_EXPR_ID = re.compile(r"#\d+L?")
_IN_MEMORY = ("LocalRelation", "LogicalRDD", "ExistingRDD", "InMemoryRelation")


def _analysed_plan(df: Any) -> str:
    """The analysed logical plan's text without expression ids (which differ between two
    builds of the same DataFrame); from ``DataFrame.explain``, Spark's public view of it."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        df.explain(mode="extended")
    text = buf.getvalue()
    start = text.find("== Analyzed Logical Plan ==")
    end = text.find("== Optimized Logical Plan ==")
    section = text[start:end] if start >= 0 and end > start else text
    return _EXPR_ID.sub("#", section)


def _input_files(df: Any) -> list[list[Any]]:
    out: list[list[Any]] = []
    for uri in sorted(df.inputFiles()):
        entry: list[Any] = [uri]
        with contextlib.suppress(OSError, ValueError):
            st = os.stat(storage.local_path(uri))
            entry += [st.st_size, st.st_mtime_ns]
        out.append(entry)
    return out


def cache_key(df: Any, options: dict[str, Any]) -> str:
    """The cache key of ``df`` written with ``options`` (hex, 24 characters)."""
    plan = _analysed_plan(df)
    parts: dict[str, Any] = {
        "version": TABLE_VERSION,
        "plan": plan,
        "files": _input_files(df),
        "options": options,
    }
    if any(word in plan for word in _IN_MEMORY):
        parts["semantic_hash"] = int(df.semanticHash())
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _default_cache_dir() -> str:
    return os.environ.get(CACHE_ENV) or os.path.abspath(os.path.join("gpuspark-data", "dataframes"))


@dataclass
class FeaturesLabel:
    """A :class:`~gpuspark.data.load.TableDataset` transform: a batch of columns to
    ``(features float32 tensor [n, d], label tensor [n])``; numbers are one feature each,
    fixed-width arrays (vectors) ``d`` features; missing numbers become NaN."""

    features: Sequence[str]
    label: str | None = None
    reads_views: ClassVar[bool] = True
    """Its outputs are always fresh arrays, so the reader may hand it views of the mapped
    shards (no copy of the rows before the cast)."""

    def __call__(self, batch: dict[str, Any]) -> Any:
        import torch

        x = torch.from_numpy(_features_matrix(batch, self.features))
        if self.label is None:
            return x
        y = batch[self.label]
        y = np.ma.filled(y, 0) if np.ma.isMaskedArray(y) else np.array(y, copy=True)
        return x, torch.from_numpy(y)


def _features_matrix(batch: dict[str, Any], names: Sequence[str]) -> np.ndarray:
    """The float32 matrix [n, d] of ``names`` (a fresh array): runs of neighbouring number
    columns of a :class:`TableBatch` are one cast of a slice of their matrix, runs of other
    plain 1-D number columns one ``stack``, anything else column by column."""
    runs = (
        batch.number_runs(names)
        if isinstance(batch, TableBatch)
        else [([name], None) for name in names]
    )
    parts: list[np.ndarray] = []
    plain: list[np.ndarray] = []
    for run, matrix in runs:
        values = batch[run[0]]
        if matrix is None and _plain_number(values):
            plain.append(values)
            continue
        if plain:
            parts.append(np.stack(plain, axis=1, dtype=np.float32, casting="same_kind"))
            plain = []
        parts.append(_as_matrix(values, run[0]) if matrix is None else matrix.astype(np.float32))
    if plain:
        parts.append(np.stack(plain, axis=1, dtype=np.float32, casting="same_kind"))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)


def _plain_number(values: Any) -> bool:
    return values.ndim == 1 and values.dtype != object and not np.ma.isMaskedArray(values)


def _as_matrix(values: Any, name: str) -> np.ndarray:
    if np.ma.isMaskedArray(values):
        values = np.ma.filled(values.astype(np.float32), np.nan)
    if values.dtype == object:
        raise TableError(
            f"feature column {name!r} holds strings, bytes or arrays of varying length",
            remedy="encode it as numbers (e.g. StringIndexer, a fixed-size vector) or leave it out",
        )
    arr = np.array(values, dtype=np.float32)  # a copy: ``values`` may be a view of a shard
    return arr.reshape(len(arr), -1)


@dataclass
class DataFrameShards:
    """A DataFrame materialised as a table dataset (:func:`from_dataframe`'s result)."""

    path: str
    key: str
    manifest: Any
    cached: bool
    """True when the dataset came from the cache (no Spark job ran)."""
    seconds: float
    label: str | None = None
    features: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """Rows in the dataset."""
        return TableInfo.from_manifest(self.manifest).rows

    def dataset(self, *, tensors: bool | None = None, **kwargs: Any) -> Any:
        """A :class:`gpuspark.data.load.TableDataset` over the rows (``kwargs`` go to it:
        ``split``, ``shuffle``, ``seed``, ``world``...). With ``tensors`` (default: when a
        ``label`` was given) batches are ``(features, label)`` tensors (:class:`FeaturesLabel`);
        else dicts of column arrays."""
        if tensors is None:
            tensors = self.label is not None
        if tensors and "transform" not in kwargs:
            kwargs["transform"] = FeaturesLabel(self.features, self.label)
        return TableDataset(self.path, **kwargs)

    def loader(self, batch_size: int, **kwargs: Any) -> Any:
        """``self.dataset(...).loader(batch_size)``; ``kwargs`` split between the two as
        their signatures say (``num_workers``, ``prefetch``, ``device`` go to the loader)."""
        loader_keys = {"num_workers", "prefetch", "pin_memory", "device"}
        lkw = {k: v for k, v in kwargs.items() if k in loader_keys}
        dkw = {k: v for k, v in kwargs.items() if k not in loader_keys}
        return self.dataset(**dkw).loader(batch_size, **lkw)

    def delete(self) -> None:
        """Remove the dataset's files (the cache entry or the given destination)."""
        if storage.is_url(self.path):
            fs, path = storage.filesystem(self.path)
            if fs.exists(path):
                fs.rm(path, recursive=True)
            return
        shutil.rmtree(self.path, ignore_errors=True)


def _selected(df: Any, label: str | None, features: Sequence[str] | None) -> tuple[Any, list[str]]:
    names = list(df.columns)
    wanted = list(features) if features is not None else [n for n in names if n != label]
    for name in [*wanted, *([label] if label else [])]:
        if name not in names:
            raise TableError(
                f"column {name!r} is not in the DataFrame{did_you_mean(name, names)}",
                remedy="its columns: " + ", ".join(names),
            )
    if features is None and label is None:
        return df, wanted
    return df.select(*[df[n] for n in [*wanted, *([label] if label else [])]]), wanted


def _committed(path: str) -> Any | None:

    try:
        return fmt.load_manifest(path)
    except (OSError, ValueError, fmt.NotADatasetError):
        return None


def from_dataframe(
    df: Any,
    dst: str | os.PathLike[str] | None = None,
    *,
    label: str | None = None,
    features: Sequence[str] | None = None,
    world_size: int | None = None,
    num_shards: int | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    cache_dir: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    compression: str | None = None,
) -> DataFrameShards:
    """Materialise ``df`` as a table dataset and return it, ready for training.

    ``label`` and ``features`` (default: every other column) select what is stored;
    ``.dataset()`` then yields ``(features, label)`` tensors. With ``dst`` the dataset is
    written there (``overwrite`` to replace one); without it, under ``cache_dir`` (default:
    ``$GPUSPARK_CACHE_DIR``, else ``gpuspark-data/dataframes``) at a key computed from the
    analysed plan and the options: a second call with the same DataFrame reuses the committed
    dataset and starts no Spark job. Rows are split exactly across ranks by the reader, so
    nothing is shuffled to balance them; ``world_size`` only spreads a DataFrame with fewer
    partitions than ranks over ``world_size`` shards. ``num_shards`` deals the rows to that
    many shards. The cache is shared with executors: ``cache_dir`` must be a path every
    executor can write (a shared file system on a multi-host cluster).
    """
    t0 = time.monotonic()
    if world_size is not None and world_size < 1:
        raise TableError(f"world_size must be at least 1, got {world_size}")
    selected, names = _selected(df, label, features)
    if world_size and num_shards is None and _partitions(selected) < world_size:
        selected = selected.repartition(world_size)
    options = {
        "label": label,
        "features": names,
        "num_shards": num_shards,
        "block_rows": block_rows,
        "compression": compression,
    }
    key = cache_key(selected, options)
    if dst is None:
        root = os.path.join(os.fspath(cache_dir) if cache_dir else _default_cache_dir(), key)
        manifest = _committed(root)
        if manifest is not None and manifest.extra.get("dataframe", {}).get("key") == key:
            return DataFrameShards(root, key, manifest, True, _since(t0), label, names)
        overwrite = True  # a stale or half-written entry under this key is replaced
    else:
        root = os.fspath(dst)

    manifest = write_table(
        selected,
        root,
        num_shards=num_shards,
        block_rows=block_rows,
        overwrite=overwrite,
        compression=compression,
        provenance={"job": "from_dataframe"},
        extra={"dataframe": {"key": key, "label": label, "features": names}},
    )
    return DataFrameShards(root, key, manifest, False, _since(t0), label, names)


def _partitions(df: Any) -> int:
    """The partitions of ``df``; over Spark Connect (no RDD API), those up to the last one
    holding rows, counted by a job that reads no column."""
    known = num_partitions(df)
    if known is not None:
        return known
    F = sql_functions(df)
    last = df.select(F.spark_partition_id().alias("p")).agg(F.max("p").alias("p")).first()
    return 0 if last is None or last["p"] is None else int(last["p"]) + 1


def _since(t0: float) -> float:
    return round(time.monotonic() - t0, 3)
