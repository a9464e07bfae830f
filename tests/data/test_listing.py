"""Source listing in tasks (gpuspark.data.sources.listing) and shard planning for prep jobs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuspark.data.prep import PrepError, deal_shards
from gpuspark.data.sources import listing
from gpuspark.data.sources.listing import deal, plan_units, walk_unit


def _tree(root: Path) -> set[str]:
    """A mixed layout: nested study/series dirs, a flat dir, a file at the top, a link."""
    files = []
    for s in range(6):
        for k in range(s + 1):
            files.append(root / f"study{s}" / f"series{k}" / f"im{k}.dcm")
    files += [root / "flat" / f"x{i:03d}" for i in range(40)]
    files += [root / "top.dcm", root / "deep" / "a" / "b" / "c" / "d" / "e" / "f" / "g.dcm"]
    for i, f in enumerate(files):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * (i + 1))
    (root / "empty").mkdir()
    os.symlink(root / "flat", root / "link-to-dir")  # not followed, as os.walk does
    return {str(f) for f in files}


def _listed(units: list[listing.Unit]) -> list[str]:
    return [path for u in units for path, _ in walk_unit(u)]


@pytest.mark.parametrize("want", [1, 4, 1000])
@pytest.mark.parametrize("budget", [0, 10, 100_000])
def test_units_cover_every_file_exactly_once(
    tmp_path: Path, want: int, budget: int, monkeypatch
) -> None:
    monkeypatch.setattr(listing, "LOCAL_BUDGET", budget)
    expected = _tree(tmp_path)
    got = _listed(plan_units(str(tmp_path), want))
    assert sorted(got) == sorted(expected)  # none missing, none twice


def test_small_local_tree_is_listed_to_the_files(tmp_path: Path) -> None:
    expected = _tree(tmp_path)
    units = plan_units(str(tmp_path), want=4)
    assert not any(is_dir for _, is_dir, _ in units[:-1])  # only the 7-level dir remains
    sizes = {p: n for p, _, n in units if p in expected}
    assert all(os.path.getsize(p) == n for p, n in sizes.items())


def test_remote_tree_expands_only_to_want(tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    for i in range(3):
        for j in range(4):
            fs.pipe(f"/listing-test/d{i}/s{j}/f.dcm", b"abc")
    units = plan_units("memory://listing-test", want=2)
    assert [u[1] for u in units] == [True, True, True]  # three dirs, walked in the tasks
    assert len(_listed(units)) == 12
    assert all(p.startswith("memory://") for p in _listed(units))


def test_deal_evens_out_bytes() -> None:
    units = [(f"f{i}", False, size) for i, size in enumerate([90, 50, 40, 30, 30, 20, 20])]
    units += [("dir-a", True, 0), ("dir-b", True, 0)]
    parts = deal(units, 2)
    loads = sorted(sum(u[2] for u in part) for part in parts)
    assert loads == [140, 140]
    assert sorted(u for part in parts for u in part) == sorted(units)
    assert [sum(u[1] for u in part) for part in parts] == [1, 1]  # one directory each
    assert deal([("only", False, 1)], 8) == [[("only", False, 1)]]  # no empty tasks


def test_plan_shards_balanced_per_split_and_world_size() -> None:
    series = {f"s{i:02d}": ("train" if i % 5 else "val", 10 + i % 7, 1000) for i in range(40)}
    layout, assign = deal_shards(series, world_size=2, num_shards=None, tasks=8, shard_bytes=10**9)
    assert layout.count("train") % 2 == 0 and layout.count("val") % 2 == 0
    assert sorted(set(assign)) == sorted(series)
    for split in ("train", "val"):
        shards = [i for i, s in enumerate(layout) if s == split]
        counts = [sum(1 for v in assign.values() if v == i) for i in shards]
        assert max(counts) - min(counts) <= 1  # shards of a split differ by <= 1 series
        assert all(layout[assign[uid]] == split for uid in series if series[uid][0] == split)
        files = [sum(series[u][1] for u, v in assign.items() if v == i) for i in shards]
        assert max(files) - min(files) <= 16  # about the same work: within one series


def test_plan_shards_size_cap_and_explicit_count() -> None:
    series = {f"s{i}": (None, 5, 100) for i in range(10)}
    layout, _ = deal_shards(series, world_size=None, num_shards=None, tasks=1, shard_bytes=250)
    assert layout == [None] * 4  # 1000 bytes of input, 250 per shard
    layout, _ = deal_shards(series, world_size=2, num_shards=6, tasks=1, shard_bytes=10**9)
    assert layout == [None] * 6
    multiple = r"--num-shards 3 \(num_shards=3\) must be a positive multiple of --world-size 2"
    with pytest.raises(PrepError, match=multiple):
        deal_shards(series, world_size=2, num_shards=3, tasks=1, shard_bytes=1)
    assert deal_shards({}, world_size=2, num_shards=None, tasks=4, shard_bytes=1) == (
        [None, None],
        {},
    )


def test_plan_shards_no_more_shards_than_series() -> None:
    series = {"a": ("train", 3, 10), "b": ("train", 2, 10), "c": ("val", 1, 10)}
    layout, assign = deal_shards(series, world_size=2, num_shards=None, tasks=64, shard_bytes=1)
    assert layout == ["train", "train", "val", "val"]  # val: 1 series, rounded up to 2 ranks
    assert sorted(assign.values()) == [0, 1, 2]
