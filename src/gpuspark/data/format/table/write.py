""":func:`write_table`: a Spark DataFrame to a table dataset (blocks of rows, column by column).

The write goes through :func:`gpuspark.data.write.write_dataframe` (per-attempt staging, one
commit on the driver, manifest last). Each task turns its Arrow batches into blocks of
``block_rows`` rows; the rows each shard got come back with the task's result and go into
``manifest.extra["table"]``, so readers split rows exactly without opening a shard.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from gpuspark.data.format.table.blocks import encode_block, rechunk
from gpuspark.data.format.table.columns import (
    DEFAULT_BLOCK_ROWS,
    TableColumn,
    TableInfo,
    table_columns,
    vectors_as_arrays,
)
from gpuspark.data.write import PartitionReport, write_dataframe
from gpuspark.errors import TableError

__all__ = ["write_table"]


def _block_writer(
    columns: list[TableColumn], block_rows: int
) -> Callable[[int, Iterable[Any]], Iterator[Any]]:
    """The per-shard function: Arrow batches -> block samples, then one row-count report."""

    def blocks(_shard: int, batches: Iterable[Any]) -> Iterator[Any]:

        rows = 0
        for chunk in rechunk(batches, block_rows):
            rows += chunk.num_rows
            yield encode_block(chunk, columns)
        yield PartitionReport(rows=rows)

    return blocks


def _table_extra(
    columns: list[TableColumn],
    block_rows: int,
    extra: Mapping[str, Any] | None,
) -> Callable[[list[dict[str, Any]]], Mapping[str, Any]]:
    def build(reports: list[dict[str, Any]]) -> Mapping[str, Any]:
        shard_rows = {r["shard"]: int(r["rows"]) for r in reports if "rows" in r}
        info = TableInfo(block_rows, tuple(columns), shard_rows)
        return {**(extra or {}), "table": info.as_dict()}

    return build


def write_table(
    df: Any,
    dst: str | os.PathLike[str],
    *,
    world_size: int | None = None,
    num_shards: int | None = None,
    split_col: str | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    overwrite: bool = False,
    compression: str | None = None,
    provenance: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    files: Mapping[str, bytes] | None = None,
) -> Any:
    """Write ``df`` as a table dataset at ``dst``; return the committed manifest.

    Every column is stored (``split_col``, when given, only names the split of each row);
    Spark ML vectors become dense ``array<double>``. Without ``world_size``, ``num_shards``
    or ``split_col`` each partition is one shard and nothing is shuffled: readers split the
    rows exactly across ranks whatever the shard sizes
    (:class:`gpuspark.data.load.TableDataset`). With them the rows are dealt to shards as
    :func:`gpuspark.data.write.write_dataframe` does. An unsupported column type raises
    :class:`~gpuspark.errors.TableError` naming the column before any Spark job.
    """

    if block_rows < 1:
        raise TableError(f"block_rows must be at least 1, got {block_rows}")
    df = vectors_as_arrays(df)
    columns = table_columns([f for f in df.schema.fields if f.name != split_col])
    if not columns:
        raise TableError("the DataFrame has no column to store", remedy="select some columns")
    return write_dataframe(
        df,
        dst,
        num_shards=num_shards,
        world_size=world_size,
        split_col=split_col,
        overwrite=overwrite,
        compression=compression,
        provenance=provenance,
        extra=_table_extra(columns, block_rows, extra),
        files=files,
        partition_fn=_drop_split(_block_writer(columns, block_rows), split_col),
    )


def _drop_split(
    fn: Callable[[int, Iterable[Any]], Iterator[Any]], split_col: str | None
) -> Callable[[int, Iterable[Any]], Iterator[Any]]:
    if split_col is None:
        return fn

    def without_split(shard: int, batches: Iterable[Any]) -> Iterator[Any]:
        return fn(shard, (b.drop_columns([split_col]) for b in batches))

    return without_split
