"""TableDataset / TableLoader: exact split, shuffle, resume, mixed layouts, fit(), speed.

Datasets are written without Spark: ``ShardWriter`` writes ``encode_block`` samples, then
``manifest.extra["table"]`` is added (the shard names, which carry the write id, are known
only after the commit).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from gpuspark.data import format as fmt
from gpuspark.data.format.table import (
    TableColumn,
    TableError,
    TableInfo,
    encode_block,
    rechunk,
)
from gpuspark.data.frame import FeaturesLabel
from gpuspark.data.load import LoaderError, TableDataset, World
from gpuspark.data.write import ShardWriter

ID = TableColumn("id", "number", "int64")
X = TableColumn("x", "array", "float32")


def write_table_ds(
    path: Path,
    columns: Sequence[TableColumn],
    tables: dict[str | None, pa.Table],
    *,
    block_rows: int,
    shard_bytes: int = 1 << 30,
) -> Path:
    """A table dataset of ``tables`` (by split; ``None``: no split), blocks of ``block_rows``
    rows, shards rolled at ``shard_bytes``."""
    sizes: dict[str | None, list[int]] = {}
    with ShardWriter(path, target_shard_bytes=shard_bytes) as writer:
        for split, table in tables.items():
            for chunk in rechunk(table.to_batches(max_chunksize=97), block_rows):
                writer.write(encode_block(chunk, columns), split=split)
                sizes.setdefault(split, []).append(chunk.num_rows)
    manifest = fmt.load_manifest(path)
    in_split = {p for paths in manifest.splits.values() for p in paths}
    shard_rows = {}
    for split, blocks in sizes.items():
        if split is None:
            paths = [s.path for s in manifest.shards if s.path not in in_split]
        else:
            paths = manifest.splits[split]
        records = {s.path: s.records for s in manifest.shards}
        for p in paths:
            shard_rows[p] = sum(blocks[: records[p]])
            blocks = blocks[records[p] :]
        assert not blocks
    info = TableInfo(block_rows, tuple(columns), shard_rows)
    manifest.extra["table"] = info.as_dict()
    fmt.write_manifest(path, manifest)
    return path


def id_table(n: int, width: int = 3, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    x = np.repeat(ids[:, None], width, axis=1).astype(np.float32)
    return pa.table({"id": ids, "x": pa.array(list(x), type=pa.list_(pa.float32()))})


@pytest.fixture(scope="module")
def ids_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1000 rows in blocks of 16 over several shards (partial last blocks: 1000 % 16 = 8)."""
    root = tmp_path_factory.mktemp("table")
    return write_table_ds(
        root / "ids", [ID, X], {None: id_table(1000)}, block_rows=16, shard_bytes=2500
    )


def rank_ids(ds: TableDataset, batch: int = 7) -> list[int]:
    return [int(i) for b in ds.iter_batches(batch) for i in b["id"]]


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [True, False])
def test_exact_split(ids_ds: Path, world_size: int, shuffle: bool, drop_last: bool) -> None:
    n = 1000
    per_rank = n // world_size if drop_last else -(-n // world_size)
    streams = []
    for rank in range(world_size):
        ds = TableDataset(
            ids_ds,
            world=World(rank, world_size),
            shuffle=shuffle,
            drop_last=drop_last,
            shuffle_rows=50,
            seed=3,
        )
        assert ds.samples_per_rank == per_rank and ds.rows == n
        streams.append(rank_ids(ds))
        assert len(streams[-1]) == per_rank
        assert ds.consumed == per_rank
    flat = [i for s in streams for i in s]
    if drop_last:
        assert len(set(flat)) == len(flat) == per_rank * world_size
        assert n - len(flat) < world_size
    else:
        assert set(flat) == set(range(n))
        pad = len(flat) - n
        assert pad < world_size
        if not shuffle:  # padding repeats the first rows of the sequence
            assert flat == list(range(n)) + list(range(pad))
    if shuffle:
        assert flat != sorted(flat)
    else:
        assert flat[: per_rank * world_size - (0 if drop_last else pad)] == sorted(set(flat))


