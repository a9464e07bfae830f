"""``prep`` writes datasets to object stores, against a real S3-protocol server (the kill test
is in ``test_prep_faults.py``).

``prep dicom SRC s3://bucket/shards`` used to be refused ("is a remote URL"). Each task attempt
now writes its shard under its own staging prefix, the driver copies the winning attempts'
objects to their final names and uploads the manifest last; the staging prefix goes after the
commit. The same job to a local folder gives shards of the same content (hashes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _s3 import S3Bucket
from gpuspark.data.format import iter_records, load_manifest
from gpuspark.demo import synth_ct

pytestmark = pytest.mark.spark


def _contents(manifest: object) -> list[tuple[str, int, str]]:
    """(split, records, content hash) of every shard: what must not depend on where."""
    m = manifest
    split_of = {p: name for name, paths in m.splits.items() for p in paths}  # type: ignore[attr-defined]
    return sorted((split_of.get(s.path, ""), s.records, s.hash) for s in m.shards)  # type: ignore[attr-defined]


def _by_series(root: str) -> dict[str, dict[str, object]]:
    from gpuspark.data.format import decode_example

    m = load_manifest(root)
    out = {}
    for split, paths in m.splits.items():
        for p in paths:
            for rec in iter_records(f"{root}/{p}"):
                row = decode_example(rec, m.schema)
                out[str(row["series_uid"])] = {**row, "_split": split}
    return out


def _same(x: object, y: object) -> bool:
    import numpy as np

    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return bool(np.array_equal(x, y))  # type: ignore[arg-type]
    return x == y


def test_prep_dicom_to_s3_matches_the_local_run(spark, tmp_path: Path, s3: S3Bucket) -> None:
    from gpuspark import storage
    from gpuspark.data.prep import prep_dicom
    from gpuspark.data.write import write_dataframe
    from gpuspark.errors import DatasetExistsError

    cohort = tmp_path / "cohort"
    synth_ct(cohort, studies=2, seed=5, size=32)
    (cohort / "dicom" / "notes.txt").write_text("not a DICOM file")  # one quarantined input
    args = {"labels": cohort / "labels.csv", "shape": (8, 16, 16), "world_size": 2}
    local = prep_dicom(cohort / "dicom", tmp_path / "ds", spark=spark, **args)
    remote = prep_dicom(cohort / "dicom", f"{s3.url}/shards", spark=spark, **args)
    assert (remote.rows, remote.quarantined) == (local.rows, local.quarantined)
    m_local, m_remote = load_manifest(tmp_path / "ds"), load_manifest(f"{s3.url}/shards")
    a, b = _by_series(f"{s3.url}/shards"), _by_series(str(tmp_path / "ds"))
    assert a.keys() == b.keys()
    diff = {(k, f) for k in a for f in a[k] if not _same(a[k][f], b[k].get(f))}
    assert not diff, sorted(diff)[:5]
    assert _contents(m_remote) == _contents(m_local)
    keys = s3.keys("shards")
    assert "shards/manifest.json" in keys
    assert not [k for k in keys if "_gpuspark_staging-" in k or "/." in k], keys  # no leftovers
    expected = {f"shards/{s.path}" for s in m_remote.shards}
    expected |= {f"shards/{s.index}" for s in m_remote.shards}
    expected |= {f"shards/{f}" for f in m_remote.extra["files"].values()}
    assert set(keys) == expected | {"shards/manifest.json"}
    assert remote.quarantine_path is not None and remote.quarantine_path.startswith(s3.url)
    # the records read back from the bucket are the local run's
    first = m_remote.shards[0]
    there = list(iter_records(f"{s3.url}/shards/{first.path}"))
    here_name = next(s.path for s in m_local.shards if s.hash == first.hash)
    assert there == list(iter_records(str(tmp_path / "ds" / here_name)))

    # a second write is refused before any Spark job; --overwrite replaces only the dataset's
    # own objects (an object of the user's beside it stays)
    storage.atomic_write_text(f"{s3.url}/shards/README.md", "mine")
    before = set(s3.keys("shards"))
    with pytest.raises(DatasetExistsError, match="already holds a gpuspark dataset"):
        prep_dicom(cohort / "dicom", f"{s3.url}/shards", spark=spark, **args)
    assert set(s3.keys("shards")) == before
    df = spark.createDataFrame([(i, f"row {i}") for i in range(6)], "id long, text string")
    write_dataframe(df.repartition(2), f"{s3.url}/shards", overwrite=True)
    m = load_manifest(f"{s3.url}/shards")
    assert m.total_records == 6 and len(m.shards) == 2
    owned = {f"shards/{p}" for s in m.shards for p in (s.path, s.index)}
    assert set(s3.keys("shards")) == owned | {"shards/manifest.json", "shards/README.md"}
