"""Tests of the plain-Python ShardWriter: rollover, splits, atomic commit, overwrite."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuspark.data import format as fmt
from gpuspark.data.format import DatasetExistsError, NotADatasetError
from gpuspark.data.write import ShardWriter, balanced_counts


def _sample(i: int) -> dict:
    return {"label": i, "x": np.full((4, 4), i, dtype=np.float32), "name": f"s{i}"}


def _read_all(path: Path) -> list[dict]:
    m = fmt.load_manifest(path)
    return [
        fmt.decode_example(fmt.decompress(p, m.compression), m.schema)
        for s in m.shards
        for p in fmt.iter_records(path / s.path)
    ]


def test_rolls_shards_by_size_and_writes_index(tmp_path: Path):
    with ShardWriter(tmp_path / "ds", target_shard_bytes=1000) as w:
        for i in range(40):
            w.write(_sample(i))
    m = w.manifest
    assert m.total_records == 40 and len(m.shards) > 3
    assert all(s.bytes >= 1000 for s in m.shards[:-1])
    for s in m.shards:
        index = fmt.read_index(tmp_path / "ds" / s.index)
        assert len(index) == s.records and index[:, 1].sum() == s.bytes
    assert sorted(r["label"] for r in _read_all(tmp_path / "ds")) == list(range(40))
    assert m.schema["x"] == {"kind": "ndarray", "dtype": "float32", "shape": [4, 4], "count": 40}
    assert m.provenance["writer"] == "ShardWriter" and "gpuspark_version" in m.provenance
    names = sorted(p.name for p in (tmp_path / "ds").iterdir())
    assert fmt.MANIFEST_NAME in names and len(names) == 2 * len(m.shards) + 1


def test_written_files_follow_the_umask(tmp_path: Path):
    """manifest.json and the indexes are written atomically, yet readable like any file."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        with ShardWriter(tmp_path / "ds", target_shard_bytes=1000) as w:
            for i in range(10):
                w.write(_sample(i))
    finally:
        os.umask(old)
    files = [tmp_path / "ds" / fmt.MANIFEST_NAME] + [
        tmp_path / "ds" / s.index for s in w.manifest.shards
    ]
    assert len(files) > 2
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o644 for f in files}


def test_splits_and_extra(tmp_path: Path):
    with ShardWriter(tmp_path / "ds", extra={"labels": ["a", "b"]}) as w:
        for i in range(10):
            w.write(_sample(i), split="val" if i % 5 == 0 else "train")
    m = fmt.load_manifest(tmp_path / "ds")
    assert set(m.splits) == {"train", "val"} and m.extra == {"labels": ["a", "b"]}
    val = {p for p in m.splits["val"]}
    counts = {s.path: s.records for s in m.shards}
    assert sum(counts[p] for p in val) == 2


def test_exception_leaves_no_dataset_and_no_temp_files(tmp_path: Path):
    with pytest.raises(RuntimeError), ShardWriter(tmp_path / "ds", target_shard_bytes=200) as w:
        for i in range(20):
            w.write(_sample(i))
        raise RuntimeError("boom")
    assert not (tmp_path / "ds").exists()
    with pytest.raises(NotADatasetError):
        fmt.load_manifest(tmp_path / "ds")


def test_refuses_existing_dataset_and_overwrite_is_atomic(tmp_path: Path):
    with ShardWriter(tmp_path / "ds") as w:
        w.write(_sample(1))
    old_files = {p.name for p in (tmp_path / "ds").iterdir()}
    # flag first, then the Python keyword: the same message serves the CLI and the library
    with pytest.raises(DatasetExistsError, match=r"pass --overwrite \(overwrite=True\)"):
        ShardWriter(tmp_path / "ds")
    # a failed overwrite keeps the old dataset intact
    with pytest.raises(RuntimeError), ShardWriter(tmp_path / "ds", overwrite=True) as w:
        w.write(_sample(2))
        assert [r["label"] for r in _read_all(tmp_path / "ds")] == [1]  # still the old one
        raise RuntimeError("boom")
    assert {p.name for p in (tmp_path / "ds").iterdir()} == old_files
    (tmp_path / "ds" / "quarantine.parquet").write_bytes(b"kept")  # a file beside the dataset
    with ShardWriter(tmp_path / "ds", overwrite=True) as w:
        w.write(_sample(3))
    assert [r["label"] for r in _read_all(tmp_path / "ds")] == [3]
    assert (tmp_path / "ds" / "quarantine.parquet").read_bytes() == b"kept"
    (tmp_path / "ds" / "quarantine.parquet").unlink()
    assert not old_files - {fmt.MANIFEST_NAME} & {p.name for p in (tmp_path / "ds").iterdir()}
    assert fmt.verify_dataset(tmp_path / "ds") == []