def test_x_rows_follow_ids(ids_ds: Path) -> None:
    ds = TableDataset(ids_ds, world=World(1, 2), seed=5, shuffle_rows=64)
    for batch in ds.iter_batches(33):
        assert batch["x"].shape[1:] == (3,) and batch["x"].dtype == np.float32
        np.testing.assert_array_equal(batch["x"][:, 2], batch["id"].astype(np.float32))


def test_epochs_and_seeds(ids_ds: Path) -> None:
    def order(seed: int, epoch: int) -> list[int]:
        ds = TableDataset(ids_ds, world=World(0, 2), seed=seed, shuffle_rows=100)
        ds.set_epoch(epoch)
        return rank_ids(ds)

    assert order(1, 0) == order(1, 0)
    assert order(1, 0) != order(1, 1)
    assert order(1, 0) != order(2, 0)
    ds = TableDataset(ids_ds, world=World(0, 2), seed=1, shuffle_rows=100)
    first = rank_ids(ds)
    second = rank_ids(ds)  # a finished epoch rolls over
    assert ds.epoch == 1 and first == order(1, 0) and second == order(1, 1)


@pytest.mark.parametrize("k", [0, 1, 3, 7, 14])
def test_resume_mid_window(ids_ds: Path, k: int) -> None:
    kw: dict[str, Any] = {"world": World(2, 3), "seed": 9, "shuffle_rows": 50}
    whole = [b["id"].tolist() for b in TableDataset(ids_ds, **kw).iter_batches(11)]
    ds = TableDataset(ids_ds, **kw)
    it = ds.iter_batches(11)
    head = [next(it)["id"].tolist() for _ in range(k)]
    state = ds.state_dict()
    assert state["consumed"] == 11 * k and state["epoch"] == 0
    again = TableDataset(ids_ds, **{**kw, "seed": 0})
    again.load_state_dict(state)
    rest = [b["id"].tolist() for b in again.iter_batches(11)]
    assert head + rest == whole


def test_resume_checks(ids_ds: Path) -> None:
    state = {**TableDataset(ids_ds, world=World(0, 2)).state_dict(), "consumed": 5}
    moved = TableDataset(ids_ds, world=World(0, 3))  # mid-epoch at another world: dealt again
    moved.load_state_dict(state)
    assert moved.world_changes == [{"epoch": 0, "from": 2, "to": 3, "rest": 990}]
    with pytest.raises(LoaderError, match="999 rows"):
        TableDataset(ids_ds, world=World(0, 2)).load_state_dict({**state, "rows": 999})
    fresh = TableDataset(ids_ds, world=World(0, 3))
    fresh.load_state_dict({**state, "consumed": 0, "epoch": 4})  # epoch boundary: any world
    assert (fresh.epoch, fresh.consumed) == (4, 0)


def test_set_epoch_keeps_position(ids_ds: Path) -> None:
    ds = TableDataset(ids_ds, world=World(0, 2))
    next(ds.iter_batches(10))
    ds.set_epoch(0)
    assert ds.consumed == 10
    ds.set_epoch(1)
    assert (ds.epoch, ds.consumed) == (1, 0)


def test_errors(ids_ds: Path, tmp_path: Path) -> None:
    ds = TableDataset(ids_ds, world=World(0, 1))
    with pytest.raises(ValueError, match="batch_size"):
        next(ds.iter_batches(0))
    with pytest.raises(ValueError, match="batch_size"):
        ds.loader(0)
    with pytest.raises(TableError, match=r"no column 'idd'.*'id'"):
        TableDataset(ids_ds, columns=["idd"])
    with pytest.raises(LoaderError, match="no split 'train'"):
        TableDataset(ids_ds, split="train")
    with pytest.raises(LoaderError, match="no row for some rank"):
        TableDataset(ids_ds, world=World(0, 1001))
    assert TableDataset(ids_ds, world=World(0, 1001), drop_last=False).samples_per_rank == 1
    with ShardWriter(tmp_path / "plain") as writer:
        writer.write({"a": 1})
    with pytest.raises(TableError, match="not a table dataset"):
        TableDataset(tmp_path / "plain")


