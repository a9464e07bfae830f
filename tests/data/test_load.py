"""ShardDataset: exact split, shuffle, resume, loader, corruption, splits (single process)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gpuspark.data import format as fmt
from gpuspark.data.load import LoaderError, ShardDataset, World
from gpuspark.data.write import ShardWriter


def write_ids(path: Path, n: int, shard_bytes: int = 600, split_of=None) -> Path:
    """A dataset of ``n`` records ``{"idx": i, "x": int16[2]}``, several shards."""
    with ShardWriter(path, target_shard_bytes=shard_bytes) as writer:
        for i in range(n):
            sample = {"idx": i, "x": np.array([i, -i], dtype=np.int16)}
            writer.write(sample, split=split_of(i) if split_of else None)
    return path


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("load")
    # 60 is divisible by 1, 2, 3 and 4; 61 by none of 2, 3, 4.
    return {n: write_ids(root / f"ds{n}", n) for n in (60, 61)}


def rank_stream(ds: ShardDataset, rank: int, world_size: int, workers: int, batch: int = 4):
    """What one rank's loader yields, built the way DataLoader does: worker batches taken
    round-robin (workers=0 means the process reads itself)."""
    n = max(workers, 1)
    streams = [
        [
            [s["idx"] for s in samples]
            for samples, _ in ds.iter_batches(batch, World(rank, world_size).with_worker(w, n))
        ]
        for w in range(n)
    ]
    out: list[int] = []
    for i in range(max(len(s) for s in streams)):
        for s in streams:
            if i < len(s):
                out.extend(s[i])
    return out


@pytest.mark.parametrize("n", [60, 61])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [True, False])
def test_split_matrix(datasets: dict[int, Path], n: int, world_size: int, drop_last: bool) -> None:
    ds = ShardDataset(datasets[n], drop_last=drop_last, world=World(0, world_size), seed=7)
    per_rank = n // world_size if drop_last else -(-n // world_size)
    by_workers = {}
    for workers in (0, 1, 2):
        ranks = [rank_stream(ds, r, world_size, workers) for r in range(world_size)]
        assert [len(r) for r in ranks] == [per_rank] * world_size  # equal counts
        everything = [i for r in ranks for i in r]
        counts = Counter(everything)
        if drop_last:
            assert max(counts.values()) == 1  # no duplicates across ranks and workers
            assert n - len(counts) <= world_size - 1
        else:
            assert set(counts) == set(range(n))  # the whole dataset
            assert len(everything) - n == sum(c - 1 for c in counts.values()) < world_size
        by_workers[workers] = ranks
    # The stream of a rank does not depend on the worker count (what makes resume portable).
    assert by_workers[0] == by_workers[1] == by_workers[2]
    # Same seed -> identical; another epoch -> another order.
    again = ShardDataset(datasets[n], drop_last=drop_last, world=World(0, world_size), seed=7)
    assert [rank_stream(again, r, world_size, 0) for r in range(world_size)] == by_workers[0]
    again.set_epoch(1)
    assert [rank_stream(again, r, world_size, 0) for r in range(world_size)] != by_workers[0]


def test_real_dataloader_workers_match_in_process_stream(datasets: dict[int, Path]) -> None:
    ds = ShardDataset(datasets[61], world=World(1, 3), seed=3)
    expected = rank_stream(ds, 1, 3, 0, batch=5)
    loader = ds.loader(5, num_workers=2)
    got = [i for batch in loader for i in batch["idx"].tolist()]
    assert got == expected
    stats = loader.stats()
    assert stats["batches"] == len(loader.wait_times) == 4
    assert stats["samples"] == 20
    assert stats["wait_s"] == pytest.approx(sum(loader.wait_times))


def test_resume_with_other_worker_count(datasets: dict[int, Path]) -> None:
    whole = ShardDataset(datasets[61], world=World(0, 2), seed=11)
    whole.set_epoch(2)
    expected = [i for b in whole.loader(4, num_workers=0) for i in b["idx"].tolist()]

    first = ShardDataset(datasets[61], world=World(0, 2), seed=11)
    first.set_epoch(2)
    seen: list[int] = []
    for k, batch in enumerate(first.loader(4, num_workers=2), start=1):
        seen.extend(batch["idx"].tolist())
        if k == 3:
            state = first.state_dict()
            break
    assert state["consumed"] == 12 and state["epoch"] == 2

    resumed = ShardDataset(datasets[61], world=World(0, 2), seed=0)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # same epoch: keeps the position (resume code calls it blindly)
    rest = [i for b in resumed.loader(4, num_workers=1) for i in b["idx"].tolist()]
    assert seen + rest == expected
    assert resumed.state_dict()["consumed"] == whole.samples_per_rank


def test_resume_at_another_world_size_deals_the_rest_again(datasets: dict[int, Path]) -> None:
    # the exactness of the deal is tests/data/test_redeal.py's
    ds = ShardDataset(datasets[60], world=World(0, 2))
    state = {**ds.state_dict(), "consumed": 4}
    other = ShardDataset(datasets[60], world=World(0, 3))
    other.load_state_dict(state)
    assert other.world_changes == [{"epoch": 0, "from": 2, "to": 3, "rest": 52}]
    assert other.consumed == 0 and other.samples_per_rank == 52 // 3


def test_epochs_roll_over_and_differ(datasets: dict[int, Path]) -> None:
    ds = ShardDataset(datasets[60], world=World(0, 1))
    first = [s["idx"] for s in ds]
    second = [s["idx"] for s in ds]  # finished epoch -> the next one starts
    assert ds.epoch == 1
    assert sorted(first) == sorted(second) == list(range(60))
    assert first != second


def test_no_shuffle_reads_storage_order(datasets: dict[int, Path]) -> None:
    ds = ShardDataset(datasets[60], shuffle=False, world=World(1, 2))
    assert [s["idx"] for s in ds] == list(range(30, 60))


def test_samples_decode_to_numpy(datasets: dict[int, Path]) -> None:
    ds = ShardDataset(datasets[60], shuffle=False, world=World(0, 1))
    sample = next(iter(ds))
    assert sample["idx"] == 0
    assert sample["x"].dtype == np.int16 and sample["x"].tolist() == [0, 0]
    batch = next(iter(ds.loader(8)))
    assert batch["x"].shape == (8, 2) and str(batch["x"].dtype) == "torch.int16"


def test_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(fmt.NotADatasetError, match="is not a gpuspark dataset"):
        ShardDataset(tmp_path)


def test_world_larger_than_dataset(tmp_path: Path) -> None:
    path = write_ids(tmp_path / "tiny", 3)
    with pytest.raises(LoaderError, match="3 records, fewer than the 4 ranks"):
        ShardDataset(path, world=World(0, 4))
    padded = ShardDataset(path, world=World(3, 4), drop_last=False)
    assert len(list(padded)) == 1


def test_split_reads_only_its_shards(tmp_path: Path) -> None:
    path = write_ids(tmp_path / "splits", 50, split_of=lambda i: "val" if i % 5 == 0 else "train")
    val = ShardDataset(path, split="val", world=World(0, 1))
    assert sorted(s["idx"] for s in val) == list(range(0, 50, 5))
    train = ShardDataset(path, split="train", world=World(0, 2))
    assert train.samples_per_rank == 20
    with pytest.raises(LoaderError, match="no split 'vall' \\(did you mean 'val'\\?\\)"):
        ShardDataset(path, split="vall")


# --------------------------------------------------------------------------- corruption


def _corrupt_one_record(path: Path) -> tuple[str, int, int]:
    manifest = fmt.load_manifest(path)
    shard = manifest.shards[1]
    index = fmt.read_index(path / shard.index)
    record = 2
    offset = int(index[record][0])
    with open(path / shard.path, "r+b") as f:
        f.seek(offset + fmt.HEADER_BYTES + 3)  # inside the payload
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    return str(path / shard.path), record, offset


@pytest.fixture()
def corrupt(tmp_path: Path) -> tuple[Path, tuple[str, int, int]]:
    path = write_ids(tmp_path / "bad", 40)
    return path, _corrupt_one_record(path)


@pytest.mark.parametrize("workers", [0, 1])
def test_corrupt_record_raises_with_location(corrupt, workers: int) -> None:
    path, (shard, record, offset) = corrupt
    ds = ShardDataset(path, world=World(0, 1))
    with pytest.raises(fmt.CorruptRecordError) as info:
        for _ in ds.loader(4, num_workers=workers):
            pass
    err = info.value
    assert (err.path, err.record, err.offset) == (shard, record, offset)


def test_corrupt_record_skipped_and_counted(corrupt) -> None:
    path, _ = corrupt
    ds = ShardDataset(path, world=World(0, 1), on_error="skip")
    loader = ds.loader(4, num_workers=1)
    ids = [i for b in loader for i in b["idx"].tolist()]
    stats = loader.stats()
    assert stats["skipped_corrupt"] == 1 and ds.skipped == 1
    assert stats["batches"] == 10  # same step count as an intact dataset
    assert stats["samples"] == len(ids) == 39
    assert ds.state_dict()["consumed"] == 40


def test_unverified_read_does_not_check_crc(corrupt) -> None:
    path, _ = corrupt
    ds = ShardDataset(path, world=World(0, 1), verify_crc=False, decode="raw")
    # The flipped byte is in the payload; without CRC checks it surfaces (or not) in parsing.
    try:
        got = sum(1 for _ in ds)
    except fmt.SampleError:
        got = -1
    assert got in (40, -1)


# --------------------------------------------------------------------------- devices


def test_cpu_device_and_pin_memory_fallback(datasets: dict[int, Path]) -> None:
    import warnings

    ds = ShardDataset(datasets[60], world=World(0, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "pin_memory without accelerator" warning
        batches = list(ds.loader(16, num_workers=0, pin_memory=True, device="cpu"))
    assert [b["idx"].device.type for b in batches] == ["cpu"] * 4


def test_cuda_device_without_cuda_is_refused(datasets: dict[int, Path]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available")
    with pytest.raises(LoaderError, match="CUDA is not available"):
        ShardDataset(datasets[60], world=World(0, 1)).loader(4, device="cuda")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs CUDA")
def test_cuda_side_stream_copy(datasets: dict[int, Path]) -> None:
    ds = ShardDataset(datasets[60], world=World(0, 1), seed=5)
    cpu = [b["x"] for b in ds.loader(8, num_workers=0)]
    ds2 = ShardDataset(datasets[60], world=World(0, 1), seed=5)
    gpu = list(ds2.loader(8, num_workers=2, pin_memory=True, device="cuda"))
    assert all(b["x"].is_cuda for b in gpu)
    assert all((g["x"].cpu() == c).all() for g, c in zip(gpu, cpu, strict=True))


# --------------------------------------------------------------------------- prefetch


def _slow(sample: dict) -> dict:
    import time

    time.sleep(0.02)  # 200 ms of "decoding" per batch of 10
    return sample


@pytest.mark.parametrize("workers", [0, 2])
def test_prefetch_hides_preparation_behind_compute(datasets: dict[int, Path], workers: int) -> None:
    import time

    ds = ShardDataset(datasets[60], world=World(0, 1), transform=_slow)
    loader = ds.loader(10, num_workers=workers, prefetch=2)
    for _ in loader:
        time.sleep(0.3)  # the training step
    waits = loader.wait_times
    assert len(waits) == 6
    # After the first batches the next one is always ready: waiting is far below the 200 ms
    # a batch takes to prepare (sleep-based, so it holds on a busy machine too).
    assert float(np.median(waits[2:])) < 0.1


def test_plain_dataloader_over_dataset(datasets: dict[int, Path]) -> None:
    from torch.utils.data import DataLoader

    ds = ShardDataset(datasets[61], world=World(0, 2), seed=2)
    got = [i for b in DataLoader(ds, batch_size=4, num_workers=2) for i in b["idx"].tolist()]
    assert len(got) == len(set(got)) == 30
    assert sorted(got) == sorted(rank_stream(ds, 0, 2, 0))
