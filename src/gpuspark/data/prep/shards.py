"""Shard planning of a series job: which series go to which shard, decided on the driver."""

from __future__ import annotations

from typing import Any

from gpuspark._util.numbers import round_up
from gpuspark.errors import PrepError

__all__ = ["deal_shards"]


def deal_shards(
    series: dict[str, tuple[Any, int, int]],
    *,
    world_size: int | None,
    num_shards: int | None,
    tasks: int,
    shard_bytes: int,
) -> tuple[list[Any], dict[str, int]]:
    """The shards of a series job and the shard of each series: ``(split of each shard,
    {series: shard})`` from ``{series: (split, files, bytes)}``.

    Each split gets a multiple of ``world_size`` shards (``num_shards`` each if given; else
    enough for ``shard_bytes`` of input per shard and, across splits, about ``tasks`` shards
    in proportion to their series, but no more than its series); series are dealt largest
    first in a snake order, so a split's shards differ by at most one series and carry about
    the same work.
    """
    ws = 1 if world_size is None else world_size
    if ws < 1:
        raise PrepError(f"world_size must be at least 1, got {world_size}")
    if num_shards is not None and (num_shards <= 0 or num_shards % ws):
        raise PrepError(
            f"--num-shards {num_shards} (num_shards={num_shards}) must be a positive multiple "
            f"of --world-size {ws} (world_size={ws})",
            remedy="leave it out to size shards automatically",
        )
    by_split: dict[Any, list[tuple[str, int, int]]] = {}
    for uid, (split, files, nbytes) in series.items():
        by_split.setdefault(split, []).append((uid, files, nbytes))
    if not by_split:
        return [None] * (num_shards or ws), {}
    layout: list[Any] = []
    assign: dict[str, int] = {}
    for split in sorted(by_split, key=lambda x: (x is None, x)):
        items = sorted(by_split[split], key=lambda t: (-t[1], t[0]))
        wanted = max(
            -(-sum(t[2] for t in items) // shard_bytes),
            round(tasks * len(items) / len(series)),
        )
        # never more shards than series (rounded up to the world size): no empty shards
        k = num_shards or round_up(max(1, min(wanted, len(items))), ws)
        for i, (uid, _, _) in enumerate(items):
            lap, col = divmod(i, k)
            assign[uid] = len(layout) + (col if lap % 2 == 0 else k - 1 - col)
        layout.extend([split] * k)
    return layout, assign
