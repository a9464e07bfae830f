"""``predict -o s3://bucket/preds`` against the test S3 server (moto, a test tool; see
``tests/_s3.py``). It used to be refused ("destination s3://… is a remote URL"); now the
predictions folder is staged below the URL and committed without a rename
(:mod:`gpuspark.infer.store_output`): marker last, an earlier run's files kept until then, a
failed run leaving them as they were, nothing of a staging prefix left."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_predict_parts import _best_pt

from _s3 import S3Bucket
from gpuspark import storage
from gpuspark.errors import DatasetExistsError, GpusparkError
from gpuspark.infer import MARKER, predict
from gpuspark.infer.output import check_destination, staged_output, write_marker, write_table
from gpuspark.storage import RemotePath


def _table(value: int) -> Any:
    import pyarrow as pa

    return pa.table({"x": [value]})


def _commit(url: str, value: int) -> None:
    root = check_destination(url, True, None)
    with staged_output(root, True) as tmp:
        write_table(tmp, _table(value))
        write_marker(tmp, {"rows": 1})


def _x(s3: S3Bucket, prefix: str) -> list[int]:
    import pyarrow.parquet as pq

    fs, inner = storage.filesystem(f"{s3.url}/{prefix}/part-00000.parquet")
    with fs.open(inner, "rb") as f:
        return list(pq.read_table(f).column("x").to_pylist())


def test_commit_replaces_earlier_predictions_and_a_failure_keeps_them(s3: S3Bucket) -> None:
    url = f"{s3.url}/preds"
    _commit(url, 1)
    assert s3.keys() == ["preds/_gpuspark-predict.json", "preds/part-00000.parquet"]
    marker = json.loads(storage.read_bytes(RemotePath(url) / MARKER))
    assert marker["files"] == ["part-00000.parquet"] and marker["rows"] == 1
    with pytest.raises(RuntimeError), staged_output(check_destination(url, True, None), True) as t:
        write_table(t, _table(2))
        raise RuntimeError("the Spark job failed")
    assert _x(s3, "preds") == [1]
    assert s3.keys() == ["preds/_gpuspark-predict.json", "preds/part-00000.parquet"]
    _commit(url, 3)
    assert _x(s3, "preds") == [3]
    assert s3.keys() == ["preds/_gpuspark-predict.json", "preds/part-00000.parquet"]


def test_destination_rules_on_a_bucket(s3: S3Bucket) -> None:
    url = f"{s3.url}/preds"
    _commit(url, 1)
    with pytest.raises(DatasetExistsError, match="--overwrite"):
        check_destination(url, False, None)
    fs, inner = storage.filesystem(f"{url}/notes.txt")
    fs.pipe_file(inner, b"mine")
    with pytest.raises(DatasetExistsError, match=r"did not write \(notes.txt\)"):
        check_destination(url, True, None)
    with pytest.raises(GpusparkError, match="overlaps the input"):
        check_destination(f"{s3.url}/in/out", False, f"{s3.url}/in")
    with pytest.raises(GpusparkError, match="bucket does not exist"):
        check_destination("s3://no-such-bucket-gpuspark/preds", False, None)
    assert check_destination(f"s3a://{s3.url[5:]}/new", False, None) == RemotePath(f"{s3.url}/new")


@pytest.mark.slow  # about 45 s: two scoring runs, the Python workers load torch
@pytest.mark.spark
def test_predictions_in_the_bucket_equal_the_local_ones(
    spark: Any, s3: S3Bucket, tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    best = _best_pt(tmp_path)
    rows = 40
    src = tmp_path / "table.parquet"
    pq.write_table(
        pa.table(
            {
                "customer_id": [f"c{i:03d}" for i in range(rows)],
                "income": [float(i) for i in range(rows)],
                "age": [20.0 + i % 50 for i in range(rows)],
                "region": ["north" if i % 3 else "east" for i in range(rows)],  # east: unseen
            }
        ),
        src,
    )
    df = spark.read.parquet(str(src)).repartition(3)
    local = predict(df, best, tmp_path / "preds", spark=spark)
    remote = predict(df, best, f"{s3.url}/preds", spark=spark)
    assert remote.output == f"{s3.url}/preds" and remote.rows == local.rows == rows
    keys = s3.keys()
    assert "preds/_gpuspark-predict.json" in keys
    assert not [k for k in keys if "_staging-" in k or "_attempts" in k]
    assert len([k for k in keys if k.startswith("preds/part-")]) == 3  # one per partition
    fs, inner = storage.filesystem(f"{s3.url}/preds")
    ours = pq.read_table(inner, filesystem=fs).sort_by("customer_id")
    theirs = pq.read_table(tmp_path / "preds").sort_by("customer_id")
    assert ours.to_pylist() == theirs.to_pylist()
    marker = json.loads(storage.read_bytes(RemotePath(f"{s3.url}/preds") / MARKER))
    listed = {f"preds/{f}" for f in marker["files"]} | {"preds/" + MARKER}
    assert listed == set(keys)
    assert not any(p.name.startswith("s3:") for p in Path.cwd().iterdir())
