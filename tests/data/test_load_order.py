"""The epoch plan (gpuspark.data.load.order): split, shuffle quality, resume positions."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from gpuspark.data.load import EpochOrder, LoaderError, worker_batches
from gpuspark.data.load import order as plan_module


def test_worker_batches_cover_range_once() -> None:
    got = sorted(r for w in range(3) for r in worker_batches(5, 27, 4, w, 3))
    assert got == [(b, min(b + 4, 27)) for b in range(5, 27, 4)]


def _spearman_vs_storage(plan: EpochOrder) -> tuple[float, float]:
    shard, record = plan.lookup(np.arange(plan.total))
    starts = np.concatenate(([0], np.cumsum(plan.counts)))
    stored = starts[shard] + record
    assert sorted(stored.tolist()) == list(range(plan.total))  # a permutation
    rho = float(np.corrcoef(np.arange(plan.total), stored)[0, 1])  # ranks = values here
    neighbours = float(np.mean(np.abs(np.diff(stored)) == 1))
    return rho, neighbours


def test_shuffle_quality() -> None:
    # A typical layout: 64 shards of 100 records, a window of 2,048.
    rhos, neighbours = zip(
        *(_spearman_vs_storage(EpochOrder((100,) * 64, seed=s, window=2048)) for s in range(10)),
        strict=True,
    )
    assert np.mean(np.abs(rhos)) < 0.2  # measured 0.11
    assert abs(np.mean(rhos)) < 0.15
    assert max(neighbours) < 0.01  # consecutive samples are almost never storage neighbours
    # One shard, window of a few thousand covering it: correlation ~ 0.
    rho, _ = _spearman_vs_storage(EpochOrder((4000,), seed=1, window=4096))
    assert abs(rho) < 0.1
    # Without shuffling the output is the storage order.
    assert _spearman_vs_storage(EpochOrder((100,) * 64, shuffle=False)) == (
        pytest.approx(1.0),
        pytest.approx(1.0, abs=0.001),
    )


def test_rank_ranges_tile_the_padded_epoch() -> None:
    plan = EpochOrder((7, 5, 9), world_size=4, drop_last=False, seed=3)
    assert plan.per_rank == 6  # ceil(21 / 4)
    ranges = [plan.rank_range(r) for r in range(4)]
    assert ranges == [(0, 6), (6, 12), (12, 18), (18, 24)]
    shard, record = plan.lookup(np.arange(24))
    firsts = plan.lookup(np.arange(3))
    assert (shard[21:].tolist(), record[21:].tolist()) == (firsts[0].tolist(), firsts[1].tolist())


def test_resume_range_skips_what_the_rank_delivered() -> None:
    plan = EpochOrder((10, 10, 10), world_size=3)
    assert plan.resume_range(1, 0) == plan.rank_range(1) == (10, 20)
    assert plan.resume_range(1, 4) == (14, 20)
    assert plan.resume_range(2, 10) == (30, 30)  # epoch done: nothing left


def test_plans_are_seeded() -> None:
    a, b = (EpochOrder((50,) * 4, seed=7, epoch=2, window=16) for _ in range(2))
    positions = np.arange(200)
    assert all(
        (x == y).all() for x, y in zip(a.lookup(positions), b.lookup(positions), strict=True)
    )
    other = EpochOrder((50,) * 4, seed=7, epoch=3, window=16)
    assert not (other.lookup(positions)[1] == a.lookup(positions)[1]).all()


def test_bad_plans_are_refused() -> None:
    with pytest.raises(LoaderError, match="no records"):
        EpochOrder((0, 0))
    with pytest.raises(LoaderError, match="fewer than the 4 ranks"):
        EpochOrder((3,), world_size=4)
    with pytest.raises(ValueError, match="shuffle_window must be >= 1"):
        EpochOrder((3,), window=0)


def test_plan_imports_no_torch() -> None:
    """The plan is pure arithmetic: numpy, the standard library and gpuspark's errors."""
    tree = ast.parse(Path(plan_module.__file__).read_text())
    imported = {
        name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for name in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
    }
    assert imported <= {"__future__", "collections", "dataclasses", "numpy", "gpuspark"}
