"""Prep output is committed whole or not at all: the quarantine table is part of the commit,
a failed or empty re-run leaves the old dataset (shards, manifest, quarantine table) intact."""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpuspark.data import format as fmt
from gpuspark.data.prep import PrepError, prep_dicom, prep_images
from gpuspark.demo import synth_ct, synth_images

pytestmark = pytest.mark.spark


def _snapshot(ds: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(ds.iterdir())}


def _assert_consistent(ds: Path) -> fmt.Manifest:
    """The committed dataset verifies and its quarantine table matches its counts."""
    m = fmt.load_manifest(ds)
    assert fmt.verify_dataset(ds) == []
    table = ds / m.extra["files"]["quarantine.parquet"]
    assert pq.read_table(table).num_rows == m.extra["quarantine"]["files"]
    assert sorted(p.name for p in ds.glob("quarantine*")) == [table.name]  # nothing stale
    return m


def _images(root: Path, good: int, bad: int, seed: int = 1) -> Path:
    synth_images(root, classes=2, per_class=good // 2, seed=seed)
    for i in range(bad):
        (root / "class_00" / f"bad-{i}.jpg").write_bytes(b"\xff\xd8 not an image")
    return root


def _dicom(root: Path, junk: int) -> Path:
    synth_ct(root, studies=2, seed=3, size=16)
    for i in range(junk):
        (root / "dicom" / f"junk-{i}.dcm").write_bytes(b"not a DICOM file")
    return root / "dicom"


def _fail_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the commit at its last step: shards and quarantine table are in place."""

    def boom(*_a: object) -> None:
        raise OSError("injected: disk full before the manifest")

    monkeypatch.setattr(fmt, "write_manifest", boom)


@pytest.mark.parametrize("kind", ["images", "dicom"])
def test_failed_overwrite_keeps_the_old_dataset_whole(
    kind: str, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = tmp_path / "ds"
    if kind == "images":
        res = prep_images(_images(tmp_path / "a", 8, 2), ds, world_size=2, spark=spark)
        again = _images(tmp_path / "b", 6, 3, seed=2)
    else:
        src = _dicom(tmp_path / "a", 2)
        res = prep_dicom(src, ds, shape=(8, 8, 8), split=None, world_size=2, spark=spark)
        again = src
    assert res.quarantined >= 2 and res.quarantine_path
    m_old = _assert_consistent(ds)
    before = _snapshot(ds)
    _fail_manifest(monkeypatch)
    with pytest.raises(OSError, match="injected"):
        if kind == "images":
            prep_images(again, ds, world_size=2, overwrite=True, spark=spark)
        else:
            prep_dicom(again, ds, shape=(8, 8, 8), split=None, overwrite=True, spark=spark)
    monkeypatch.undo()
    assert _snapshot(ds) == before
    assert _assert_consistent(ds).extra == m_old.extra


def test_empty_or_all_bad_rerun_fails_and_changes_nothing(spark, tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    prep_images(_images(tmp_path / "a", 4, 1), ds, spark=spark)
    before = _snapshot(ds)
    empty = tmp_path / "empty"
    (empty / "class_00").mkdir(parents=True)
    with pytest.raises(PrepError, match="holds no files"):
        prep_images(empty, ds, overwrite=True, spark=spark)
    assert _snapshot(ds) == before
    with pytest.raises(PrepError, match="holds no files"):
        prep_dicom(empty, ds, overwrite=True, spark=spark)
    assert _snapshot(ds) == before
    bad = tmp_path / "bad"
    (bad / "class_00").mkdir(parents=True)
    for i in range(3):
        (bad / "class_00" / f"{i}.jpg").write_bytes(b"broken")
    with pytest.raises(PrepError, match=r"no records: 3 of 3 inputs were quarantined .*image"):
        prep_images(bad, ds, overwrite=True, spark=spark)
    assert _snapshot(ds) == before
    with pytest.raises(PrepError, match=r"no records: 3 of 3 inputs .*not a DICOM file \(3\)"):
        prep_dicom(bad, ds, overwrite=True, spark=spark)
    assert _snapshot(ds) == before
    _assert_consistent(ds)


def test_rerun_replaces_the_quarantine_table_and_warns_when_most_are_bad(
    spark, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ds = tmp_path / "ds"
    src = _images(tmp_path / "a", 2, 3)
    with caplog.at_level(logging.WARNING, logger="gpuspark"):
        res = prep_images(src, ds, spark=spark)
    assert res.quarantined == 3 and "3 of 5 inputs were quarantined" in caplog.text
    old_table = Path(res.quarantine_path or "")
    for bad in src.rglob("bad-*"):
        bad.unlink()
    res2 = prep_images(src, ds, overwrite=True, spark=spark)
    assert res2.quarantined == 0 and not old_table.exists()
    assert pq.read_table(res2.quarantine_path).num_rows == 0
    _assert_consistent(ds)


def test_images_splits_by_relative_path(spark, tmp_path: Path) -> None:
    src = _images(tmp_path / "a", 20, 0)
    res = prep_images(src, tmp_path / "ds", split=(0.7, 0.3), world_size=2, spark=spark)
    assert set(res.splits) == {"train", "val"} and sum(res.splits.values()) == 20
    m = fmt.load_manifest(tmp_path / "ds")
    assert all(len(paths) % 2 == 0 for paths in m.splits.values())
    shutil.copytree(src, tmp_path / "b")
    res2 = prep_images(tmp_path / "b", tmp_path / "ds2", split=(0.7, 0.3), spark=spark)
    assert res2.splits == res.splits  # the same files land in the same splits


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs: a real disk that fills up (mounting one needs root, as in CI)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    cmd = ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.slow  # two prep runs through the CLI: ~100 s
def test_disk_full_fails_in_one_line_and_keeps_the_old_dataset(
    spark,
    local_cluster,
    small_disk: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`gpuspark prep images --overwrite` onto a disk that fills up mid-write (a task's
    ENOSPC): exit 1 with one error line, the old dataset byte for byte, nothing else left."""
    from gpuspark.cli.main import main

    monkeypatch.setenv("GPUSPARK_STATE_DIR", str(local_cluster.state_dir))
    ds = small_disk / "ds"
    assert main(["prep", "images", str(_images(tmp_path / "a", 8, 0)), str(ds), "--json"]) == 0
    m_old = _assert_consistent(ds)
    before = _snapshot(ds)
    big = tmp_path / "b"
    synth_images(big, classes=2, per_class=40, seed=2)  # ~0.5 MB of shards: does not fit
    capsys.readouterr()
    assert main(["prep", "images", str(big), str(ds), "--overwrite", "--json"]) == 1
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert errors == [
        "error: prep images: no space left on device; nothing was written; the old dataset, "
        "if any, is unchanged (free space where the output goes, or write it elsewhere)"
    ]
    assert _snapshot(ds) == before and _assert_consistent(ds).extra == m_old.extra
    assert [p.name for p in small_disk.iterdir()] == ["ds"]  # no staging, no partial shard
