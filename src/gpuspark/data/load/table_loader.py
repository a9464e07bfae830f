"""The prefetching :class:`TableLoader` of a :class:`~gpuspark.data.load.table.TableDataset`:
batches read, decoded and transformed by one background thread ahead of the training loop.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from gpuspark.data.load.prefetch import (
    check_options,
    loader_device,
    map_tensors,
    mover,
    thread_ahead,
)
from gpuspark.data.load.table import TableDataset

__all__ = ["TableLoader"]


class TableLoader:
    """Iterates a :class:`TableDataset`'s batches while the next ones are being prepared.

    One background thread reads, decodes and transforms ``prefetch`` batches ahead.
    ``num_workers`` is accepted (the signature of :meth:`ShardDataset.loader`) and ignored:
    decoding is vectorised numpy, so one thread keeps up. With ``device``, torch tensors in a
    batch are moved there (pinned first on CUDA when ``pin_memory``). ``wait_times`` holds the
    seconds the training loop waited for each batch; :meth:`stats` sums them up.
    """

    def __init__(
        self,
        dataset: TableDataset,
        batch_size: int,
        *,
        num_workers: int = 0,
        prefetch: int = 2,
        pin_memory: bool = True,
        device: Any = None,
    ) -> None:
        check_options(batch_size, num_workers, prefetch)
        self.dataset = dataset
        self.batch_size, self.num_workers, self.prefetch = batch_size, num_workers, prefetch
        self.device = loader_device(device)
        self.pin_memory = pin_memory and self.device is not None and self.device.type == "cuda"
        self.wait_times: list[float] = []
        self._counts = {"batches": 0, "samples": 0}

    def __len__(self) -> int:
        """Batches left in the current epoch of this rank."""
        ds = self.dataset
        left = ds.samples_per_rank - ds.consumed
        left = ds.samples_per_rank if left <= 0 else left
        return -(-left // self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        """The dataset's resume state (see :meth:`TableDataset.state_dict`)."""
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the dataset's position."""
        self.dataset.load_state_dict(state)

    def stats(self) -> dict[str, float | int]:
        """Totals since this loader was made: batches, samples (rows), wait seconds."""
        out: dict[str, float | int] = dict(self._counts)
        out["wait_s"] = float(sum(self.wait_times))
        return out

    def __iter__(self) -> Iterator[Any]:
        self.dataset.begin_epoch()
        source = self.dataset.stream(self.batch_size)
        prepare = _pinned if self.pin_memory else None
        return self._deliver(
            thread_ahead(source, self.prefetch, prepare, name="gpuspark-table-prefetch")
        )

    def _deliver(self, source: Iterator[tuple[Any, int]]) -> Iterator[Any]:
        try:
            t0 = time.perf_counter()
            for batch, rows in source:
                self.dataset.consumed += rows
                self.wait_times.append(time.perf_counter() - t0)
                self._counts["batches"] += 1
                self._counts["samples"] += rows
                yield batch if self.device is None else map_tensors(batch, mover(self.device))
                t0 = time.perf_counter()
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()


def _pinned(item: tuple[Any, int]) -> tuple[Any, int]:
    batch, rows = item
    return map_tensors(batch, lambda t: t.pin_memory()), rows
