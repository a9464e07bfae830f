"""``TableDataset``: exact, resumable, vectorised reading of table datasets for DDP training.

A table dataset stores blocks of rows column by column (:mod:`gpuspark.data.format.table`); this
reader turns a shuffle window of blocks into column arrays with a few numpy calls and cuts
them into batches ``{column: array}`` (or ``transform(batch)``). The epoch's order and exact
split come from :class:`~gpuspark.data.load.table_order.TableOrder`, from the manifest only.

Resume: :meth:`TableDataset.state_dict` is ``(epoch, seed, consumed)``; iteration continues
at row ``consumed`` of this rank's stream without reading the rows before it (the epoch and
resume bookkeeping is :class:`~gpuspark.data.load.epochs.EpochPosition`'s, shared with
:class:`~gpuspark.data.load.dataset.ShardDataset`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuspark.data import format as fmt
from gpuspark.data.format.table import (
    BlockParts,
    TableColumn,
    TableInfo,
    decode_parts,
    number_index,
)
from gpuspark.data.format.table.batch import TableBatch
from gpuspark.data.format.table.blocks import concat_parts
from gpuspark.data.load.access import OpenShards
from gpuspark.data.load.dataset import select_shards
from gpuspark.data.load.decode import decode_example_views
from gpuspark.data.load.epochs import EpochPosition
from gpuspark.data.load.redeal import Deal, Pool
from gpuspark.data.load.table_order import DEFAULT_SHUFFLE_ROWS, TableOrder
from gpuspark.data.load.world import World
from gpuspark.errors import TableError

if TYPE_CHECKING:
    from gpuspark.data.load.table_loader import TableLoader

__all__ = ["TableDataset"]

Batch = dict[str, Any]


class TableDataset(EpochPosition):
    """Batches of rows of a table dataset (local path or fsspec URL), split exactly across
    ranks (see :mod:`gpuspark.data.load.table_order`).

    ``columns`` selects columns (default: all); ``split`` reads that split's shards only.
    Batches are dicts of arrays: numbers 1-D (a ``numpy.ma`` masked array when the rows read
    together hold a null), fixed-width arrays 2-D, strings / binaries / ragged arrays numpy
    object arrays; ``transform(batch)`` replaces the dict when given (e.g.
    :class:`gpuspark.data.frame.FeaturesLabel`). ``shuffle_rows`` is the row-shuffle window.
    ``world`` overrides detection (tests, custom launchers). Epoch, position and resume:
    :class:`~gpuspark.data.load.epochs.EpochPosition`.
    """

    redeals = True

    unit = "row"
    extent_key = "rows"
    extent_text = "a table of {} rows"

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        columns: Sequence[str] | None = None,
        split: str | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        shuffle_rows: int = DEFAULT_SHUFFLE_ROWS,
        transform: Callable[[Batch], Any] | None = None,
        world: World | None = None,
        verify_crc: bool = True,
    ) -> None:
        self.root = fmt.dataset_root(os.fspath(path_or_url))
        self.manifest = fmt.load_manifest(self.root)
        self.info = TableInfo.from_manifest(self.manifest)
        self.shards = select_shards(self.manifest, split, self.root)
        self.split = split
        names = list(columns) if columns is not None else [c.name for c in self.info.columns]
        self.columns: tuple[TableColumn, ...] = tuple(self.info.column(n) for n in names)
        self._names = [c.name for c in self.columns]
        index = number_index(self.info.columns)
        self._positions = {n: index[n] for n in self._names if n in index}
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.shuffle_rows = shuffle_rows
        self.transform = transform
        self.verify_crc = verify_crc
        self._world = world
        self._blocks = self._block_table()
        self.start_position()
        self._plan: tuple[tuple[int, int, int, Deal | None], TableOrder] | None = None
        self.plan()  # validates the sizes against the world now

    def _block_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        shards, records, rows = [], [], []
        for i, shard in enumerate(self.shards):
            if shard.path not in self.info.shard_rows:
                raise TableError(
                    f"{self.root}: shard {shard.path} has no row count in manifest.extra['table']",
                    remedy="the manifest does not match the shards; rewrite the dataset",
                )
            sizes = self.info.block_sizes(shard.path, shard.records)
            shards.append(np.full(len(sizes), i, dtype=np.int64))
            records.append(np.arange(len(sizes), dtype=np.int64))
            rows.append(np.asarray(sizes, dtype=np.int64))
        empty = np.zeros(0, dtype=np.int64)
        return tuple(np.concatenate(x) if x else empty for x in (shards, records, rows))  # type: ignore[return-value]

    # -- world and plan -------------------------------------------------------------------

    @property
    def world(self) -> World:
        """This process's world: as given, else detected (torch.distributed, environment)."""
        return self._world if self._world is not None else World.detect().with_worker(0, 1)

    def plan(self, epoch: int | None = None) -> TableOrder:
        """The :class:`TableOrder` of ``epoch`` (default: the current one) for this world."""
        epoch = self.epoch if epoch is None else epoch
        deal = self.deal if epoch == self.epoch else None
        key = (epoch, self.seed, self.world.world_size, deal)
        if self._plan is None or self._plan[0] != key:
            self._plan = (key, self._order(epoch, key[2], deal))
        return self._plan[1]

    def _order(self, epoch: int, world_size: int, deal: Deal | None) -> TableOrder:
        shards, records, rows = self._blocks
        return TableOrder(
            shards, records, rows, world_size=world_size, seed=self.seed, epoch=epoch,
            shuffle=self.shuffle, window=self.shuffle_rows, drop_last=self.drop_last, deal=deal,
        )  # fmt: skip

    @property
    def rows(self) -> int:
        """Rows of the dataset (of ``split`` when given): ``N``."""
        return int(self._blocks[2].sum())

    @property
    def samples_per_rank(self) -> int:
        """Rows each rank reads per epoch (equal on every rank)."""
        return self.plan().per_rank

    def extent_state(self) -> dict[str, int]:
        """``rows`` of the dataset (checked on load)."""
        return {"rows": self.rows}

    def unread(self, deal: Deal | None, world_size: int, consumed: int) -> Pool:
        """Positions a world of ``world_size`` (reading ``deal``) had not read at
        ``consumed`` rows per rank, rank after rank."""
        old = self._order(self.epoch, world_size, deal)
        return Pool.join([old.unread(rank, consumed) for rank in range(world_size)])

    # -- iteration ------------------------------------------------------------------------

    def stream(self, batch_size: int) -> Iterator[tuple[Any, int]]:
        """``(batch, rows)`` from the current position to the end of the epoch, without
        moving ``consumed`` (:class:`TableLoader` moves it as batches are delivered)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got: {batch_size}")
        plan, rank = self.plan(), self.world.rank
        return self._stream(plan, rank, self.consumed, batch_size)

    def _stream(
        self, plan: TableOrder, rank: int, start: int, batch_size: int
    ) -> Iterator[tuple[Any, int]]:
        reader = _WindowReader(self, views=bool(getattr(self.transform, "reads_views", False)))
        pending: list[BlockParts] = []
        have = 0
        try:
            for k in range(start // plan.window, plan.windows):
                begin, end = plan.window_range(k)
                window = reader.window(plan, rank, k)
                off = max(start - begin, 0)
                while off < end - begin:
                    take = min(batch_size - have, end - begin - off)
                    pending += window.rows(off, off + take)
                    have, off = have + take, off + take
                    if have == batch_size:
                        yield self._prepare(pending), have
                        pending, have = [], 0
                del window
            if have:
                yield self._prepare(pending), have
        finally:
            pending = []
            reader.close()

    def _prepare(self, parts: list[BlockParts]) -> Any:
        rows = parts[0] if len(parts) == 1 else concat_parts(parts)
        batch = TableBatch(self._names, self._positions, rows)
        return batch if self.transform is None else self.transform(batch)

    def iter_batches(self, batch_size: int) -> Iterator[Any]:
        """Yield this rank's batches from the current position to the end of the epoch (a
        finished epoch first rolls over), advancing ``consumed`` as each is yielded."""
        self.begin_epoch()
        for batch, rows in self.stream(batch_size):
            self.consumed += rows
            yield batch

    def loader(
        self,
        batch_size: int,
        *,
        num_workers: int = 0,
        prefetch: int = 2,
        pin_memory: bool = True,
        device: Any = None,
    ) -> TableLoader:
        """Batches prepared ahead of the training loop (see :class:`TableLoader`)."""
        from gpuspark.data.load.table_loader import TableLoader  # it imports this module

        return TableLoader(
            self,
            batch_size,
            num_workers=num_workers,
            prefetch=prefetch,
            pin_memory=pin_memory,
            device=device,
        )


# --------------------------------------------------------------------------- reading


class _WindowReader:
    """Reads the blocks of one shuffle window and returns its rows as :class:`TableBatch`
    pieces.

    Number columns travel as their blocks' per-dtype matrices: one concatenation and one
    row permutation per dtype for the whole window, then each column is a view of its
    matrix (a wide table costs a few array operations per window, not a few per column).
    With ``views`` (the transform declares ``reads_views``: its outputs never share memory
    with its input) and no shuffle, the pieces are the blocks' own arrays, views of the
    mapped shards: a batch inside one block is handed to the transform without a copy.
    """

    def __init__(self, ds: TableDataset, views: bool = False) -> None:
        self.ds = ds
        self.views = views
        blocks_per_window = max(1, ds.shuffle_rows // max(1, ds.info.block_rows))
        self.shards = OpenShards(ds.root, ds.shards, None, blocks_per_window)
        self.codec = ds.manifest.compression
        self._last: tuple[tuple[int, int], BlockParts] | None = None

    def block(self, shard: int, record: int) -> BlockParts:
        """The decoded parts of one block (the last one is kept: windows share blocks)."""
        if self._last is not None and self._last[0] == (shard, record):
            return self._last[1]
        payload = self.shards.payload(shard, record, self.ds.verify_crc)
        sample = decode_example_views(fmt.decompress(payload, self.codec))
        parts = decode_parts(sample, self.ds.info.columns, self.ds._names)
        self._last = ((shard, record), parts)
        return parts

    def window(self, plan: TableOrder, rank: int, k: int) -> _Window:
        """Window ``k`` of ``rank`` in its reading order: its blocks' rows gathered in the
        shuffled order, or concatenated (a fresh copy either way: nothing points into the
        mapped shards but the items of object arrays), or with ``views`` and no shuffle, the
        blocks' own rows (views)."""
        begin, end = plan.window_range(k)
        blocks = [
            self.block(shard, record).slice(lo, hi)
            for shard, record, lo, hi in plan.pieces(rank, begin, end)
        ]
        perm = plan.window_perm(rank, k)
        if perm is None:
            return _Window(blocks if self.views else [concat_parts(blocks)])
        return _Window([_gather(blocks, perm)])

    def close(self) -> None:
        self._last = None
        self.shards.close()