def test_padding_wider_than_the_data(tmp_path: Path) -> None:
    path = write_table_ds(tmp_path / "tiny", [ID, X], {None: id_table(2)}, block_rows=4)
    got = [rank_ids(TableDataset(path, world=World(r, 5), drop_last=False)) for r in range(5)]
    assert sorted(i for s in got for i in s) == [0, 0, 0, 1, 1]


def test_splits_and_columns(tmp_path: Path) -> None:
    tables = {"train": id_table(300), "val": id_table(45, start=300)}
    path = write_table_ds(tmp_path / "split", [ID, X], tables, block_rows=32, shard_bytes=3000)
    ds = TableDataset(path, split="val", columns=["id"], world=World(0, 1), shuffle=False)
    batches = list(ds.iter_batches(20))
    assert ds.rows == 45 and [list(b) for b in batches] == [["id"]] * 3
    assert np.concatenate([b["id"] for b in batches]).tolist() == list(range(300, 345))
    assert TableDataset(path, split="train").rows == 300


# --------------------------------------------------------------------------- layouts

MIXED = [
    TableColumn("id", "number", "int64"),
    TableColumn("f", "number", "float64"),
    TableColumn("flag", "number", "bool"),
    TableColumn("s", "string"),
    TableColumn("b", "binary"),
    TableColumn("v", "array", "float32"),
    TableColumn("tags", "string_array"),
]


def mixed_rows(n: int, seed: int) -> dict[str, list[Any]]:
    """Rows whose blocks differ: nulls in some, ragged ``v`` in some, empty arrays."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list[Any]] = {c.name: [] for c in MIXED}
    for i in range(n):
        block = i // 8
        rows["id"].append(i)
        rows["f"].append(None if block % 3 == 1 and i % 4 == 0 else float(rng.normal()))
        rows["flag"].append(bool(i % 2))
        rows["s"].append(None if i % 11 == 5 else f"r{i}-é" * (i % 3))
        rows["b"].append(None if i % 13 == 0 else bytes([i % 256]) * (i % 4))
        width = 3 if block % 2 == 0 else int(rng.integers(0, 5))
        rows["v"].append(
            None if block % 4 == 3 and i % 5 == 0 else [float(i + j) for j in range(width)]
        )
        rows["tags"].append(None if i % 17 == 0 else [f"t{j}" for j in range(i % 3)])
    return rows


def mixed_table(rows: dict[str, list[Any]]) -> pa.Table:
    types = {
        "id": pa.int64(),
        "f": pa.float64(),
        "flag": pa.bool_(),
        "s": pa.string(),
        "b": pa.binary(),
        "v": pa.list_(pa.float32()),
        "tags": pa.list_(pa.string()),
    }
    return pa.table({k: pa.array(v, type=types[k]) for k, v in rows.items()})


def as_python(name: str, value: Any) -> Any:
    if value is None or value is np.ma.masked:
        return None
    if name == "v" or name == "tags":
        return [float(x) if name == "v" else x for x in value]
    return value.item() if isinstance(value, np.generic) else value


@pytest.mark.parametrize("shuffle", [False, True])
def test_mixed_layouts_round_trip(tmp_path: Path, shuffle: bool) -> None:
    rows = mixed_rows(203, seed=1)
    path = write_table_ds(
        tmp_path / "mixed", MIXED, {None: mixed_table(rows)}, block_rows=8, shard_bytes=1500
    )
    ds = TableDataset(path, world=World(0, 1), shuffle=shuffle, shuffle_rows=20)
    seen = 0
    for batch in ds.iter_batches(13):
        assert batch["s"].dtype == object and batch["id"].dtype == np.int64
        for j, i in enumerate(batch["id"].tolist()):
            for c in MIXED[1:]:
                assert as_python(c.name, batch[c.name][j]) == rows[c.name][i], (c.name, i)
        seen += len(batch["id"])
    assert seen == 203


def test_fixed_and_ragged_blocks_become_ragged(tmp_path: Path) -> None:
    rows = mixed_rows(32, seed=2)  # block 0: v fixed (width 3), f no null; block 1: ragged, nulls
    path = write_table_ds(tmp_path / "mix", MIXED, {None: mixed_table(rows)}, block_rows=8)

    def first(batch_size: int) -> dict[str, Any]:
        ds = TableDataset(path, world=World(0, 1), shuffle=False, shuffle_rows=8)
        return next(ds.iter_batches(batch_size))

    one = first(8)
    assert one["v"].shape == (8, 3) and one["v"].dtype == np.float32
    assert not np.ma.isMaskedArray(one["f"])
    two = first(16)
    assert two["v"].dtype == object and two["v"].shape == (16,)
    assert [list(x) for x in two["v"]] == rows["v"][:16]
    assert np.ma.isMaskedArray(two["f"])
    assert two["f"].mask.tolist() == [v is None for v in rows["f"][:16]]
    assert sum(two["f"].mask) == 2


# --------------------------------------------------------------------------- loader and fit

FEATURES = [
    TableColumn("id", "number", "int64"),
    TableColumn("a", "number", "float32"),
    TableColumn("x", "array", "float64"),
    TableColumn("label", "number", "int64"),
]


def features_table(n: int, seed: int = 0) -> pa.Table:
    """``x`` = [id, two normals]; ``label`` = whether the first normal is positive."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64)
    x = np.column_stack([ids, rng.normal(size=(n, 2))])
    a = pa.array(rng.normal(size=n).astype(np.float32), mask=ids % 50 == 7)
    return pa.table(
        {
            "id": ids,
            "a": a,
            "x": pa.array(list(x), type=pa.list_(pa.float64())),
            "label": (x[:, 1] > 0).astype(np.int64),
        }
    )


