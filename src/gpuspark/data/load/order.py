"""The epoch order: which record each rank reads at each position, from record counts only.

How an epoch is laid out (all from the manifest's record counts; no shard is scanned):

1. **Shard order.** With ``shuffle=True`` the shards are permuted with a generator seeded by
   ``(seed, epoch)``. Their records, concatenated in that order, form a sequence of ``N``
   positions.
2. **Window shuffle.** The sequence is cut into consecutive windows of ``shuffle_window``
   positions; each window is permuted with a generator seeded by ``(seed, epoch, window)``.
   Reading stays local (a window spans a few neighbouring shards) and any position can be
   looked up directly, which is what makes exact splits and resume possible.
3. **Exact split.** With ``drop_last=True`` each rank gets ``P = N // world_size`` positions
   (at most ``world_size - 1`` samples dropped, different ones each epoch); with
   ``drop_last=False`` ``P = ceil(N / world_size)`` and the sequence is padded by repeating
   its first samples. Rank ``r`` reads positions ``[r * P, (r + 1) * P)``: every rank yields
   exactly ``P`` samples, and no sample appears twice within an epoch except padding.
4. **Workers.** A rank's ``P`` positions are cut into batches; DataLoader worker ``w`` of
   ``n`` builds batches ``w, w + n, ...`` (:func:`worker_batches`). PyTorch's DataLoader
   returns worker batches round-robin, so the rank's stream is the same for any worker count
   - which is why a resumed run may use a different ``num_workers``.

Resume is arithmetic on the same plan: a rank that has delivered ``consumed`` samples of its
stream continues at position ``rank * P + consumed``.

Pure arithmetic on numpy: no torch, no file access. Memory per plan: the shard order and
cumulative counts (16 bytes per shard) and at most two window permutations (8 bytes x
``shuffle_window``; 64 KiB for the default 8192).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from gpuspark.errors import LoaderError

__all__ = ["DEFAULT_SHUFFLE_WINDOW", "EpochOrder", "LoaderError", "worker_batches"]

DEFAULT_SHUFFLE_WINDOW = 8192


@dataclass(frozen=True)
class EpochOrder:
    """The order and split of one epoch, computed from records per shard only."""

    counts: tuple[int, ...]
    """Records per shard, in manifest order."""
    world_size: int = 1
    seed: int = 0
    epoch: int = 0
    shuffle: bool = True
    window: int = DEFAULT_SHUFFLE_WINDOW
    drop_last: bool = True
    _cache: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"shuffle_window must be >= 1, got: {self.window}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got: {self.seed}")
        if self.total == 0:
            raise LoaderError("the dataset has no records", remedy="write some samples first")
        if self.per_rank == 0:
            raise LoaderError(
                f"the dataset has {self.total} records, fewer than the {self.world_size} ranks",
                remedy="use drop_last=False (pads by repeating samples) or fewer ranks",
            )

    @property
    def total(self) -> int:
        """Records in the dataset (``N``)."""
        return int(sum(self.counts))

    @property
    def per_rank(self) -> int:
        """Samples every rank yields this epoch (``P``)."""
        n, w = self.total, self.world_size
        return n // w if self.drop_last else -(-n // w)

    def _shard_order(self) -> np.ndarray:
        n = len(self.counts)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng((self.seed, self.epoch, 0)).permutation(n)

    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        if -1 not in self._cache:
            order = self._shard_order()
            counts = np.asarray(self.counts, dtype=np.int64)[order]
            self._cache[-1] = order
            self._cache[-2] = np.concatenate(([0], np.cumsum(counts)))
        return self._cache[-1], self._cache[-2]

    def _window_perm(self, k: int) -> np.ndarray:
        perm = self._cache.get(k)
        if perm is None:
            length = min(self.window, self.total - k * self.window)
            perm = np.random.default_rng((self.seed, self.epoch, 1, k)).permutation(length)
            for old in [key for key in self._cache if key >= 0][:-1]:  # keep <= 2 windows
                del self._cache[old]
            self._cache[k] = perm
        return perm

    def lookup(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Map epoch positions (``0 <= q < world_size * per_rank``) to ``(shard, record)``."""
        q = np.asarray(positions, dtype=np.int64) % self.total  # padding repeats the start
        if self.shuffle:
            w = self.window
            src = np.empty_like(q)
            windows = q // w
            for k in np.unique(windows):
                sel = windows == k
                src[sel] = k * w + self._window_perm(int(k))[q[sel] - k * w]
            q = src
        order, cum = self._tables()
        slot = np.searchsorted(cum, q, side="right") - 1
        return order[slot], q - cum[slot]

    def rank_range(self, rank: int) -> tuple[int, int]:
        """Epoch positions ``[start, stop)`` of ``rank``."""
        return rank * self.per_rank, (rank + 1) * self.per_rank

    def resume_range(self, rank: int, consumed: int) -> tuple[int, int]:
        """Epoch positions ``[start, stop)`` still to read by ``rank`` after it delivered
        ``consumed`` samples of its stream."""
        start, stop = self.rank_range(rank)
        return start + consumed, stop


def worker_batches(
    start: int, stop: int, batch_size: int, worker_id: int = 0, num_workers: int = 1
) -> Iterator[tuple[int, int]]:
    """The ``[begin, end)`` ranges of a rank's stream that worker ``worker_id`` builds:
    batches ``worker_id, worker_id + num_workers, ...`` of ``[start, stop)``."""
    step = batch_size * num_workers
    for begin in range(start + worker_id * batch_size, stop, step):
        yield begin, min(begin + batch_size, stop)
