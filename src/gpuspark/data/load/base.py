"""What :class:`~gpuspark.data.load.loader.Loader` and
:class:`~gpuspark.data.load.table_loader.TableLoader` share: their options, length, resume
state, wait times and counters, and the loop that hands batches to the training loop.

A loader subclass says how its batches are made ahead (:meth:`LoaderBase._source`) and what
one prepared item delivers (:meth:`LoaderBase._accept`); the base times each wait, counts
batches and samples, and closes the source when iteration stops.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, Generic, Protocol, TypeVar

from gpuspark.data.load.prefetch import check_options, loader_device

__all__ = ["LoaderBase", "LoaderDataset"]


class LoaderDataset(Protocol):
    """What a loader needs of its dataset: its position and its resume state."""

    consumed: int

    @property
    def samples_per_rank(self) -> int: ...

    def begin_epoch(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


D = TypeVar("D", bound=LoaderDataset)


class LoaderBase(ABC, Generic[D]):
    """Batches of ``dataset`` prepared ahead of the training loop (see the subclasses).

    ``wait_times`` holds, per batch, the seconds the training loop waited for it;
    :meth:`stats` sums them up with the batch and sample counts.
    """

    def __init__(
        self,
        dataset: D,
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
        self.cuda = self.device is not None and self.device.type == "cuda"
        self.pin_memory = pin_memory and self.cuda
        self.wait_times: list[float] = []
        self._counts = {"batches": 0, "samples": 0}

    def __len__(self) -> int:
        """Batches left in the current epoch of this rank."""
        ds = self.dataset
        left = ds.samples_per_rank - ds.consumed
        left = ds.samples_per_rank if left <= 0 else left
        return -(-left // self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        """The dataset's resume state (see its ``state_dict``)."""
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the dataset's position."""
        self.dataset.load_state_dict(state)

    def stats(self) -> dict[str, float | int]:
        """Totals since this loader was made: batches, samples, wait seconds."""
        out: dict[str, float | int] = dict(self._counts)
        out["wait_s"] = float(sum(self.wait_times))
        return out

    def __iter__(self) -> Iterator[Any]:
        self.dataset.begin_epoch()
        return self._timed(self._source())

    @abstractmethod
    def _source(self) -> Iterator[Any]:
        """The prepared items of the rest of the epoch, made ahead of the consumer."""

    @abstractmethod
    def _accept(self, item: Any) -> tuple[Any, int]:
        """``(batch, samples)`` of one prepared item, its counters taken; raises when the
        item is no batch."""

    def _deliver(self, batch: Any) -> Any:
        """The batch as the training loop gets it (after its wait is timed)."""
        return batch

    def _timed(self, source: Iterator[Any]) -> Iterator[Any]:
        try:
            t0 = time.perf_counter()
            for item in source:
                batch, samples = self._accept(item)
                self.wait_times.append(time.perf_counter() - t0)
                self._counts["batches"] += 1
                self._counts["samples"] += samples
                yield self._deliver(batch)
                t0 = time.perf_counter()
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()
