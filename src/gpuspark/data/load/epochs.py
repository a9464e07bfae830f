"""What :class:`~gpuspark.data.load.dataset.ShardDataset` and
:class:`~gpuspark.data.load.table.TableDataset` share: the epoch and the position in it.

A dataset's position is ``(epoch, seed, consumed)``: ``consumed`` samples (or rows) of this
rank's stream of the epoch were delivered. :meth:`EpochPosition.set_epoch` selects an epoch,
:meth:`EpochPosition.begin_epoch` rolls a finished one over when iteration starts, and
:meth:`EpochPosition.state_dict` / :meth:`EpochPosition.load_state_dict` save and restore the
position, refusing a state of another world size (inside an epoch) or of another dataset.

A dataset says what its world is, how many samples each rank reads per epoch, what
``consumed`` counts (:attr:`EpochPosition.unit`), and the size its state refers to
(:meth:`EpochPosition.extent_state`, checked on load under :attr:`EpochPosition.extent_key`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from gpuspark.data.load.world import World
from gpuspark.errors import LoaderError

__all__ = ["EpochPosition"]


class EpochPosition:
    """The epoch, the position in it and resume, for a dataset read exactly across ranks.

    A subclass sets ``root`` and ``seed`` and calls :meth:`start_position` in its
    ``__init__``, and gives :attr:`world`, :attr:`samples_per_rank` and
    :meth:`extent_state`.
    """

    unit: ClassVar[str] = "sample"
    """What ``consumed`` counts, as errors name it."""
    extent_key: ClassVar[str] = "total_records"
    """The key of :meth:`extent_state` a loaded state must agree with."""
    extent_text: ClassVar[str] = "a dataset of {} records"
    """How errors name the size a state refers to."""

    root: str
    seed: int
    epoch: int
    consumed: int

    def start_position(self) -> None:
        """Epoch 0, nothing consumed."""
        self.epoch = 0
        self.consumed = 0

    @property
    def world(self) -> World:
        """This process's world (DataLoader workers excluded)."""
        raise NotImplementedError

    @property
    def samples_per_rank(self) -> int:
        """Samples (or rows) each rank reads per epoch (equal on every rank)."""
        raise NotImplementedError

    def extent_state(self) -> dict[str, int]:
        """The sizes the position refers to, saved in :meth:`state_dict`; the one under
        :attr:`extent_key` is checked on load."""
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (its own order). Calling it with the current epoch keeps the
        position, so resumed code can call it unconditionally at the top of each epoch."""
        if epoch != self.epoch:
            self.epoch, self.consumed = epoch, 0

    def begin_epoch(self) -> None:
        """Called when iteration starts: a finished epoch rolls over to the next one."""
        if self.consumed >= self.samples_per_rank:
            self.epoch, self.consumed = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        """Position in the epoch: ``epoch``, ``seed``, ``consumed`` (of this rank's stream,
        already delivered), and the world size and sizes it refers to."""
        return {
            "epoch": self.epoch,
            "seed": self.seed,
            "consumed": self.consumed,
            "world_size": self.world.world_size,
            **self.extent_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``; the worker count may differ, the world size only at an
        epoch boundary (``consumed`` 0)."""
        world_size = int(state.get("world_size", self.world.world_size))
        consumed = int(state["consumed"])
        if consumed and world_size != self.world.world_size:
            raise LoaderError(
                f"loader state was saved with world size {world_size} at {self.unit} "
                f"{consumed} of the epoch; this run has world size {self.world.world_size}",
                remedy="resume with the same number of ranks, or from an epoch boundary",
            )
        saved = state.get(self.extent_key)
        if saved is not None and int(saved) != (have := self.extent_state()[self.extent_key]):
            raise LoaderError(
                f"loader state refers to {self.extent_text.format(saved)}; {self.root} has {have}",
                remedy="resume on the same dataset (and split)",
            )
        self.seed, self.epoch, self.consumed = int(state["seed"]), int(state["epoch"]), consumed
