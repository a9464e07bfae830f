"""Spark shard planning: which rows go to which shard, decided before anything is written.

Rows are dealt round-robin to shards by their position within their split, so shard sizes
differ by at most one record; the shuffle that brings each shard's rows to one task is a
``repartition(n, key)`` on keys chosen so that Spark's hash partitioning is an exact
assignment (:func:`partition_keys`).
"""

from __future__ import annotations

from typing import Any

from gpuspark._util.numbers import round_up
from gpuspark._util.spark_compat import is_connect, sql_functions
from gpuspark.data.checks import check_split_name
from gpuspark.errors import GpusparkError

__all__ = [
    "KEY_COL",
    "balanced_counts",
    "num_partitions",
    "partition_keys",
    "plan_dataframe",
    "spark_hash_int",
]

KEY_COL = "__gpuspark_shard_key"
"""The column that carries each row's shard key between planning and the write tasks."""


def balanced_counts(total: int, shards: int) -> list[int]:
    """Records per shard when ``total`` records are dealt round-robin to ``shards`` shards."""
    return [total // shards + (1 if i < total % shards else 0) for i in range(shards)]


def _shards_per_split(
    counts: dict[Any, int], num_shards: int | None, world_size: int | None, partitions: int
) -> dict[Any, int]:
    """Number of shards for each split (``None`` = no split column)."""
    ws = world_size or 1
    if num_shards is not None:
        if num_shards <= 0:
            raise GpusparkError(f"num_shards must be > 0, got {num_shards}")
        if num_shards % ws:
            raise GpusparkError(
                f"--num-shards {num_shards} (num_shards={num_shards}) is not a multiple of "
                f"--world-size {ws} (world_size={ws}): ranks would get unequal numbers of shards",
                remedy=f"pass --num-shards {round_up(num_shards, ws)} or leave it out",
            )
        return {s: num_shards for s in counts}
    total = sum(counts.values()) or 1
    return {s: round_up(max(1, round(partitions * n / total)), ws) for s, n in counts.items()}


_M32 = 0xFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash(int_col)`` (``Murmur3_x86_32.hashInt``, seed 42), as a signed int32."""
    k1 = _rotl32((value & _M32) * 0xCC9E2D51 & _M32, 15) * 0x1B873593 & _M32
    h1 = (_rotl32(seed ^ k1, 13) * 5 + 0xE6546B64) & _M32
    h1 ^= 4
    h1 = (h1 ^ (h1 >> 16)) * 0x85EBCA6B & _M32
    h1 = (h1 ^ (h1 >> 13)) * 0xC2B2AE35 & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def partition_keys(n: int) -> list[int]:
    """For each partition p < n, a small int that ``repartition(n, col)`` sends to p.

    Spark hash partitioning places a row in ``pmod(murmur3(col, 42), n)`` (the same value as
    ``F.hash``); choosing these keys makes the shuffle an exact assignment. The write tasks
    check that every row they get carries their key.
    """
    keys: list[int | None] = [None] * n
    missing, v = n, 0
    while missing:
        b = spark_hash_int(v) % n
        if keys[b] is None:
            keys[b] = v
            missing -= 1
        v += 1
    return [int(k) for k in keys if k is not None]


def num_partitions(df: Any, count_rows: list[Any] | None = None) -> int | None:
    """The partitions of ``df``: ``df.rdd.getNumPartitions()`` on a classic session. A Spark
    Connect client has no RDD API and no call for it: there, the partitions up to the last
    one holding rows in ``count_rows`` (``p`` per row, as :func:`plan_dataframe` counts
    them), or ``None`` (not known before the plan runs)."""
    if not is_connect(df):
        return int(df.rdd.getNumPartitions())
    if count_rows is None:
        return None
    return max((int(r["p"]) for r in count_rows), default=0) + 1


def plan_dataframe(
    df: Any,
    num_shards: int | None,
    world_size: int | None,
    split_col: str | None,
) -> tuple[Any, list[tuple[Any, int]] | None, list[int] | None]:
    """Return the DataFrame to write, each shard's (split, index) and the shard hash keys.

    The DataFrame has one partition per shard.

    Without ``num_shards``, ``world_size`` or ``split_col`` the DataFrame's partitions are the
    shards, and the layout is ``None``: one shard per partition, as many as the write's tasks
    (their results say how many; a Spark Connect client cannot ask before). Otherwise every
    row gets a global position within its split (partition offset +
    ``monotonically_increasing_id``'s row number) and is dealt round-robin to the split's
    shards, so shard sizes within a split differ by at most one record. This needs a
    deterministic row order per input partition (files, ``range``, cached data): cache or
    checkpoint a DataFrame that comes out of an unordered shuffle first. A Spark Connect
    DataFrame is planned the same way (see :func:`num_partitions`).
    """
    F = sql_functions(df)

    if num_shards is None and world_size is None and split_col is None:
        return df, None, None
    split_expr = F.col(split_col).cast("string") if split_col else F.lit(None).cast("string")
    count_rows = (
        df.select(F.spark_partition_id().alias("p"), split_expr.alias("s"))
        .groupBy("p", "s")
        .count()
        .collect()
    )
    if split_col and any(r["s"] is None for r in count_rows):
        raise GpusparkError(
            f"split column {split_col!r} has null values",
            remedy="fill or filter them before writing",
        )
    per_split: dict[Any, int] = {}
    for r in count_rows:
        per_split[r["s"]] = per_split.get(r["s"], 0) + r["count"]
    if not per_split:
        per_split = {None: 0}
    for s in per_split:
        if s is not None:
            check_split_name(s)
    partitions = num_partitions(df, count_rows) or 1
    n_shards = _shards_per_split(per_split, num_shards, world_size, partitions)
    layout: list[tuple[Any, int]] = []
    base: dict[Any, int] = {}
    for s in sorted(n_shards, key=lambda x: (x is None, x)):
        base[s] = len(layout)
        layout.extend((s, j) for j in range(n_shards[s]))
    keys = partition_keys(len(layout))
    offsets = _partition_offsets(count_rows)
    parts = []
    for s in base:
        sub = df.filter(split_expr == F.lit(s)) if split_col else df
        parts.append(_with_key(sub, s, offsets, base[s], n_shards[s], keys))
    keyed = parts[0]
    for p in parts[1:]:
        keyed = keyed.unionByName(p)
    return keyed.repartition(len(layout), KEY_COL), layout, keys


def _partition_offsets(count_rows: list[Any]) -> dict[Any, dict[int, int]]:
    """Per split: the number of the split's rows in all earlier input partitions."""
    offsets: dict[Any, dict[int, int]] = {}
    totals: dict[Any, int] = {}
    for r in sorted(count_rows, key=lambda r: r["p"]):
        offsets.setdefault(r["s"], {})[r["p"]] = totals.get(r["s"], 0)
        totals[r["s"]] = totals.get(r["s"], 0) + r["count"]
    return offsets


def _with_key(
    df: Any, split: Any, offsets: dict[Any, dict[int, int]], base: int, n: int, keys: list[int]
) -> Any:
    F = sql_functions(df)
    offs = offsets.get(split) or {0: 0}  # partitions without rows of this split: no entry
    offset_map = F.create_map(*[F.lit(x) for p, o in offs.items() for x in (p, o)])
    mid = F.monotonically_increasing_id()
    position = F.element_at(offset_map, F.spark_partition_id()) + (mid % F.lit(1 << 33))
    key_array = F.array(*[F.lit(k) for k in keys[base : base + n]])
    shard = (position % F.lit(n)).cast("int")
    return df.withColumn(KEY_COL, F.element_at(key_array, shard + F.lit(1)))
