"""The epoch and resume bookkeeping both datasets share (:mod:`gpuspark.data.load.epochs`), on
a toy dataset of fixed sizes (no files)."""

from __future__ import annotations

import pytest

from gpuspark.data.load import LoaderError, ShardDataset, TableDataset, World
from gpuspark.data.load.epochs import EpochPosition


class _Toy(EpochPosition):
    """``per_rank`` samples per rank and epoch of a dataset of ``total`` records."""

    def __init__(self, total: int, world: World, seed: int = 0) -> None:
        self.root, self.seed, self.total, self._world = "toy", seed, total, world
        self.start_position()

    @property
    def world(self) -> World:
        return self._world

    @property
    def samples_per_rank(self) -> int:
        return self.total // self._world.world_size

    def extent_state(self) -> dict[str, int]:
        return {"samples_per_rank": self.samples_per_rank, "total_records": self.total}


def test_both_datasets_share_the_base() -> None:
    assert issubclass(ShardDataset, EpochPosition) and issubclass(TableDataset, EpochPosition)
    assert (ShardDataset.unit, TableDataset.unit) == ("sample", "row")
    assert (ShardDataset.extent_key, TableDataset.extent_key) == ("total_records", "rows")


def test_set_epoch_keeps_the_position_of_the_current_epoch() -> None:
    ds = _Toy(10, World(0, 2))
    assert (ds.epoch, ds.consumed) == (0, 0)
    ds.consumed = 3
    ds.set_epoch(0)
    assert (ds.epoch, ds.consumed) == (0, 3)
    ds.set_epoch(2)
    assert (ds.epoch, ds.consumed) == (2, 0)


def test_begin_epoch_rolls_a_finished_epoch_over() -> None:
    ds = _Toy(10, World(0, 2))
    ds.consumed = 4
    ds.begin_epoch()
    assert (ds.epoch, ds.consumed) == (0, 4)
    ds.consumed = 5
    ds.begin_epoch()
    assert (ds.epoch, ds.consumed) == (1, 0)


def test_state_round_trip_and_its_checks() -> None:
    ds = _Toy(10, World(0, 2), seed=7)
    ds.set_epoch(3)
    ds.consumed = 2
    state = ds.state_dict()
    assert state == {
        "epoch": 3,
        "seed": 7,
        "consumed": 2,
        "world_size": 2,
        "samples_per_rank": 5,
        "total_records": 10,
    }
    again = _Toy(10, World(1, 2))
    again.load_state_dict(state)
    assert (again.epoch, again.seed, again.consumed) == (3, 7, 2)
    moved = r"world size 2 at sample 2 of the epoch; .* world size 3"
    with pytest.raises(LoaderError, match=moved):
        _Toy(12, World(0, 3)).load_state_dict(state)
    with pytest.raises(LoaderError, match="refers to a dataset of 10 records; toy has 12"):
        _Toy(12, World(0, 2)).load_state_dict(state)
    boundary = _Toy(12, World(0, 3))
    boundary.load_state_dict({**state, "consumed": 0, "total_records": None})
    assert (boundary.epoch, boundary.consumed) == (3, 0)  # an epoch boundary: any world
