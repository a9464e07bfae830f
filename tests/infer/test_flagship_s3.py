"""The flagship pipeline with every path in a bucket of the test S3 server (moto, a test tool:
``tests/_s3.py``), side by side with the same run on local paths:

``datasets synth-ct s3://…/raw`` → ``prep dicom s3://…/raw/dicom s3://…/shards`` →
``train resnet3d --data s3://…/shards --checkpoint-dir s3://…/ck`` →
``predict dicom s3://…/raw/dicom --model s3://…/ck -o s3://…/preds``.

The shards' content hashes, the final weights (bit for bit) and the predictions equal the
local run's, and no local folder named after a URL (``s3:``) appears."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from _s3 import SECRET_KEY, S3Bucket
from gpuspark import storage

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # about 3 minutes: two whole pipelines

SHAPE = (8, 16, 16)


def _pipeline(root: str, work: Path, spark: Any) -> dict[str, Any]:
    """One run of the pipeline below ``root`` (a local folder or a bucket URL)."""
    from gpuspark.cli.main import main
    from gpuspark.data.format import load_manifest
    from gpuspark.data.prep import prep_dicom
    from gpuspark.demo import synth_ct
    from gpuspark.infer import predict

    synth_ct(f"{root}/raw", studies=4, seed=3, size=16)
    prep_dicom(
        f"{root}/raw/dicom",
        f"{root}/shards",
        labels=f"{root}/raw/labels.csv",
        shape=SHAPE,
        world_size=1,
        spark=spark,
    )
    code = main(
        [
            "train", "resnet3d", "--data", f"{root}/shards", "--epochs", "2",
            "--batch-size", "2", "--width", "0.25", "--local", "--num-processes", "1",
            "--metrics-port", "0", "--val-split", "none", "--train-split", "all",
            "--checkpoint-dir", f"{root}/ck",
        ]
    )  # fmt: skip
    assert code == 0
    res = predict(f"{root}/raw/dicom", f"{root}/ck", f"{root}/preds", kind="dicom", spark=spark)
    return {
        "manifest": load_manifest(f"{root}/shards"),
        "best": storage.read_bytes(storage.as_path(f"{root}/ck/best.pt")),
        "preds": _table(f"{root}/preds"),
        "rows": res.rows,
    }


def _table(folder: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    where = storage.as_path(folder)
    rows: list[dict[str, Any]] = []
    for name in storage.names(where):
        if name.endswith(".parquet") and not name.startswith(("_", ".")):
            rows += pq.read_table(io.BytesIO(storage.read_bytes(where / name))).to_pylist()
    return sorted(rows, key=lambda r: str(r["id"]))


def _weights(data: bytes) -> dict[str, Any]:
    import torch

    return dict(torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)["model"])


def test_the_pipeline_on_s3_equals_the_local_run(
    spark: Any, s3: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: Any
) -> None:
    pytest.importorskip("pydicom")
    monkeypatch.chdir(tmp_path)
    here = _pipeline(str(tmp_path / "local"), tmp_path, spark)
    there = _pipeline(f"{s3.url}/flagship", tmp_path, spark)
    contents = [
        sorted((s.records, s.hash) for s in m.shards) for m in (here["manifest"], there["manifest"])
    ]
    assert contents[0] == contents[1]
    a, b = _weights(here["best"]), _weights(there["best"])
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)
    assert there["rows"] == here["rows"] == 4
    assert [r["prediction"] for r in there["preds"]] == [r["prediction"] for r in here["preds"]]
    keys = s3.keys("flagship")
    assert not [k for k in keys if "_staging" in k or "_attempts" in k], keys
    assert not [str(p) for p in tmp_path.rglob("*") if p.name.endswith(":")]
    out, err = capfd.readouterr()
    assert SECRET_KEY not in out + err
