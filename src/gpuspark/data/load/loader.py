"""The prefetching :class:`Loader`: collated torch batches of a :class:`ShardDataset`,
prepared ahead of the training loop by a background thread or DataLoader workers, and
copied to a CUDA device on a side stream one batch ahead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from gpuspark.data import format as fmt
from gpuspark.data.load.base import LoaderBase
from gpuspark.data.load.dataset import ShardDataset, iterable_base
from gpuspark.data.load.order import LoaderError
from gpuspark.data.load.prefetch import map_tensors, mover, thread_ahead
from gpuspark.data.load.world import in_worker

__all__ = ["Loader", "collate"]

_Item = tuple[str, Any, dict[str, int]]
"""What flows from the readers to the training loop: ``(kind, batch, counters)`` with kind
``"batch"``, ``"empty"`` (every record skipped) or ``"error"`` (a corrupt record's location).
"""


def collate(samples: list[Any]) -> Any:
    """Stack samples into torch tensors: arrays -> one stacked tensor (one copy), numbers ->
    a 1-D tensor, strings/bytes -> a list; dicts, tuples and lists recursively."""
    import torch

    first = samples[0]
    if isinstance(first, dict):
        return {k: collate([s[k] for s in samples]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(collate(list(col)) for col in zip(*samples, strict=True))
    if isinstance(first, np.ndarray):
        batch = _batch_tensor((len(samples), *first.shape), first.dtype)
        out = batch.numpy()
        for i, s in enumerate(samples):
            out[i] = s
        return batch
    if isinstance(first, torch.Tensor):
        return torch.stack(samples)
    if isinstance(first, (bool, int, float, np.number, np.bool_)):
        return torch.as_tensor(np.asarray(samples))
    return list(samples)


def _batch_tensor(shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """An empty batch tensor; in a DataLoader worker it lives in shared memory from the start,
    so handing it to the main process does not copy it again (as torch's default_collate)."""
    import torch

    if not in_worker():  # numpy's allocator: large arrays get transparent huge pages
        return torch.from_numpy(np.empty(shape, dtype=dtype))
    tdtype = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    numel = int(np.prod(shape))
    storage = torch.empty(0, dtype=tdtype)._typed_storage()._new_shared(numel)
    return torch.empty(0, dtype=tdtype).set_(storage).view(shape)


class _BatchSource(iterable_base()):  # type: ignore[misc]
    """What DataLoader workers iterate: whole collated batches of the dataset."""

    def __init__(self, ds: ShardDataset, batch_size: int) -> None:
        super().__init__()
        self.ds, self.batch_size = ds, batch_size

    def __iter__(self) -> Iterator[_Item]:
        try:
            for samples, counters in self.ds.iter_batches(self.batch_size):
                yield _finish(samples, counters)
        except fmt.CorruptRecordError as exc:  # DataLoader cannot re-raise it as itself
            yield "error", (exc.path, exc.record, exc.offset, exc.what), {}


def _finish(samples: list[Any], counters: dict[str, int]) -> _Item:
    if not samples:
        return "empty", None, counters
    return "batch", collate(samples), counters


class Loader(LoaderBase[ShardDataset]):
    """Iterates batches of a :class:`ShardDataset` while the next ones are being prepared.

    ``num_workers=0``: one background thread reads and decodes ``prefetch`` batches ahead
    (decoders and copies release the GIL). ``num_workers>0``: DataLoader worker processes,
    ``prefetch`` batches each. With a CUDA ``device`` batches are pinned (``pin_memory``)
    and copied on a side stream with ``non_blocking=True`` one batch ahead; other devices get
    a plain ``.to(device)``. ``wait_times`` holds, per batch, the seconds the training loop
    waited for it; :meth:`stats` sums them up with the cache and corruption counters.
    """

    def __init__(
        self,
        dataset: ShardDataset,
        batch_size: int,
        *,
        num_workers: int = 0,
        prefetch: int = 2,
        pin_memory: bool = True,
        device: Any = None,
    ) -> None:
        super().__init__(
            dataset,
            batch_size,
            num_workers=num_workers,
            prefetch=prefetch,
            pin_memory=pin_memory,
            device=device,
        )
        self._counts["skipped_corrupt"] = 0
        self._cache: dict[str, int] = {}

    def stats(self) -> dict[str, float | int]:
        """Totals since this loader was made: batches, samples, wait seconds, cache hits /
        misses / bytes fetched, corrupt records skipped."""
        out = super().stats()
        for key in ("cache_hits", "cache_misses", "cache_bytes_fetched", "cache_evictions"):
            out[key] = self._cache.get(key, 0)
        return out

    def _source(self) -> Iterator[_Item]:
        source = self._prepared()
        if self.cuda:
            return _cuda_ahead(source, self.device)
        if self.device is not None:
            move = mover(self.device)
            return ((k, map_tensors(b, move) if k == "batch" else b, c) for k, b, c in source)
        return source

    def _accept(self, item: _Item) -> tuple[Any, int]:
        kind, batch, counters = item
        if kind == "error":
            raise fmt.CorruptRecordError(*batch)
        self._account(counters)
        if kind == "empty":
            raise LoaderError(
                "every record of a batch is corrupt (on_error='skip' has nothing to "
                "deliver for this step)",
                remedy="check the dataset with `gpuspark shards verify`",
            )
        return batch, _batch_len(batch)

    def _account(self, counters: dict[str, int]) -> None:
        self.dataset.consumed += counters.get("positions", 0)
        self.dataset.skipped += counters.get("skipped", 0)
        self._counts["skipped_corrupt"] += counters.get("skipped", 0)
        for key, value in counters.items():
            if key.startswith("cache_"):
                self._cache[key] = self._cache.get(key, 0) + value

    def _prepared(self) -> Iterator[_Item]:
        source = _BatchSource(self.dataset, self.batch_size)
        if self.num_workers == 0:
            return thread_ahead(iter(source), self.prefetch, _pinned if self.pin_memory else None)
        from torch.utils.data import DataLoader

        loader: Any = DataLoader(
            source,
            batch_size=None,
            num_workers=self.num_workers,
            prefetch_factor=self.prefetch,
            pin_memory=self.pin_memory,
            persistent_workers=False,  # each epoch's workers get the current position
        )
        return iter(loader)


def _batch_len(batch: Any) -> int:
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    elif isinstance(batch, (tuple, list)) and batch and not isinstance(batch[0], (str, bytes)):
        batch = batch[0]
    return len(batch)


def _pin(tensor: Any) -> Any:
    return tensor.pin_memory()


def _pinned(item: _Item) -> _Item:
    kind, batch, counters = item
    return (kind, map_tensors(batch, _pin), counters) if kind == "batch" else item


def _cuda_ahead(source: Iterator[_Item], device: Any) -> Iterator[_Item]:
    """Copy each batch to ``device`` on a side stream, one batch ahead of the consumer; the
    consumer's stream waits for the copy and the tensors are recorded on it (so the caching
    allocator does not reuse their memory early)."""
    import torch

    stream = torch.cuda.Stream(device=device)

    def ahead(item: _Item) -> _Item:
        kind, batch, counters = item
        if kind == "batch":
            with torch.cuda.stream(stream):
                batch = map_tensors(batch, mover(device))
        return kind, batch, counters

    pending = None
    for item in source:
        nxt = ahead(item)
        if pending is not None:
            yield _claim(pending, stream)
        pending = nxt
    if pending is not None:
        yield _claim(pending, stream)


def _claim(item: _Item, stream: Any) -> _Item:
    import torch

    current = torch.cuda.current_stream(stream.device)
    current.wait_stream(stream)
    kind, batch, counters = item

    def record(t: Any) -> None:
        if isinstance(t, torch.Tensor):
            t.record_stream(current)
        elif isinstance(t, dict):
            for v in t.values():
                record(v)
        elif isinstance(t, (tuple, list)):
            for v in t:
                record(v)

    record(batch)
    return kind, batch, counters
