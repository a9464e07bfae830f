"""Writing gpuspark datasets: :class:`ShardWriter` (plain Python) and :func:`write_dataframe`.

Every writer stages its shards next to the dataset, moves them into place and commits the
manifest last, so a failure leaves the old dataset or none, never a half-written one; on
Spark, exactly one attempt per shard is committed, by the driver.

The public face of the writer side; the modules behind it, one job each:

- :mod:`~gpuspark.data.write.commit`: the commit protocol - staging directory, target checks,
  leftovers of interrupted writes, manifest last;
- :mod:`~gpuspark.data.write.shard_writer`: one shard file (framing, index, hash, schema) and
  :class:`ShardWriter`, which rolls shards by size;
- :mod:`~gpuspark.data.write.layout`: Spark shard planning - round-robin rows to shards, exact
  shuffle keys;
- :mod:`~gpuspark.data.write.spark`: :func:`write_dataframe`, :func:`write_partitions` and
  the per-task-attempt writer.

Import from ``gpuspark.data.write``; the module layout behind it may change.
"""

from __future__ import annotations

from gpuspark.data.write.commit import check_target, extra_file_name
from gpuspark.data.write.layout import balanced_counts, partition_keys, spark_hash_int
from gpuspark.data.write.shard_writer import DEFAULT_TARGET_SHARD_BYTES, ShardWriter
from gpuspark.data.write.spark import (
    PartitionFn,
    PartitionReport,
    SampleFn,
    write_dataframe,
    write_partitions,
)

__all__ = [
    "DEFAULT_TARGET_SHARD_BYTES",
    "PartitionFn",
    "PartitionReport",
    "SampleFn",
    "ShardWriter",
    "balanced_counts",
    "check_target",
    "extra_file_name",
    "partition_keys",
    "spark_hash_int",
    "write_dataframe",
    "write_partitions",
]
