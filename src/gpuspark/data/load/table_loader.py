"""The prefetching :class:`TableLoader` of a :class:`~gpuspark.data.load.table.TableDataset`:
batches read, decoded and transformed by one background thread ahead of the training loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuspark.data.load.base import LoaderBase
from gpuspark.data.load.prefetch import map_tensors, mover, thread_ahead
from gpuspark.data.load.table import TableDataset

__all__ = ["TableLoader"]


class TableLoader(LoaderBase[TableDataset]):
    """Iterates a :class:`TableDataset`'s batches while the next ones are being prepared.

    One background thread reads, decodes and transforms ``prefetch`` batches ahead.
    ``num_workers`` is accepted (the signature of :meth:`ShardDataset.loader`) and ignored:
    decoding is vectorised numpy, so one thread keeps up. With ``device``, torch tensors in a
    batch are moved there (pinned first on CUDA when ``pin_memory``). ``wait_times`` holds the
    seconds the training loop waited for each batch; :meth:`stats` sums them up (samples are
    rows).
    """

    def _source(self) -> Iterator[tuple[Any, int]]:
        source = self.dataset.stream(self.batch_size)
        prepare = _pinned if self.pin_memory else None
        return thread_ahead(source, self.prefetch, prepare, name="gpuspark-table-prefetch")

    def _accept(self, item: tuple[Any, int]) -> tuple[Any, int]:
        batch, rows = item
        self.dataset.consumed += rows
        return batch, rows

    def _deliver(self, batch: Any) -> Any:
        return batch if self.device is None else map_tensors(batch, mover(self.device))


def _pinned(item: tuple[Any, int]) -> tuple[Any, int]:
    batch, rows = item
    return map_tensors(batch, lambda t: t.pin_memory()), rows
