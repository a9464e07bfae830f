"""Spark end-to-end preprocessing on the embedded cluster: shards, quarantine, counts."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from pydicom.data import get_testdata_file

from gpuspark.data.format import decode_example, iter_records, load_manifest
from gpuspark.demo import load_cohort, synth_ct, synth_images

pytestmark = pytest.mark.spark


def _records(root: Path) -> list[dict]:
    m = load_manifest(root)
    out = []
    for split, paths in (m.splits or {None: [s.path for s in m.shards]}).items():
        for p in paths:
            for rec in iter_records(root / p):
                out.append({**decode_example(rec, m.schema), "_split": split})
    return out


def _corrupt_copies(src: Path, dst: Path, rng: random.Random, n: int) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    files = sorted(p for p in src.rglob("*") if p.is_file())
    for i, f in enumerate(rng.sample(files, n)):
        data = bytearray(f.read_bytes())
        if i % 2:
            data = data[: rng.randrange(1, len(data))]
        else:
            for _ in range(4):
                j = rng.randrange(len(data))
                data[j] ^= 0xFF
        (dst / f"fuzz-{i}{f.suffix}").write_bytes(bytes(data))


def test_prep_dicom_end_to_end(spark, tmp_path: Path) -> None:
    from gpuspark.data.prep import prep_dicom

    cohort = tmp_path / "cohort"
    synth_ct(cohort, studies=4, seed=5, size=32)
    src = cohort / "dicom"
    junk = src / "junk"
    junk.mkdir()
    for name in ("CT_small.dcm", "MR_small_RLE.dcm", "rtdose.dcm", "test-SR.dcm", "no_meta.dcm"):
        shutil.copy(get_testdata_file(name), junk / name)
    (junk / "notes.txt").write_text("not a DICOM file")
    _corrupt_copies(src / "flat", junk / "fuzz", random.Random(3), 4)
    inputs = sum(1 for p in src.rglob("*") if p.is_file())
    seen: list[dict] = []
    res = prep_dicom(
        src,
        tmp_path / "ds",
        labels=cohort / "labels.csv",
        shape=(16, 24, 24),
        world_size=2,
        spark=spark,
        progress=seen.append,
    )
    # every input file is in a row or in quarantine
    assert res.inputs == inputs
    assert res.files_in_rows + res.quarantined == res.inputs
    assert res.quarantined >= 7 and res.quarantine_path
    import pyarrow.parquet as pq

    q = pq.read_table(res.quarantine_path).to_pylist()
    assert len(q) == res.quarantined and all(r["reason"] for r in q)
    assert any("not a DICOM" in r["reason"] for r in q)
    # the rtdose multi-frame has no label in labels.csv -> quarantined for that reason
    assert any("no label" in r["reason"] for r in q)
    recs = _records(tmp_path / "ds")
    params = {p.series_uid: p for p in load_cohort(cohort)}
    assert len(recs) == res.rows
    assert {r["series_uid"] for r in recs} <= set(params)
    for r in recs:
        assert r["volume"].shape == (16, 24, 24) and r["volume"].dtype == np.uint8
        assert r["label"] == params[r["series_uid"]].label
    # no patient in two splits
    by_patient: dict[str, set] = {}
    for r in recs:
        by_patient.setdefault(r["patient_hash"], set()).add(r["_split"])
    assert all(len(s) == 1 for s in by_patient.values())
    m = load_manifest(tmp_path / "ds")
    assert m.extra["quarantine"]["files"] == res.quarantined
    assert m.extra["label_map"] == {"0": "0", "1": "1"}
    assert m.extra["prep"]["shape"] == [16, 24, 24]
    assert all(len(paths) % 2 == 0 for paths in m.splits.values())  # balanced for 2 ranks
    assert seen and seen[-1]["tasks_done"] == seen[-1]["tasks_total"] > 0


def test_prep_images_end_to_end(spark, tmp_path: Path) -> None:
    from gpuspark.data.prep import prep_images

    src = tmp_path / "imgs"
    synth_images(src, classes=3, per_class=6, seed=2)
    _corrupt_copies(src / "class_01", src / "class_02", random.Random(5), 4)
    (src / "stray.jpg").write_bytes(b"\xff\xd8 no class folder")
    (src / "class_00" / "README.txt").write_text("hi")
    # Spark lists no hidden file (synth_images' marker): every other file is an input
    inputs = sum(1 for p in src.rglob("*") if p.is_file() and not p.name.startswith("."))
    res = prep_images(src, tmp_path / "ds", mode="predecode", size=24, world_size=2, spark=spark)
    assert res.inputs == inputs and res.rows + res.quarantined == inputs
    assert res.quarantined >= 4  # stray, README, truncated copies
    assert res.label_map == {"0": "class_00", "1": "class_01", "2": "class_02"}
    recs = _records(tmp_path / "ds")
    assert len(recs) == res.rows
    assert all(r["image"].shape == (24, 24, 3) for r in recs)
    assert {r["label_name"] for r in recs} == {"class_00", "class_01", "class_02"}
    m = load_manifest(tmp_path / "ds")
    assert json.loads(json.dumps(m.extra))["label_map"]["1"] == "class_01"


def test_image_classes_come_from_one_listing_job(spark, tmp_path: Path) -> None:
    """The class names of ``prep images``: a folder's files share its class, so one path per
    (folder, image extension) names it; folders of non-images, and files directly in the
    source, are no class; a nested folder is its top folder's class."""
    from gpuspark.data.prep.images import _list_classes
    from gpuspark.data.sources import ImageSource

    src = tmp_path / "imgs"
    layout = {
        "cat/0-notes.txt": b"sorts before the images",
        "cat/1.jpg": b"x",
        "dog/2.PNG": b"x",
        "owl/young/3.jpeg": b"x",
        "docs/readme.md": b"not an image",
        "stray.jpg": b"no class folder",
    }
    for rel, data in layout.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    files, n_files, names = _list_classes(spark, str(src), ImageSource(str(src)))
    try:
        assert n_files == len(layout) == files.count()
        assert names == ["cat", "dog", "owl"]
    finally:
        files.unpersist()


def test_prep_dicom_refuses_a_source_without_files(spark, tmp_path: Path) -> None:
    from gpuspark.data.prep import PrepError, prep_dicom

    src = tmp_path / "src"
    (src / "empty" / "nested").mkdir(parents=True)
    with pytest.raises(PrepError, match="holds no files"):
        prep_dicom(src, tmp_path / "ds", spark=spark)
    assert not (tmp_path / "ds" / "manifest.json").exists()