@pytest.fixture(scope="module")
def features_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("features")
    return write_table_ds(
        root / "f", FEATURES, {None: features_table(400)}, block_rows=32, shard_bytes=6000
    )


def test_loader_features_label(features_ds: Path) -> None:
    import torch

    ds = TableDataset(features_ds, world=World(0, 1), transform=FeaturesLabel(["a", "x"], "label"))
    loader = ds.loader(64, num_workers=3, prefetch=2)
    assert len(loader) == 7 and loader.dataset is ds
    got = list(loader)
    assert [len(y) for _, y in got] == [64] * 6 + [16]
    x, y = got[0]
    assert isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.shape == (64, 4)
    assert y.dtype == torch.int64
    xs = torch.cat([b[0] for b in got])
    assert sorted(xs[:, 1].long().tolist()) == list(range(400))
    assert int(torch.isnan(xs[:, 0]).sum()) == 8  # ids 7, 57, ... 357: null a -> NaN
    assert torch.equal(torch.cat([b[1] for b in got]), (xs[:, 2] > 0).long())
    stats = loader.stats()
    assert (stats["batches"], stats["samples"]) == (7, 400) and stats["wait_s"] >= 0
    assert ds.consumed == 400 and len(loader) == 7  # finished: the next epoch is whole


def test_loader_resume_after_break(features_ds: Path) -> None:
    def ids(batches: Any) -> list[int]:
        return [int(i) for b in batches for i in b["id"]]

    kw: dict[str, Any] = {"world": World(1, 2), "seed": 4, "shuffle_rows": 48}
    whole = ids(TableDataset(features_ds, **kw).loader(30, prefetch=3))
    ds = TableDataset(features_ds, **kw)
    loader = ds.loader(30, prefetch=3)
    head = []
    for batch in loader:  # the prefetch thread reads ahead; consumed counts delivered rows
        head.append(batch)
        if len(head) == 3:
            break
    assert loader.state_dict()["consumed"] == 90 and len(loader) == 4
    again = TableDataset(features_ds, **kw)
    again.loader(30).load_state_dict(loader.state_dict())
    assert ids(head) + ids(again.loader(30)) == whole


def test_loader_device_cpu(features_ds: Path) -> None:
    import torch

    ds = TableDataset(features_ds, world=World(0, 1), transform=FeaturesLabel(["x"], "label"))
    x, _ = next(iter(ds.loader(16, device="cpu")))
    assert x.device == torch.device("cpu") and x.shape == (16, 3)
    if not torch.cuda.is_available():
        with pytest.raises(LoaderError, match="CUDA is not available"):
            ds.loader(16, device="cuda")