def test_refuses_non_dataset_directory_but_cleans_own_leftovers(tmp_path: Path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("mine")
    with pytest.raises(DatasetExistsError, match="not empty"):
        ShardWriter(tmp_path / "d")
    leftovers = tmp_path / "e"
    (leftovers / "_gpuspark_staging-deadbeef" / "p00000-a1").mkdir(parents=True)
    (leftovers / "part-00000-deadbeef.tfrecord").write_bytes(b"partial")
    with ShardWriter(leftovers) as w:
        w.write(_sample(0))
    names = {p.name for p in leftovers.iterdir()}
    assert "_gpuspark_staging-deadbeef" not in names
    assert "part-00000-deadbeef.tfrecord" not in names and len(names) == 3


def test_zstd_compression_declared_in_manifest(tmp_path: Path):
    with ShardWriter(tmp_path / "ds", compression="zstd") as w:
        for i in range(5):
            w.write({"z": np.zeros(1000, dtype=np.uint8), "label": i})
    m = fmt.load_manifest(tmp_path / "ds")
    assert m.compression == "zstd" and m.shards[0].bytes < 5 * 200
    assert [r["label"] for r in _read_all(tmp_path / "ds")] == list(range(5))
    assert fmt.verify_dataset(tmp_path / "ds") == []


def test_empty_dataset(tmp_path: Path):
    with ShardWriter(tmp_path / "ds"):
        pass
    m = fmt.load_manifest(tmp_path / "ds")
    assert m.total_records == 0 and m.shards == []
    assert fmt.inspect_dataset(tmp_path / "ds")["records"] == 0


def test_bad_arguments(tmp_path: Path):
    with pytest.raises(fmt.GpusparkError, match="not supported"):
        ShardWriter(tmp_path / "a", compression="gzip")
    with ShardWriter(tmp_path / "b") as w, pytest.raises(fmt.GpusparkError, match="split"):
        w.write(_sample(0), split="a/b")


def test_balanced_counts():
    assert balanced_counts(10, 4) == [3, 3, 2, 2]
    assert sum(balanced_counts(10_001, 8)) == 10_001


def _commit_with_files(root: Path, files: dict[str, bytes], overwrite: bool = True) -> fmt.Manifest:
    from gpuspark.data.write.commit import build_manifest, commit, staged_write

    with staged_write(root, overwrite) as (r, staging, _wid, old):
        manifest = build_manifest([], None, {}, {})
        return commit(r, [], manifest, old, staging, files)


def test_extra_files_committed_before_the_manifest_and_replaced_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ds"
    m1 = _commit_with_files(root, {"quarantine.parquet": b"old"}, overwrite=False)
    name1 = m1.extra["files"]["quarantine.parquet"]
    assert name1.startswith("quarantine-") and (root / name1).read_bytes() == b"old"
    assert fmt.load_manifest(root).extra["files"] == {"quarantine.parquet": name1}

    def boom(*_a: object) -> None:
        raise OSError("disk full")

    # a failure at the last step (the manifest) keeps the old dataset and its file
    monkeypatch.setattr(fmt, "write_manifest", boom)
    before = sorted(p.name for p in root.iterdir())
    with pytest.raises(OSError, match="disk full"):
        _commit_with_files(root, {"quarantine.parquet": b"new"})
    monkeypatch.undo()
    assert sorted(p.name for p in root.iterdir()) == before
    assert (root / name1).read_bytes() == b"old"
    # the next commit replaces the file; one without it removes it
    m2 = _commit_with_files(root, {"quarantine.parquet": b"new"})
    name2 = m2.extra["files"]["quarantine.parquet"]
    assert name2 != name1 and not (root / name1).exists()
    assert (root / name2).read_bytes() == b"new"
    _commit_with_files(root, {})
    assert sorted(p.name for p in root.iterdir()) == [fmt.MANIFEST_NAME]


def test_extra_files_leftovers_and_legacy_quarantine_table(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    root.mkdir()
    (root / "quarantine-0123abcd.parquet").write_bytes(b"moved in, never committed")
    m = _commit_with_files(root, {}, overwrite=False)  # a leftover, not a foreign file
    assert sorted(p.name for p in root.iterdir()) == [fmt.MANIFEST_NAME]
    # a dataset written before extra files were listed names its table in extra["quarantine"]
    m.extra["quarantine"] = {"file": "quarantine.parquet"}
    fmt.write_manifest(root, m)
    (root / "quarantine.parquet").write_bytes(b"legacy")
    _commit_with_files(root, {"quarantine.parquet": b"new"})
    assert not (root / "quarantine.parquet").exists()
    with pytest.raises(Exception, match="must look like"):
        _commit_with_files(root, {"../x.parquet": b""})


def _modes(top: Path, root: Path) -> dict[str, str]:
    import stat

    paths = [root.parent, root, *root.rglob("*")]
    return {str(p.relative_to(top)): oct(stat.S_IMODE(p.stat().st_mode)) for p in paths}


def test_every_path_a_write_leaves_follows_the_umask(tmp_path: Path) -> None:
    """Under umask 022 the dataset directory is 0755 and every file in it (shards, indexes,
    extra files such as the quarantine table, the manifest) 0644."""
    import os

    root = tmp_path / "nested" / "ds"
    old = os.umask(0o022)
    try:
        with ShardWriter(root, target_shard_bytes=1000) as w:
            for i in range(10):
                w.write(_sample(i), split="train" if i % 2 else "val")
        written = _modes(tmp_path, root)
        _commit_with_files(root, {"quarantine.parquet": b"q"})
        written.update(_modes(tmp_path, root))
    finally:
        os.umask(old)
    want = {k: oct(0o755 if k in ("nested", "nested/ds") else 0o644) for k in written}
    assert len(written) > 6 and any(k.endswith(".parquet") for k in written)
    assert written == want