@dataclass
class _Window:
    """The rows of one shuffle window, in reading order, as consecutive ``parts``."""

    parts: list[BlockParts]

    def rows(self, lo: int, hi: int) -> list[BlockParts]:
        """Rows ``lo:hi`` of the window: views of the parts spanned."""
        out: list[BlockParts] = []
        start = 0
        for part in self.parts:
            n = part.rows
            if start < hi and start + n > lo:
                out.append(part.slice(max(lo - start, 0), min(hi - start, n)))
            start += n
            if start >= hi:
                break
        return out


def _gather(blocks: list[BlockParts], perm: np.ndarray) -> BlockParts:
    """``concat_parts(blocks).take(perm)`` with the number matrices in one copy: each
    block's rows are scattered straight to their places in the permuted output."""
    where = np.empty_like(perm)
    where[perm] = np.arange(len(perm))  # where[i]: output row of input row i
    matrices: dict[str, np.ndarray] = {}
    for dtype, first in blocks[0].matrices.items():
        out = np.empty((len(perm), *first.shape[1:]), dtype=first.dtype)
        start = 0
        for block in blocks:
            out[where[start : start + block.rows]] = block.matrices[dtype]
            start += block.rows
        matrices[dtype] = out
    rest = concat_parts([BlockParts({}, b.masks, b.others, b.rows) for b in blocks]).take(perm)
    return BlockParts(matrices, rest.masks, rest.others, len(perm))
