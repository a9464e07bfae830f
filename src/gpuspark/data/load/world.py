"""Where this reader sits: rank, world size, local rank and DataLoader worker, as a value.

The split arithmetic in :mod:`gpuspark.data.load` takes a :class:`World` instead of asking
``torch.distributed`` itself, so every (world size x worker count) case can be tested in one
process by constructing values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

__all__ = ["World", "in_worker"]


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got: {raw!r}") from None


@dataclass(frozen=True)
class World:
    """One reader's place in a distributed job.

    ``rank``/``world_size`` are the torch.distributed process ranks; ``worker_id``/
    ``num_workers`` the DataLoader worker inside that process (0/1 without workers).
    """

    rank: int = 0
    """Global rank of this process, ``0 <= rank < world_size``."""
    world_size: int = 1
    """Number of training processes."""
    local_rank: int = 0
    """Rank of this process on its node (selects the GPU)."""
    worker_id: int = 0
    """DataLoader worker index inside this process, ``0 <= worker_id < num_workers``."""
    num_workers: int = 1
    """DataLoader workers of this process; 1 when the process reads itself."""

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got: {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got: {self.rank}")
        if self.num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got: {self.num_workers}")
        if not 0 <= self.worker_id < self.num_workers:
            raise ValueError(f"worker_id must be in [0, {self.num_workers}), got: {self.worker_id}")
        if self.local_rank < 0:
            raise ValueError(f"local_rank must be >= 0, got: {self.local_rank}")

    @property
    def is_leader(self) -> bool:
        """True for rank 0, worker 0."""
        return self.rank == 0 and self.worker_id == 0

    def with_worker(self, worker_id: int, num_workers: int) -> World:
        """This world seen from DataLoader worker ``worker_id`` of ``num_workers``."""
        return replace(self, worker_id=worker_id, num_workers=num_workers)

    @classmethod
    def detect(cls) -> World:
        """The current world: torch.distributed if initialised, else ``RANK``/``WORLD_SIZE``/
        ``LOCAL_RANK`` from the environment; worker from ``torch.utils.data.get_worker_info()``.
        """
        rank, world_size = _process_rank()
        local_rank = _env_int("LOCAL_RANK", 0)
        worker_id, num_workers = _worker()
        return cls(rank, world_size, local_rank, worker_id, num_workers)


def _process_rank() -> tuple[int, int]:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:  # torch missing: environment only
        pass
    return _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)


def _worker() -> tuple[int, int]:
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return 0, 1
    info = get_worker_info()
    if info is None:
        return 0, 1
    return info.id, info.num_workers


def in_worker() -> bool:
    """True inside a DataLoader worker process."""
    from torch.utils.data import get_worker_info

    return get_worker_info() is not None
