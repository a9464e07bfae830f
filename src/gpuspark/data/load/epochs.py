"""What :class:`~gpuspark.data.load.dataset.ShardDataset` and
:class:`~gpuspark.data.load.table.TableDataset` share: the epoch and the position in it.

A dataset's position is ``(epoch, seed, consumed)``: ``consumed`` samples (or rows) of this
rank's stream of the epoch were delivered. :meth:`EpochPosition.set_epoch` selects an epoch,
:meth:`EpochPosition.begin_epoch` rolls a finished one over when iteration starts, and
:meth:`EpochPosition.state_dict` / :meth:`EpochPosition.load_state_dict` save and restore the
position, refusing a state of another dataset. A state of another world size inside an epoch
is dealt again (:mod:`gpuspark.data.load.redeal`) by a dataset that can (:attr:`redeals`):
this world reads exactly what the saved one had not; other datasets refuse it.

A dataset says what its world is, how many samples each rank reads per epoch, what
``consumed`` counts (:attr:`EpochPosition.unit`), and the size its state refers to
(:meth:`EpochPosition.extent_state`, checked on load under :attr:`EpochPosition.extent_key`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from gpuspark.data.load.redeal import Deal, Pool
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
    redeals: ClassVar[bool] = False
    """Whether a state saved by another world size inside an epoch is dealt again
    (:meth:`unread`), instead of refused."""

    root: str
    seed: int
    epoch: int
    consumed: int
    deal: Deal | None
    """The rest of the current epoch dealt to this world after a world change (``None``:
    the epoch's own split)."""
    world_changes: list[dict[str, int]]
    """The world changes this dataset dealt an epoch's rest for: ``epoch``, ``from`` and
    ``to`` world sizes, ``rest`` (the positions dealt again)."""
    drop_last: bool

    def start_position(self) -> None:
        """Epoch 0, nothing consumed, no world change yet."""
        self.epoch = 0
        self.consumed = 0
        self.deal = None
        self.world_changes = []

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
            self.epoch, self.consumed, self.deal = epoch, 0, None

    def begin_epoch(self) -> None:
        """Called when iteration starts: a finished epoch rolls over to the next one."""
        if self.consumed >= self.samples_per_rank:
            self.epoch, self.consumed, self.deal = self.epoch + 1, 0, None

    def unread(self, deal: Deal | None, world_size: int, consumed: int) -> Pool:
        """The epoch positions a world of ``world_size`` ranks reading ``deal`` (``None``:
        the epoch's own split) had not read when each rank had delivered ``consumed``;
        for datasets that :attr:`redeals`."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Position in the epoch: ``epoch``, ``seed``, ``consumed`` (of this rank's stream,
        already delivered), the world size and sizes it refers to, and the deal of the epoch's
        rest after a world change (``deal``, only then)."""
        state: dict[str, Any] = {
            "epoch": self.epoch,
            "seed": self.seed,
            "consumed": self.consumed,
            "world_size": self.world.world_size,
            **self.extent_state(),
        }
        if self.deal is not None:
            state["deal"] = self.deal.state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``; the worker count may differ, and the world size at an
        epoch boundary (``consumed`` 0), or anywhere for a dataset that :attr:`redeals`: the
        rest of the epoch is then dealt to this world (:attr:`world_changes` records it)."""
        world_size = int(state.get("world_size", self.world.world_size))
        consumed = int(state["consumed"])
        saved = Deal.from_state(state["deal"]) if state.get("deal") else None
        now = self.world.world_size
        moved = world_size != now and (consumed > 0 or saved is not None)
        if moved and not self.redeals:
            raise LoaderError(
                f"loader state was saved with world size {world_size} at {self.unit} "
                f"{consumed} of the epoch; this run has world size {now}",
                remedy="resume with the same number of ranks, or from an epoch boundary",
            )
        extent = state.get(self.extent_key)
        if extent is not None and int(extent) != (have := self.extent_state()[self.extent_key]):
            raise LoaderError(
                f"loader state refers to {self.extent_text.format(extent)}; {self.root} has {have}",
                remedy="resume on the same dataset (and split)",
            )
        self.seed, self.epoch = int(state["seed"]), int(state["epoch"])
        self.deal, self.consumed = (saved, consumed) if world_size == now else (None, 0)
        if moved:
            rest = self.unread(saved, world_size, consumed)
            generation = saved.generation + 1 if saved is not None else 1
            self.deal = Deal(rest, now, self.drop_last, generation)
            self.world_changes.append(
                {"epoch": self.epoch, "from": world_size, "to": now, "rest": rest.size}
            )
