"""Elastic resume inside an epoch: a loader state saved by W ranks, loaded by W' ranks, deals
the rest of the epoch again (:mod:`gpuspark.data.load.redeal`).

For :class:`ShardDataset` and :class:`TableDataset`, real shard files, shuffle on: the old
world reads ``consumed`` samples per rank, rank 0's state is loaded by every rank of the new
world, and the new ranks read to the end of the epoch. Together the two worlds read exactly
what the old world would have read in the whole epoch: no sample twice, none skipped (with
``drop_last`` at most W' - 1 of the rest are left out, as at the end of any epoch; without it
the rest is padded by repeating its first samples), every new rank the same number. A second
change inside the same epoch (3 -> 2 -> 1) composes, and the state stays small (runs, not
sample lists)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_load import write_ids  # tests/data is on sys.path
from test_table_dataset import ID, X, id_table, write_table_ds

from gpuspark.data.load import LoaderError, ShardDataset, TableDataset, World
from gpuspark.data.load.redeal import Deal, Pool


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ids(tmp_path_factory.mktemp("redeal") / "ids", 97)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("redeal-table")
    return write_table_ds(root / "ids", [ID, X], {None: id_table(1000)}, block_rows=16,
                          shard_bytes=2500)  # fmt: skip


# -- the pool arithmetic ----------------------------------------------------------------------


def test_pool_runs_hold_the_positions_they_were_made_of() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        q = rng.permutation(200)[: rng.integers(1, 200)]
        q[: len(q) // 2] = np.sort(q[: len(q) // 2])  # some long runs, some scattered
        pool = Pool.of(q)
        assert pool.size == q.size
        assert pool.positions(0, pool.size).tolist() == q.tolist()
        a, b = sorted(rng.integers(0, q.size + 1, 2).tolist())
        assert pool.take(a, b).positions(0, b - a).tolist() == q[a:b].tolist()
        assert pool.positions(a, b).tolist() == q[a:b].tolist()
    joined = Pool.join([Pool.whole(5), Pool.of(np.arange(5, 9)), Pool.of(np.array([20, 3]))])
    assert (joined.starts.tolist(), joined.lengths.tolist()) == ([0, 20, 3], [9, 1, 1])


@pytest.mark.parametrize("drop_last", [True, False])
def test_a_deal_splits_its_pool_exactly(drop_last: bool) -> None:
    pool = Pool.of(np.array([4, 5, 6, 10, 11, 30, 31, 32, 33, 2]))
    deal = Deal(pool, 3, drop_last)
    ranks = [deal.positions(r, 0, deal.per_rank).tolist() for r in range(3)]
    assert deal.per_rank == (3 if drop_last else 4)
    flat = [p for r in ranks for p in r]
    if drop_last:
        assert flat == pool.positions(0, 9).tolist()  # one of 10 left out
    else:
        assert flat == [*pool.positions(0, 10).tolist(), 4, 5]  # padded from the start
    rest = deal.rest(1)  # each rank read its first position; padding is not a rest
    want = [5, 6, 11, 30, 32, 33] if drop_last else [5, 6, 10, 30, 31, 32, 2]
    assert rest.positions(0, rest.size).tolist() == want
    assert Deal.from_state(deal.state()).state() == deal.state()


# -- the datasets -----------------------------------------------------------------------------


def _read_shards(ds: ShardDataset, limit: int | None = None) -> list[int]:
    out: list[int] = []
    it = iter(ds)
    for sample in it:
        out.append(int(sample["idx"]))
        if limit is not None and len(out) == limit:
            break
    return out


def _read_table(ds: TableDataset, limit: int | None = None) -> list[int]:
    out: list[int] = []
    for batch in ds.iter_batches(5 if limit is None else 1):
        out.extend(int(i) for i in batch["id"])
        if limit is not None and len(out) >= limit:
            break
    return out


_KIND: dict[str, Any] = {
    "shards": (lambda root, w, **kw: ShardDataset(root, world=w, seed=5, **kw), _read_shards),
    "table": (
        lambda root, w, **kw: TableDataset(root, world=w, seed=5, shuffle_rows=40, **kw),
        _read_table,
    ),
}


def _world_change(
    root: Path, kind: str, sizes: list[int], consumed: list[int], drop_last: bool
) -> tuple[list[int], list[list[int]], list[dict[str, Any]], Any]:
    """Epoch 0 read by ``sizes[0]`` ranks for ``consumed[0]`` samples each, then by
    ``sizes[1]`` ranks (state of rank 0) for ``consumed[1]`` (None: to the end), and so on.
    What all worlds read before the last, the last world's streams, the states, the
    last world's rank 0 dataset."""
    make, read = _KIND[kind]
    before: list[int] = []
    state: dict[str, Any] | None = None
    states = []
    for i, (size, limit) in enumerate(zip(sizes, consumed, strict=True)):
        streams, first = [], None
        for rank in range(size):
            ds = make(root, World(rank, size), drop_last=drop_last)
            if state is not None:
                ds.load_state_dict(state)
            streams.append(read(ds, limit))
            first = ds if rank == 0 else first
        if i == len(sizes) - 1:
            return before, streams, states, first
        state = first.state_dict()
        assert state["consumed"] == limit and state["epoch"] == 0
        states.append(state)
        before += [s for stream in streams for s in stream]
    raise AssertionError("unreachable")


