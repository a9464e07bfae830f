"""The rest of an epoch dealt again to another number of ranks (elastic training).

A run that loses a host mid-epoch and continues on fewer ranks (``launch --min-ranks``) must
read the rest of that epoch exactly: every sample the lost world had not yet delivered, once,
and none it had. The epoch's plan (:class:`~gpuspark.data.load.order.EpochOrder`,
:class:`~gpuspark.data.load.table_order.TableOrder`) maps *epoch positions* to samples; a
:class:`Deal` says which epoch positions each rank reads:

- the **pool**: the epoch positions still to read, in order, kept as runs
  (:class:`Pool`: starts and lengths, so a whole epoch is one run and the state stays small);
- the **split**: rank ``r`` of ``W`` reads pool positions ``[r * P, (r + 1) * P)``, ``P`` the
  pool's size divided by ``W`` (rounded down with ``drop_last``: fewer than ``W`` samples are
  left out, as at the end of any epoch; rounded up without it: the pool's first positions
  are read again as padding, as in any epoch).

When the world changes at ``consumed`` samples per rank, the dataset gathers every rank's
unread positions (:meth:`Deal.rest`; a table reads each rank's stream through its own
window shuffle, so it gathers them itself), in rank order, into a new pool, dealt to the
new world from position 0. Pure numpy arithmetic; no file access.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Deal", "Pool"]


@dataclass(frozen=True, eq=False)
class Pool:
    """A sequence of epoch positions as runs: run ``i`` is ``starts[i] .. starts[i] +
    lengths[i] - 1``."""

    starts: np.ndarray
    lengths: np.ndarray

    @classmethod
    def whole(cls, n: int) -> Pool:
        """Positions ``0 .. n - 1``."""
        return cls(np.array([0], dtype=np.int64), np.array([n], dtype=np.int64))

    @classmethod
    def of(cls, positions: np.ndarray) -> Pool:
        """The runs of ``positions`` as given (consecutive ascending values join a run)."""
        q = np.asarray(positions, dtype=np.int64)
        if q.size == 0:
            return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        breaks = np.flatnonzero(np.diff(q) != 1) + 1
        heads = np.concatenate(([0], breaks))
        ends = np.concatenate((breaks, [q.size]))
        return cls(q[heads], (ends - heads).astype(np.int64))

    @classmethod
    def join(cls, pools: list[Pool]) -> Pool:
        """The pools one after another (a run that continues the previous one joins it)."""
        if not pools:
            return cls.of(np.zeros(0, dtype=np.int64))
        starts = np.concatenate([p.starts for p in pools])
        lengths = np.concatenate([p.lengths for p in pools])
        keep = lengths > 0
        starts, lengths = starts[keep], lengths[keep]
        if starts.size < 2:
            return cls(starts, lengths)
        joins = starts[1:] == starts[:-1] + lengths[:-1]
        if not joins.any():
            return cls(starts, lengths)
        group = np.concatenate(([0], np.cumsum(~joins)))
        heads = np.flatnonzero(np.concatenate(([True], ~joins)))
        return cls(starts[heads], np.bincount(group, weights=lengths).astype(np.int64))

    @property
    def size(self) -> int:
        """Positions in the pool."""
        return int(self.lengths.sum())

    def _offsets(self) -> np.ndarray:
        return np.concatenate(([0], np.cumsum(self.lengths)))

    def positions(self, begin: int, end: int) -> np.ndarray:
        """Epoch positions at pool indices ``[begin, end)`` (``end <= size``)."""
        i = np.arange(begin, end, dtype=np.int64)
        offsets = self._offsets()
        run = np.searchsorted(offsets, i, side="right") - 1
        return np.asarray(self.starts[run] + (i - offsets[run]), dtype=np.int64)

    def take(self, begin: int, end: int) -> Pool:
        """The sub-sequence at pool indices ``[begin, end)``, as runs (no position list)."""
        offsets = self._offsets()
        lo = np.maximum(offsets[:-1], begin)
        hi = np.minimum(offsets[1:], end)
        keep = hi > lo
        starts = self.starts[keep] + (lo[keep] - offsets[:-1][keep])
        return Pool(starts.astype(np.int64), (hi[keep] - lo[keep]).astype(np.int64))

    def state(self) -> dict[str, list[int]]:
        """Plain lists, for a checkpoint."""
        return {"starts": self.starts.tolist(), "lengths": self.lengths.tolist()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Pool:
        return cls(
            np.asarray(state["starts"], dtype=np.int64),
            np.asarray(state["lengths"], dtype=np.int64),
        )


@dataclass(frozen=True, eq=False)
class Deal:
    """The rest of an epoch (``pool``) split over ``world_size`` ranks; ``generation``
    counts the world changes inside the epoch (1 for the first re-deal)."""

    pool: Pool
    world_size: int
    drop_last: bool = True
    generation: int = 1

    @property
    def per_rank(self) -> int:
        """Positions every rank reads (``P``)."""
        n, w = self.pool.size, self.world_size
        return n // w if self.drop_last else -(-n // w)

    def positions(self, rank: int, begin: int, end: int) -> np.ndarray:
        """Epoch positions of ``rank``'s stream indices ``[begin, end)`` (padding wraps to
        the pool's first positions)."""
        first = rank * self.per_rank
        i = np.arange(first + begin, first + end, dtype=np.int64) % max(self.pool.size, 1)
        if i.size == 0:
            return i
        # contiguous pool indices are read as one slice; a wrapped range in two
        cut = np.flatnonzero(np.diff(i) != 1) + 1
        parts = np.split(i, cut)
        return np.concatenate([self.pool.positions(int(p[0]), int(p[-1]) + 1) for p in parts])

    def rest(self, consumed: int) -> Pool:
        """What the ranks have not read after each delivered ``consumed`` stream positions
        in order, rank after rank (padding of a ``drop_last=False`` deal excluded)."""
        parts = []
        for rank in range(self.world_size):
            first = rank * self.per_rank
            lo, hi = first + consumed, min(first + self.per_rank, self.pool.size)
            if hi > lo:
                parts.append(self.pool.take(lo, hi))
        return Pool.join(parts)

    def state(self) -> dict[str, Any]:
        """Plain data, for a checkpoint's loader state."""
        return {
            **self.pool.state(),
            "world_size": self.world_size,
            "drop_last": self.drop_last,
            "generation": self.generation,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Deal:
        return cls(
            Pool.from_state(state),
            int(state["world_size"]),
            bool(state.get("drop_last", True)),
            int(state.get("generation", 1)),
        )
