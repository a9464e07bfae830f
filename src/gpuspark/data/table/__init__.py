"""Table datasets: Spark DataFrames (and Parquet) as gpuspark shards of row blocks.

A *table dataset* is an ordinary gpuspark dataset (TFRecord shards, index, manifest last)
whose records are blocks of up to ``block_rows`` rows stored column by column, so a reader
turns thousands of rows into arrays with a few ``np.frombuffer`` calls; the columns and each
shard's row count are in ``manifest.extra["table"]``.

- :func:`from_dataframe`: a DataFrame materialised once (cached by its plan), returned as
  :class:`DataFrameShards` with ``.dataset()``, ``.loader()`` and ``.delete()``;
- :func:`write_table`: the writer behind it and behind ``gpuspark prep parquet``;
- :func:`encode_block` / :func:`decode_block`: the record layout (``blocks``);
- :class:`TableInfo`, :class:`TableColumn`, :func:`table_columns`: the manifest side
  (``columns``).

Read with :class:`gpuspark.data.load.TableDataset`. Import from ``gpuspark.data.table``;
the module layout behind it may change.
"""

from __future__ import annotations

from gpuspark.data.table.blocks import (
    BlockParts,
    decode_block,
    decode_parts,
    encode_block,
    number_index,
    rechunk,
)
from gpuspark.data.table.columns import (
    COLUMN_KINDS,
    DEFAULT_BLOCK_ROWS,
    TABLE_VERSION,
    TableColumn,
    TableInfo,
    is_table,
    table_columns,
    vectors_as_arrays,
)
from gpuspark.data.table.frame import (
    CACHE_ENV,
    DataFrameShards,
    FeaturesLabel,
    cache_key,
    from_dataframe,
)
from gpuspark.data.table.write import write_table
from gpuspark.errors import TableError

__all__ = [
    "CACHE_ENV",
    "COLUMN_KINDS",
    "DEFAULT_BLOCK_ROWS",
    "TABLE_VERSION",
    "BlockParts",
    "DataFrameShards",
    "FeaturesLabel",
    "TableColumn",
    "TableError",
    "TableInfo",
    "cache_key",
    "decode_block",
    "decode_parts",
    "encode_block",
    "from_dataframe",
    "is_table",
    "number_index",
    "rechunk",
    "table_columns",
    "vectors_as_arrays",
    "write_table",
]