_FIT = textwrap.dedent(
    """
    import json, sys
    import torch
    from gpuspark.data.load import TableDataset
    from gpuspark.data.frame import FeaturesLabel
    from gpuspark.train import prepare
    from gpuspark.train.loop import FitConfig, fit

    path, ckpt = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)

    def run(epochs, resume=False, crash_at=None, checkpoint_dir=None):
        torch.manual_seed(0)
        m = prepare(torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(),
                                        torch.nn.Linear(16, 2)))
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        ds = TableDataset(path, seed=1, shuffle_rows=64,
                          transform=FeaturesLabel(["x"], "label"))
        seen = []

        def record(x, y):
            seen.append(x[:, 0].long().tolist())
            return x, y

        def step(n):
            if n == crash_at:
                raise KeyboardInterrupt
        cfg = FitConfig(epochs=epochs, log=None, metrics_port=0, resume=resume,
                        checkpoint_dir=checkpoint_dir, checkpoint_every=4)
        try:
            hist = fit(m, opt, torch.nn.functional.cross_entropy, ds.loader(32), dataset=ds,
                       config=cfg, transform=record, on_step=step)
        except KeyboardInterrupt:
            hist = None
        return hist, seen, ds.epoch

    hist, whole, epoch = run(2)
    _, crashed, _ = run(2, crash_at=6, checkpoint_dir=ckpt)
    _, resumed, _ = run(2, resume=True, checkpoint_dir=ckpt)
    print(json.dumps({"hist": hist, "whole": whole, "crashed": crashed, "resumed": resumed,
                      "epoch": epoch}))
    """
)


