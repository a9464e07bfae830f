"""Reading gpuspark datasets for training: ``ShardDataset`` and its prefetching ``Loader``.

The public face of the loader side; the modules behind it, one job each:

- :mod:`~gpuspark.data.load.order`: the epoch order - shard order, window shuffle, the exact
  split across ranks and DataLoader workers, resume positions (pure arithmetic, no torch);
- :mod:`~gpuspark.data.load.world`: :class:`World`, this reader's rank and worker as a value;
- :mod:`~gpuspark.data.load.access`: open shards, memory-mapped records, remote reads;
- :mod:`~gpuspark.data.load.cache`: the node-local cache of remote shards;
- :mod:`~gpuspark.data.load.decode`: stored samples to model input (:class:`ImageDecode`);
- :mod:`~gpuspark.data.load.epochs`: what the datasets share - the epoch, the position in
  it, resume (``set_epoch``, ``begin_epoch``, ``state_dict``);
- :mod:`~gpuspark.data.load.dataset`: :class:`ShardDataset`, the ``IterableDataset``;
- :mod:`~gpuspark.data.load.base`: what the loaders share (options, length, resume, stats);
- :mod:`~gpuspark.data.load.loader`: :class:`Loader`, batches prepared ahead of the loop;
- :mod:`~gpuspark.data.load.table`: :class:`TableDataset`, batches of rows of table datasets
  (:mod:`gpuspark.data.format.table`), planned by :mod:`~gpuspark.data.load.table_order` and
  prefetched by :class:`TableLoader` (:mod:`~gpuspark.data.load.table_loader`).
"""

from __future__ import annotations

from gpuspark.data.load.cache import CacheError, CacheStats, ShardCache
from gpuspark.data.load.dataset import ShardDataset
from gpuspark.data.load.decode import (
    ImageDecode,
    decode_example_views,
    decode_image,
    make_decoder,
    resize_center_crop,
)
from gpuspark.data.load.loader import Loader, collate
from gpuspark.data.load.order import DEFAULT_SHUFFLE_WINDOW, EpochOrder, LoaderError, worker_batches
from gpuspark.data.load.table import TableDataset
from gpuspark.data.load.table_loader import TableLoader
from gpuspark.data.load.world import World

__all__ = [
    "DEFAULT_SHUFFLE_WINDOW",
    "CacheError",
    "CacheStats",
    "EpochOrder",
    "ImageDecode",
    "Loader",
    "LoaderError",
    "ShardCache",
    "ShardDataset",
    "TableDataset",
    "TableLoader",
    "World",
    "collate",
    "decode_example_views",
    "decode_image",
    "make_decoder",
    "resize_center_crop",
    "worker_batches",
]
