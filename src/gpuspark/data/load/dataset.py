"""``ShardDataset``: a PyTorch ``IterableDataset`` over a gpuspark dataset, built for DDP.

The epoch's order and exact split across ranks and DataLoader workers come from
:mod:`gpuspark.data.load.order`; records are read through
:class:`~gpuspark.data.load.access.OpenShards`. Samples are held only for the batches in
flight (``prefetch`` per worker, see :class:`~gpuspark.data.load.loader.Loader`).

Resume: :meth:`ShardDataset.state_dict` is ``(epoch, seed, consumed)``; loading it and
iterating continues at position ``consumed`` of this rank's stream (the epoch and resume
bookkeeping is :class:`~gpuspark.data.load.epochs.EpochPosition`'s, shared with
:class:`~gpuspark.data.load.table.TableDataset`). A state saved by another number of ranks
inside an epoch (an elastic run that lost a host) is dealt again: this world reads exactly
the samples the saved one had not (:mod:`gpuspark.data.load.redeal`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuspark.data import format as fmt
from gpuspark.data.checks import check_split_known
from gpuspark.data.load.access import OpenShards
from gpuspark.data.load.cache import ShardCache
from gpuspark.data.load.decode import ImageDecode, decode_example_views, make_decoder
from gpuspark.data.load.epochs import EpochPosition
from gpuspark.data.load.order import (
    DEFAULT_SHUFFLE_WINDOW,
    EpochOrder,
    worker_batches,
)
from gpuspark.data.load.redeal import Deal, Pool
from gpuspark.data.load.world import World, in_worker

if TYPE_CHECKING:
    from gpuspark.data.load.loader import Loader

__all__ = ["ShardDataset", "iterable_base", "select_shards"]

_ON_ERROR = ("raise", "skip")


def iterable_base() -> type:
    """``torch.utils.data.IterableDataset`` (``object`` without torch): the base class of
    the datasets DataLoader iterates."""
    try:
        from torch.utils.data import IterableDataset

        return IterableDataset
    except ImportError:  # pragma: no cover - torch is a dependency
        return object


class ShardDataset(EpochPosition, iterable_base()):  # type: ignore[misc]
    """A PyTorch ``IterableDataset`` over a committed gpuspark dataset (local path or fsspec
    URL), split exactly across ranks and DataLoader workers (see
    :mod:`gpuspark.data.load.order`).

    ``decode``: ``"auto"`` (default; images to uint8 HWC arrays), ``"raw"``, an
    :class:`ImageDecode` or a callable on the stored sample dict. ``transform`` runs after it.
    ``verify_crc`` checks each record's CRC; a bad record raises ``CorruptRecordError``, or
    with ``on_error="skip"`` is skipped and counted (the batch holding it is one sample
    smaller; every rank still takes the same number of steps). ``cache_dir`` copies remote
    shards to node-local disk once (LRU-evicted above ``cache_limit_bytes``). ``split``
    reads only that split's shards. ``world`` overrides detection (tests, custom launchers).
    Epoch, position and resume: :class:`~gpuspark.data.load.epochs.EpochPosition`.
    """

    redeals = True

    unit = "sample"
    extent_key = "total_records"
    extent_text = "a dataset of {} records"

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        decode: str | ImageDecode | Callable[[dict[str, Any]], Any] = "auto",
        transform: Callable[[Any], Any] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        verify_crc: bool = True,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit_bytes: int | None = None,
        on_error: str = "raise",
        split: str | None = None,
        shuffle_window: int = DEFAULT_SHUFFLE_WINDOW,
        world: World | None = None,
    ) -> None:
        super().__init__()
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be one of {_ON_ERROR}, got: {on_error!r}")
        self.root = fmt.dataset_root(os.fspath(path_or_url))
        self.manifest = fmt.load_manifest(self.root)
        self.shards = select_shards(self.manifest, split, self.root)
        self.split = split
        self._decode = make_decoder(decode)
        self.transform = transform
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.shuffle_window = shuffle_window
        self.verify_crc, self.on_error = verify_crc, on_error
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.cache_limit_bytes = cache_limit_bytes
        self._world = world
        self.start_position()
        self.skipped = 0
        self._resolved: World | None = None
        self.plan()  # validates sizes against the world now, not in a worker later

    # -- world and plan -------------------------------------------------------------------

    @property
    def world(self) -> World:
        """This process's world (workers excluded): as given, else as resolved in the parent
        when iteration began (inside DataLoader workers), else detected now."""
        if self._world is not None:
            return self._world
        if self._resolved is not None and in_worker():
            return self._resolved
        return World.detect().with_worker(0, 1)

    def plan(self, epoch: int | None = None) -> EpochOrder:
        """The :class:`EpochOrder` of ``epoch`` (default: the current one) for this world."""
        return EpochOrder(
            counts=tuple(s.records for s in self.shards),
            world_size=self.world.world_size,
            seed=self.seed,
            epoch=self.epoch if epoch is None else epoch,
            shuffle=self.shuffle,
            window=self.shuffle_window,
            drop_last=self.drop_last,
        )

    @property
    def samples_per_rank(self) -> int:
        """Samples each rank yields per epoch (equal on every rank); after a world change
        inside the epoch, those of the epoch's rest dealt to this world."""
        return self.deal.per_rank if self.deal is not None else self.plan().per_rank

    def unread(self, deal: Deal | None, world_size: int, consumed: int) -> Pool:
        """Epoch positions a world of ``world_size`` had not read at ``consumed`` per rank."""
        if deal is None:
            plan = self.plan()
            deal = Deal(Pool.whole(plan.total), world_size, self.drop_last, 0)
        return deal.rest(consumed)

    def extent_state(self) -> dict[str, int]:
        """``samples_per_rank`` and ``total_records`` (checked on load) of this world."""
        plan = self.plan()
        return {"samples_per_rank": plan.per_rank, "total_records": plan.total}

    def begin_epoch(self) -> None:
        """Call in the main process when iteration starts (:class:`Loader` and ``__iter__``
        do): a finished epoch rolls over, and the world is resolved here, where
        torch.distributed is set up, for the DataLoader workers."""
        self._resolved = self.world
        super().begin_epoch()

    # -- iteration ------------------------------------------------------------------------

    def prepare(self, sample: dict[str, Any]) -> Any:
        """One stored sample as iteration yields it: ``decode``, then ``transform``."""
        if self._decode is not None:
            sample = self._decode(sample)
        if self.transform is not None:
            sample = self.transform(sample)
        return sample

    def _worker_world(self) -> World:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        return self.world if info is None else self.world.with_worker(info.id, info.num_workers)

    def iter_batches(
        self, batch_size: int, world: World | None = None
    ) -> Iterator[tuple[list[Any], dict[str, int]]]:
        """Yield this reader's batches as ``(samples, counters)`` from the current position
        (``counters``: ``positions`` covered, ``skipped`` records, cache deltas). ``world``
        (rank and DataLoader worker) defaults to the detected one."""
        world = world or self._worker_world()
        plan, deal = self.plan(), self.deal
        if deal is None:
            start, stop = plan.resume_range(world.rank, self.consumed)
        else:
            start, stop = self.consumed, deal.per_rank
        reader = _Reader(self)
        try:
            for begin, end in worker_batches(
                start, stop, batch_size, world.worker_id, world.num_workers
            ):
                if deal is None:
                    positions = np.arange(begin, end)
                else:
                    positions = deal.positions(world.rank, begin, end)
                yield reader.batch(plan, positions)
        finally:
            reader.close()

    def __iter__(self) -> Iterator[Any]:
        in_process = not in_worker()
        if in_process:
            self.begin_epoch()
        for samples, counters in self.iter_batches(1):
            if in_process:
                self.consumed += counters["positions"]
                self.skipped += counters["skipped"]
            yield from samples

    def loader(
        self,
        batch_size: int,
        *,
        num_workers: int = 0,
        prefetch: int = 2,
        pin_memory: bool = True,
        device: Any = None,
    ) -> Loader:
        """Batches of torch tensors, prepared ahead of the training loop (see :class:`Loader`)."""
        from gpuspark.data.load.loader import Loader  # loader.py imports this module

        return Loader(
            self,
            batch_size,
            num_workers=num_workers,
            prefetch=prefetch,
            pin_memory=pin_memory,
            device=device,
        )


