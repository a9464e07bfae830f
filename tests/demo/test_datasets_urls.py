"""``gpuspark datasets synth-ct s3://bucket/raw`` against the test S3 server (moto, a test tool:
``tests/_s3.py``). It used to write a local folder named ``s3:/bucket/raw`` (the path was read
through ``Path``, which folds ``//``) and report success; now the cohort is made in a temporary
folder and uploaded, its marker last, and ``prep dicom --labels s3://…`` reads the labels from
the bucket."""

from __future__ import annotations

from pathlib import Path

import pytest

from _s3 import S3Bucket
from gpuspark.data.sources.records import read_labels
from gpuspark.demo import synth_ct
from gpuspark.demo.staging import MARKER
from gpuspark.errors import DatasetExistsError


def test_synth_ct_into_a_bucket_and_its_labels_read_from_there(
    s3: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pydicom")
    monkeypatch.chdir(tmp_path)
    url = f"{s3.url}/raw"
    res = synth_ct(url, studies=2, size=16)
    assert res.path == url and res.labels_csv == f"{url}/labels.csv"
    keys = s3.keys("raw")
    assert f"raw/{MARKER}" in keys and "raw/labels.csv" in keys and "raw/cohort.json" in keys
    assert len([k for k in keys if k.startswith("raw/dicom/")]) == res.files
    assert list(tmp_path.iterdir()) == []  # no local folder named s3:
    local = synth_ct(tmp_path / "raw", studies=2, size=16)
    table = read_labels(res.labels_csv)
    assert table.mapping == read_labels(local.labels_csv).mapping and len(table.mapping) == 2
    with pytest.raises(DatasetExistsError, match="already exists and is not empty"):
        synth_ct(url, studies=2, size=16)
    again = synth_ct(url, studies=1, size=16, overwrite=True)  # fewer files: the rest go
    assert len([k for k in s3.keys("raw") if k.startswith("raw/dicom/")]) == again.files
