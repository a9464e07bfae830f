"""The table format: Spark DataFrames (and Parquet) as gpuspark shards of row blocks.

A *table dataset* is an ordinary gpuspark dataset (TFRecord shards, index, manifest last)
whose records are blocks of up to ``block_rows`` rows stored column by column, so a reader
turns thousands of rows into arrays with a few ``np.frombuffer`` calls; the columns and each
shard's row count are in ``manifest.extra["table"]``.

- :func:`write_table`: the writer (``write``), behind ``gpuspark prep parquet`` and
  :func:`gpuspark.data.frame.from_dataframe`;
- :func:`encode_block` / :func:`decode_block`: the record layout (``blocks``);
- :class:`TableInfo`, :class:`TableColumn`, :func:`table_columns`: the manifest side
  (``columns``);
- :class:`TableBatch`: a batch of decoded blocks, column by column (``batch``).

Read with :class:`gpuspark.data.load.TableDataset`. Import from ``gpuspark.data.format.table``;
the module layout behind it may change.
"""

from __future__ import annotations

from gpuspark.data.format.table.batch import TableBatch
from gpuspark.data.format.table.blocks import (
    BlockParts,
    decode_block,
    decode_parts,
    encode_block,
    number_index,
    rechunk,
)
from gpuspark.data.format.table.columns import (
    COLUMN_KINDS,
    DEFAULT_BLOCK_ROWS,
    TABLE_VERSION,
    TableColumn,
    TableInfo,
    is_table,
    table_columns,
    vectors_as_arrays,
)
from gpuspark.data.format.table.write import write_table
from gpuspark.errors import TableError

__all__ = [
    "COLUMN_KINDS",
    "DEFAULT_BLOCK_ROWS",
    "TABLE_VERSION",
    "BlockParts",
    "TableBatch",
    "TableColumn",
    "TableError",
    "TableInfo",
    "decode_block",
    "decode_parts",
    "encode_block",
    "is_table",
    "number_index",
    "rechunk",
    "table_columns",
    "vectors_as_arrays",
    "write_table",
]