def test_fit_one_rank_and_resume(features_ds: Path, tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    env.update(GPUSPARK_BACKEND="gloo", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", _FIT, str(features_ds), str(tmp_path / "ckpt")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    hist, whole = out["hist"], out["whole"]
    assert [h["steps"] for h in hist] == [13, 13] and [h["samples"] for h in hist] == [400, 400]
    assert hist[1]["loss"] < hist[0]["loss"]
    epoch0 = sorted(i for b in whole[:13] for i in b)
    assert epoch0 == list(range(400)) and whole[:13] != whole[13:]
    # crashed after step 6, checkpoint at step 4: the resumed run continues at batch 5
    assert out["crashed"] == whole[:6]
    assert out["crashed"][:4] + out["resumed"] == whole


# --------------------------------------------------------------------------- speed


def test_read_speed(tmp_path: Path) -> None:
    n, width = 200_000, 50
    rng = np.random.default_rng(0)
    data = rng.normal(size=(n, width)).astype(np.float32)
    table = pa.table({f"c{j}": data[:, j] for j in range(width)})
    columns = [TableColumn(f"c{j}", "number", "float32") for j in range(width)]
    path = write_table_ds(
        tmp_path / "speed", columns, {None: table}, block_rows=1024, shard_bytes=8 << 20
    )
    ds = TableDataset(path, world=World(0, 1))
    t0 = time.perf_counter()
    rows = sum(len(b["c0"]) for b in ds.loader(4096))
    rate = rows / (time.perf_counter() - t0)
    print(f"TableDataset: {rate / 1e6:.2f}M rows/s ({width} float32 columns)")
    assert rows == n
    assert rate >= 300_000, f"{rate:.0f} rows/s"


def test_features_label_casts_neighbouring_columns_of_one_matrix_in_one_pass() -> None:
    from gpuspark.data.format.table import BlockParts
    from gpuspark.data.format.table.batch import TableBatch
    from gpuspark.data.frame import FeaturesLabel

    matrix = np.arange(60, dtype=np.float64).reshape(10, 6) / 7
    positions = {f"c{j}": ("float64", j) for j in range(6)} | {"y": ("int64", 0)}
    ys = np.arange(10, dtype=np.int64)[:, None]
    parts = BlockParts({"float64": matrix, "int64": ys}, {}, {}, 10).slice(2, 9)
    batch = TableBatch([*positions], positions, parts)
    assert batch.rows == 7 and batch["c2"].tolist() == list(matrix[2:9, 2])
    runs = batch.number_runs(["c1", "c2", "c3", "c5", "c4", "y"])
    assert [r for r, _m in runs] == [["c1", "c2", "c3"], ["c5"], ["c4"], ["y"]]
    assert runs[0][1] is not None and np.shares_memory(runs[0][1], matrix)
    for names in (["c1", "c2", "c3"], ["c3", "c2"], ["c0", "c2", "c4"], ["c5"]):
        x, y = FeaturesLabel(names, "y")(batch)
        want = np.stack([matrix[2:9, int(n[1])] for n in names], axis=1).astype(np.float32)
        np.testing.assert_array_equal(x.numpy(), want)
        assert y.tolist() == list(range(2, 9))
        assert not np.shares_memory(y.numpy(), ys)  # outputs never alias the rows read
    batch["c2"] = batch["c2"] * 0  # a column replaced by an earlier transform is what counts
    assert [r for r, _m in batch.number_runs(["c1", "c2", "c3"])] == [["c1"], ["c2"], ["c3"]]
    x, _y = FeaturesLabel(["c1", "c2", "c3"], "y")(batch)
    assert (
        x[:, 1].abs().sum() == 0 and x[:, 0].tolist() == matrix[2:9, 1].astype(np.float32).tolist()
    )
    masked = TableBatch(
        ["c0", "c1"], positions, BlockParts({"float64": matrix}, {"c1": ys[:, 0] % 2 == 0}, {}, 10)
    )
    assert [m is None for _r, m in masked.number_runs(["c0", "c1"])] == [False, True]
    x = FeaturesLabel(["c0", "c1"])(masked)
    assert int(x[:, 1].isnan().sum()) == 5


WIDE = [
    TableColumn("id", "number", "int64"),
    *[TableColumn(f"f{j}", "number", "float64") for j in range(5)],
    TableColumn("m", "number", "float32"),
    TableColumn("v", "array", "float32"),
    TableColumn("label", "number", "int32"),
]


def wide_table(n: int) -> pa.Table:
    rng = np.random.default_rng(3)
    cols: dict[str, Any] = {"id": np.arange(n, dtype=np.int64)}
    cols |= {f"f{j}": rng.normal(size=n) for j in range(5)}
    cols["m"] = pa.array(rng.normal(size=n).astype(np.float32), mask=np.arange(n) % 9 == 4)
    cols["v"] = pa.array(list(rng.normal(size=(n, 2)).astype(np.float32)), pa.list_(pa.float32()))
    cols["label"] = (np.arange(n) % 3).astype(np.int32)
    return pa.table(cols)


@pytest.mark.parametrize("shuffle", [False, True])
def test_views_for_a_view_safe_transform_give_the_same_batches(
    tmp_path: Path, shuffle: bool
) -> None:
    """FeaturesLabel declares ``reads_views``: read in order, it gets views of the mapped
    shards (batches that straddle blocks are copied); the result must equal the copying path
    (the same transform hidden behind a plain function), and own its memory."""
    from gpuspark.data.frame import FeaturesLabel

    path = write_table_ds(
        tmp_path / "wide", WIDE, {None: wide_table(700)}, block_rows=64, shard_bytes=9000
    )
    names = ["id", "f0", "f1", "f2", "f3", "f4", "m", "v"]
    fast = FeaturesLabel(names, "label")

    def read(transform: Any) -> list[Any]:
        ds = TableDataset(path, world=World(1, 2), shuffle=shuffle, transform=transform)
        return list(ds.iter_batches(50))

    got, want = read(fast), read(lambda b: fast(b))
    assert len(got) == len(want) == 7
    for (x, y), (wx, wy) in zip(got, want, strict=True):
        np.testing.assert_array_equal(x.numpy(), wx.numpy())
        np.testing.assert_array_equal(y.numpy(), wy.numpy())
        assert x.numpy().flags.writeable and y.numpy().flags.writeable  # fresh, not the map
    ids = np.concatenate([x[:, 0].numpy() for x, _y in got]).astype(int)
    labels = np.concatenate([y.numpy() for _x, y in got])
    np.testing.assert_array_equal(labels, ids % 3)
    assert (
        len(set(ids)) == 350 and np.isnan(np.concatenate([x[:, 6].numpy() for x, _ in got])).any()
    )
    if not shuffle:
        assert ids.tolist() == sorted(ids.tolist())
