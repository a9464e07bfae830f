"""The epoch order of a table dataset: which rows of which blocks each rank reads, in which order.

A table dataset's records are *blocks* of rows (:mod:`gpuspark.data.format.table`). From the
manifest alone (rows per shard, ``block_rows``), an epoch is laid out as:

1. **Block order.** With ``shuffle`` the blocks are permuted with a generator seeded by
   ``(seed, epoch)``; their rows, concatenated in that order, are ``N`` global positions.
2. **Exact split.** ``P = N // W`` rows per rank with ``drop_last``, else ``ceil(N / W)``
   with the sequence padded by repeating its first rows; rank ``r`` reads global positions
   ``[r * P, (r + 1) * P)``: every rank gets exactly ``P`` rows, and no row appears twice in
   an epoch except padding.
3. **Row shuffle.** A rank's ``P`` positions are cut into windows of ``window`` rows; with
   ``shuffle`` each window is permuted by ``(seed, epoch, rank, window index)``. A window
   spans ``window / block_rows`` neighbouring blocks, so reading stays sequential.

Resume is arithmetic: position ``consumed`` of a rank's stream is row ``consumed % window``
of window ``consumed // window``. After a world change inside the epoch, a
:class:`~gpuspark.data.load.redeal.Deal` replaces step 2: rank ``r`` reads its part of the
positions the old world had not read (:meth:`TableOrder.unread`), window-shuffled as in
step 3 (seeded with the deal's generation too). Pure numpy; no file access.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpuspark.data.load.redeal import Deal, Pool
from gpuspark.errors import LoaderError

__all__ = ["DEFAULT_SHUFFLE_ROWS", "Piece", "TableOrder"]

DEFAULT_SHUFFLE_ROWS = 65536
"""Rows per shuffle window of a rank's stream (16 blocks of the default 4096 rows; 25 MB for 48
float64 columns)."""

Piece = tuple[int, int, int, int]
"""Rows ``[lo, hi)`` of block ``record`` of shard ``shard`` (position in the reader's
shard list): ``(shard, record, lo, hi)``."""


class TableOrder:
    """The order and exact split of one epoch over blocks of rows.

    ``shards``, ``records`` and ``rows`` describe every block in manifest order (the shard's
    position in the reader's shard list, the record index in that shard, its rows).
    """

    def __init__(
        self,
        shards: npt.ArrayLike,
        records: npt.ArrayLike,
        rows: npt.ArrayLike,
        *,
        world_size: int = 1,
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = True,
        window: int = DEFAULT_SHUFFLE_ROWS,
        drop_last: bool = True,
        deal: Deal | None = None,
    ) -> None:
        if window < 1:
            raise ValueError(f"shuffle_rows must be >= 1, got: {window}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got: {seed}")
        self.world_size, self.seed, self.epoch = world_size, seed, epoch
        self.shuffle, self.window, self.drop_last = shuffle, window, drop_last
        self.deal = deal
        order = np.arange(np.size(rows))
        if shuffle:
            order = np.random.default_rng((seed, epoch)).permutation(np.size(rows))
        self.shards = np.asarray(shards, dtype=np.int64)[order]
        self.records = np.asarray(records, dtype=np.int64)[order]
        self.rows = np.asarray(rows, dtype=np.int64)[order]
        self.cum = np.concatenate(([0], np.cumsum(self.rows)))
        self._check()

    def _check(self) -> None:
        if self.deal is not None:  # the rest of an epoch: it may leave a rank nothing
            return
        if self.total == 0:
            raise LoaderError("the table dataset has no rows", remedy="write some rows first")
        if self.per_rank == 0:
            raise LoaderError(
                f"the table has {self.total} rows, fewer than the {self.world_size} ranks: "
                "no row for some rank",
                remedy="use drop_last=False (pads by repeating rows) or fewer ranks",
            )

    @property
    def total(self) -> int:
        """Rows in the epoch before the split (``N``)."""
        return int(self.cum[-1])

    @property
    def per_rank(self) -> int:
        """Rows every rank reads this epoch (``P``; of the deal, when there is one)."""
        if self.deal is not None:
            return self.deal.per_rank
        n, w = self.total, self.world_size
        return n // w if self.drop_last else -(-n // w)

    @property
    def windows(self) -> int:
        """Shuffle windows in a rank's stream."""
        return -(-self.per_rank // self.window)

    def window_range(self, k: int) -> tuple[int, int]:
        """Positions ``[begin, end)`` of window ``k`` in a rank's stream."""
        begin = k * self.window
        return begin, min(begin + self.window, self.per_rank)

    def window_perm(self, rank: int, k: int) -> np.ndarray | None:
        """The order of the rows of window ``k`` of ``rank`` (``None`` without shuffle)."""
        if not self.shuffle:
            return None
        begin, end = self.window_range(k)
        key: tuple[int, ...] = (self.seed, self.epoch, rank, k)
        if self.deal is not None:
            key += (self.deal.generation,)
        return np.random.default_rng(key).permutation(end - begin)

    def pieces(self, rank: int, begin: int, end: int) -> list[Piece]:
        """The block slices holding positions ``[begin, end)`` of ``rank``'s stream, in order
        (padding wraps around to the first rows of the epoch)."""
        out: list[Piece] = []
        if self.deal is not None:
            runs = Pool.of(self.deal.positions(rank, begin, end))
            for a, n in zip(runs.starts.tolist(), runs.lengths.tolist(), strict=True):
                out.extend(self._contiguous(a, a + n))
            return out
        start = rank * self.per_rank + begin
        left = end - begin
        while left > 0:
            a = start % self.total
            b = min(a + left, self.total)
            out.extend(self._contiguous(a, b))
            left -= b - a
            start += b - a
        return out

    def unread(self, rank: int, consumed: int) -> Pool:
        """The positions ``rank`` had not read after delivering ``consumed`` rows of its
        stream (the rest of its window in reading order, then its later windows); padding
        excluded."""
        if consumed >= self.per_rank:
            return Pool.of(np.zeros(0, dtype=np.int64))
        k = consumed // self.window
        begin, end = self.window_range(k)
        perm = self.window_perm(rank, k)
        order = np.arange(end - begin) if perm is None else perm
        head = np.sort(begin + order[consumed - begin :])
        tail = np.arange(end, self.per_rank, dtype=np.int64)
        index = np.concatenate((head, tail))  # indices of the rank's sequence
        if self.deal is not None:
            first, pool = rank * self.per_rank, self.deal.pool
            runs = Pool.of(first + index[first + index < pool.size])  # indices into the pool
            return Pool.join(
                [
                    pool.take(a, a + n)
                    for a, n in zip(runs.starts.tolist(), runs.lengths.tolist(), strict=True)
                ]
            )
        positions = rank * self.per_rank + index
        return Pool.of(positions[positions < self.total])

    def _contiguous(self, a: int, b: int) -> list[Piece]:
        """Pieces of global positions ``[a, b)``, ``0 <= a < b <= N``."""
        first = int(np.searchsorted(self.cum, a, side="right")) - 1
        last = int(np.searchsorted(self.cum, b - 1, side="right")) - 1
        out = []
        for i in range(first, last + 1):
            base = int(self.cum[i])
            lo, hi = max(a - base, 0), min(b - base, int(self.rows[i]))
            out.append((int(self.shards[i]), int(self.records[i]), lo, hi))
        return out
