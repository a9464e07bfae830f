"""Table columns: which Spark types a table dataset holds, and what its manifest records.

A table dataset is a gpuspark dataset whose records are *blocks* of rows stored column by
column (:mod:`gpuspark.data.format.table.blocks`). The column list and each shard's row count live
in ``manifest.extra["table"]`` (:class:`TableInfo`), so a reader plans an epoch without
opening a shard.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gpuspark.errors import TableError, did_you_mean

__all__ = [
    "COLUMN_KINDS",
    "DEFAULT_BLOCK_ROWS",
    "TABLE_VERSION",
    "TableColumn",
    "TableInfo",
    "is_table",
    "table_columns",
    "vectors_as_arrays",
]

TABLE_VERSION = 1
DEFAULT_BLOCK_ROWS = 4096
"""Rows per record: large enough that the per-record costs (protobuf walk, CRC call) vanish
next to the rows' bytes (``benchmarks/bench_dataframe.py``), small enough that the reader's
block order plus row shuffle within windows of several blocks mixes well."""
COLUMN_KINDS = ("number", "string", "binary", "array", "string_array")

_NUMBERS = {
    "boolean": "bool",
    "byte": "int8",
    "short": "int16",
    "integer": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
}
_CASTS = {
    "decimal": "cast it to double",
    "date": "cast it to a string or to days as int",
    "timestamp": "cast it to a string or to epoch microseconds as long",
    "timestamp_ntz": "cast it to a string or to epoch microseconds as long",
    "map": "turn it into columns (one per key) or into a string",
    "struct": "select its fields as columns",
    "array": "use an array of numbers or of strings",
}
_RESERVED = ("/data", "/shape", "/dtype", "/encoded", "/format")


@dataclass(frozen=True)
class TableColumn:
    """One column of a table dataset."""

    name: str
    kind: str
    """``number``, ``string``, ``binary``, ``array`` (numbers) or ``string_array``."""
    dtype: str | None = None
    """numpy dtype name of a ``number`` or ``array`` column's values."""

    def as_dict(self) -> dict[str, Any]:
        """The manifest form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableColumn:
        """Inverse of :meth:`as_dict`."""
        return cls(str(data["name"]), str(data["kind"]), data.get("dtype"))


def _column(name: str, data_type: Any) -> TableColumn:
    type_name = data_type.typeName()
    if type_name in _NUMBERS:
        return TableColumn(name, "number", _NUMBERS[type_name])
    if type_name == "string":
        return TableColumn(name, "string")
    if type_name == "binary":
        return TableColumn(name, "binary")
    if type_name == "array":
        item = data_type.elementType.typeName()
        if item in _NUMBERS:
            return TableColumn(name, "array", _NUMBERS[item])
        if item == "string":
            return TableColumn(name, "string_array")
    if _is_vector(data_type):  # Spark ML VectorUDT: vectors_as_arrays() converts it first
        return TableColumn(name, "array", "float64")
    how = _CASTS.get(type_name, "cast it to a number, a string or an array of numbers")
    raise TableError(
        f"column {name!r} has type {data_type.simpleString()}, which a table dataset cannot hold",
        remedy=f"{how} before writing (or leave the column out)",
    )


def _is_vector(data_type: Any) -> bool:
    """A Spark ML vector (``pyspark.ml.linalg.VectorUDT``, type name ``vectorudt``)."""
    return bool(data_type.typeName() == "vectorudt")


def _check_name(name: str) -> None:
    if "#" in name or name.endswith(_RESERVED):
        raise TableError(
            f"column {name!r}: table column names may not contain '#' nor end with "
            f"{', '.join(_RESERVED)}",
            remedy="rename the column (df.withColumnRenamed)",
        )


def table_columns(schema: Any) -> list[TableColumn]:
    """The table columns of a Spark ``StructType`` (or a list of its fields); an unsupported
    type raises :class:`~gpuspark.errors.TableError` naming the column and the cast to use."""
    out = []
    for field in getattr(schema, "fields", schema):
        _check_name(field.name)
        out.append(_column(field.name, field.dataType))
    return out


def vectors_as_arrays(df: Any) -> Any:
    """``df`` with every Spark ML vector column (``VectorUDT``) turned into a dense
    ``array<double>`` (``pyspark.ml.functions.vector_to_array``); other columns unchanged."""
    vectors = [f.name for f in df.schema.fields if _is_vector(f.dataType)]
    if not vectors:
        return df
    from pyspark.ml.functions import vector_to_array

    for name in vectors:
        df = df.withColumn(name, vector_to_array(df[name], "float64"))
    return df


def is_table(manifest: Any) -> bool:
    """Whether ``manifest`` is a table dataset's."""
    return isinstance(manifest.extra.get("table"), Mapping)


@dataclass(frozen=True)
class TableInfo:
    """``manifest.extra["table"]``: block size, columns and rows per shard."""

    block_rows: int
    columns: tuple[TableColumn, ...]
    shard_rows: Mapping[str, int]
    """Rows in each shard, by shard path (as in ``manifest.shards[i].path``)."""

    @property
    def rows(self) -> int:
        """Rows in the dataset."""
        return int(sum(self.shard_rows.values()))

    def block_sizes(self, shard: str, blocks: int) -> list[int]:
        """Rows in each of the ``blocks`` records of ``shard``: ``block_rows`` except the last."""
        rows = int(self.shard_rows[shard])
        if blocks == 0:
            return []
        last = rows - (blocks - 1) * self.block_rows
        if not 0 < last <= self.block_rows:
            raise TableError(
                f"shard {shard}: {rows} rows do not fill {blocks} blocks of {self.block_rows}",
                remedy="the manifest does not match the shards; rewrite the dataset",
            )
        return [self.block_rows] * (blocks - 1) + [last]

    def column(self, name: str) -> TableColumn:
        """The column called ``name``."""
        for col in self.columns:
            if col.name == name:
                return col

        names = [c.name for c in self.columns]
        raise TableError(
            f"table has no column {name!r}{did_you_mean(name, names)}",
            remedy="its columns: " + ", ".join(names),
        )

    def as_dict(self) -> dict[str, Any]:
        """The manifest form (``extra["table"]``)."""
        return {
            "version": TABLE_VERSION,
            "block_rows": self.block_rows,
            "columns": [c.as_dict() for c in self.columns],
            "rows": self.rows,
            "shard_rows": dict(self.shard_rows),
        }

    @classmethod
    def from_manifest(cls, manifest: Any) -> TableInfo:
        """The table description of ``manifest``; a dataset that is not a table raises."""
        data = manifest.extra.get("table")
        if not isinstance(data, Mapping):
            raise TableError(
                "dataset is not a table dataset (its manifest has no extra['table'])",
                remedy="write it with gpuspark.data.from_dataframe or gpuspark prep parquet, "
                "or read it with ShardDataset",
            )
        if int(data.get("version", 0)) > TABLE_VERSION:
            raise TableError(
                f"table format version {data.get('version')} is newer than this gpuspark "
                f"reads ({TABLE_VERSION})",
                remedy="upgrade gpuspark",
            )
        return cls(
            block_rows=int(data["block_rows"]),
            columns=tuple(TableColumn.from_dict(c) for c in data["columns"]),
            shard_rows={str(k): int(v) for k, v in data["shard_rows"].items()},
        )