def select_shards(manifest: fmt.Manifest, split: str | None, root: str) -> list[fmt.ShardInfo]:
    """The shards of ``split`` (all shards for None); an unknown split raises
    :class:`LoaderError` naming the dataset's splits."""
    if split is None:
        return list(manifest.shards)
    check_split_known(split, manifest.splits, root)
    by_path = {s.path: s for s in manifest.shards}
    return [by_path[p] for p in manifest.splits[split]]


class _Reader:
    """Reads and decodes the records of one worker."""

    def __init__(self, ds: ShardDataset) -> None:
        self.ds = ds
        self.cache = (
            ShardCache(ds.cache_dir, ds.cache_limit_bytes) if ds.cache_dir is not None else None
        )
        self.shards = OpenShards(ds.root, ds.shards, self.cache, ds.shuffle_window)
        self.codec = ds.manifest.compression

    def sample(self, shard: int, record: int) -> Any:
        payload = self.shards.payload(shard, record, self.ds.verify_crc)
        payload = fmt.decompress(payload, self.codec)
        sample = decode_example_views(payload, self.ds.manifest.schema)  # arrays: no copy
        return self.ds.prepare(sample)

    def batch(self, plan: EpochOrder, positions: np.ndarray) -> tuple[list[Any], dict[str, int]]:
        """The samples at epoch ``positions`` and the counters of reading them."""
        before = self.cache.stats.as_dict() if self.cache else {}
        shards, records = plan.lookup(positions)
        samples, skipped = [], 0
        for s, r in zip(shards.tolist(), records.tolist(), strict=True):
            try:
                samples.append(self.sample(s, r))
            except fmt.CorruptRecordError:
                if self.ds.on_error == "raise":
                    raise
                skipped += 1
        counters = {"positions": int(positions.size), "skipped": skipped}
        if self.cache:
            after = self.cache.stats.as_dict()
            counters.update({k: after[k] - before[k] for k in after})
        return samples, counters

    def close(self) -> None:
        self.shards.close()