def _whole_epoch(root: Path, kind: str, size: int, drop_last: bool) -> list[int]:
    make, read = _KIND[kind]
    return [s for r in range(size) for s in read(make(root, World(r, size), drop_last=drop_last))]


@pytest.mark.parametrize("kind", ["shards", "table"])
@pytest.mark.parametrize("sizes", [[3, 2], [2, 3], [4, 1], [3, 2, 1]])
def test_the_rest_of_the_epoch_is_read_once_by_the_new_world(
    shards: Path, table: Path, kind: str, sizes: list[int]
) -> None:
    root = shards if kind == "shards" else table
    consumed: list[int | None] = [6, 4, None][: len(sizes)]
    consumed[-1] = None
    before, after, states, last = _world_change(root, kind, sizes, consumed, drop_last=True)
    new = sizes[-1]
    assert len({len(s) for s in after}) == 1, "every new rank reads the same number"
    read = before + [s for stream in after for s in stream]
    counts = Counter(read)
    assert max(counts.values()) == 1, "a sample read twice"
    whole = set(_whole_epoch(root, kind, sizes[0], drop_last=True))
    missed = whole - set(read)
    assert set(read) <= whole and len(missed) == _left_out(len(whole), sizes, consumed), missed
    assert [c["to"] for c in last.world_changes] == [new]
    assert last.samples_per_rank == len(after[0]) and last.consumed == len(after[0])
    for state in states[1:]:  # a deal in effect: its runs, not every position
        assert len(state["deal"]["starts"]) < 60, state["deal"]


def _left_out(whole: int, sizes: list[int], consumed: list[int | None]) -> int:
    """Samples a ``drop_last`` deal leaves out: at each change, the rest modulo the new
    world size (as at the end of any epoch)."""
    rest, left_out = whole, 0
    for i, (size, limit) in enumerate(zip(sizes, consumed, strict=True)):
        if i:
            left_out += rest % size
            rest -= rest % size
        rest -= size * limit if limit is not None else rest
    return left_out


@pytest.mark.parametrize("kind", ["shards", "table"])
def test_without_drop_last_the_rest_is_padded_and_nothing_is_missed(
    shards: Path, table: Path, kind: str
) -> None:
    root = shards if kind == "shards" else table
    before, after, _, _ = _world_change(root, kind, [3, 2], [5, None], drop_last=False)
    read = before + [s for stream in after for s in stream]
    whole = set(_whole_epoch(root, kind, 3, drop_last=False))
    assert set(read) == whole
    assert len({len(s) for s in after}) == 1
    twice = [s for s, n in Counter(read).items() if n > 1]
    assert len(twice) <= 2 + 1, twice  # the rest's padding, plus the old world's own


@pytest.mark.parametrize("kind", ["shards", "table"])
def test_after_the_changed_epoch_the_new_world_splits_whole_epochs(
    shards: Path, table: Path, kind: str
) -> None:
    root = shards if kind == "shards" else table
    make, read = _KIND[kind]
    _, _, states, _ = _world_change(root, kind, [3, 2], [6, 1], drop_last=True)
    ds = make(root, World(0, 2), drop_last=True)
    ds.load_state_dict({**states[0]})
    read(ds)  # the rest of epoch 0
    nxt = read(ds)  # epoch 1: the plain split of a 2-rank world
    assert ds.epoch == 1 and ds.deal is None
    assert nxt == read(_epoch(make, root, 1))


def _epoch(make: Any, root: Path, epoch: int) -> Any:
    ds = make(root, World(0, 2), drop_last=True)
    ds.set_epoch(epoch)
    return ds


def test_a_dataset_that_cannot_deal_again_still_refuses(shards: Path) -> None:
    from gpuspark.data.load.epochs import EpochPosition

    class Plain(ShardDataset):
        redeals = False

    state = {**ShardDataset(shards, world=World(0, 2)).state_dict(), "consumed": 4}
    with pytest.raises(LoaderError, match="world size 2 at sample 4"):
        Plain(shards, world=World(0, 3)).load_state_dict(state)
    assert EpochPosition.redeals is False
