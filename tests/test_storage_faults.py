"""Writes and reads on S3 through a network that breaks: the test S3 server (moto) behind
``tests/_faultproxy.py``, a TCP proxy (a test tool) that resets every Nth connection midway,
or every connection (the server stopped). Resets are retried by the client library's own
retry settings (botocore's, through s3fs), and the result is the same bytes; a write that
fails after its retries leaves nothing visible."""

from __future__ import annotations

import io
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from _faultproxy import FaultProxy, fault_proxy
from _s3 import S3Bucket
from gpuspark import storage


@pytest.fixture
def flaky(s3: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """The test S3 server behind a proxy resetting every 3rd connection after 2 KiB sent."""
    import s3fs

    port = urlsplit(s3.endpoint).port
    assert port is not None
    with fault_proxy(port, every=3, cut_after=2048) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        s3fs.S3FileSystem.clear_instance_cache()  # clients made before know the direct endpoint
        try:
            yield proxy
        finally:
            s3fs.S3FileSystem.clear_instance_cache()  # later tests: the direct endpoint again


def _model(seed: int) -> object:
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 2))


@pytest.mark.slow  # about 10 s: the client backs off before each retry
def test_checkpoints_and_predictions_survive_reset_connections(
    s3: S3Bucket, flaky: FaultProxy
) -> None:
    import pyarrow as pa
    import torch

    from gpuspark.infer.output import check_destination, staged_output, write_marker, write_table
    from gpuspark.train import checkpoint as ck

    run = f"{s3.url}/run"
    model = _model(1)
    for step in (1, 2, 3):
        ck.save(run, model=model, epoch=0, step=step)
    assert [p.name for p in ck.list_checkpoints(run)][-1] == "step-000000003.pt"
    fresh = _model(2)
    ck.load(ck.latest(run), model=fresh)
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True):  # type: ignore[attr-defined]
        assert torch.equal(a, b)
    root = check_destination(f"{s3.url}/preds", False, None)
    with staged_output(root, False) as tmp:
        write_table(tmp, pa.table({"x": list(range(5000))}))
        write_marker(tmp, {"rows": 5000})
    data = storage.read_bytes(storage.as_path(f"{s3.url}/preds/part-00000.parquet"))
    import pyarrow.parquet as pq

    assert pq.read_table(io.BytesIO(data)).column("x").to_pylist() == list(range(5000))
    assert flaky.cut > 0, "the proxy cut no connection: the test proved nothing"


def test_a_write_to_a_stopped_server_is_one_line_and_leaves_nothing(
    s3: S3Bucket, flaky: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow as pa

    from gpuspark.errors import GpusparkError
    from gpuspark.infer.output import check_destination, staged_output, write_marker, write_table

    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")  # the client's own retry setting, kept short
    root = check_destination(f"{s3.url}/preds", False, None)
    with pytest.raises(Exception) as err, staged_output(root, False) as tmp:
        write_table(tmp, pa.table({"x": [1, 2, 3]}))
        flaky.down()  # the server stops before the marker, the commit's last write
        write_marker(tmp, {"rows": 3})
    failed = storage.store_failure(err.value)
    assert isinstance(failed, GpusparkError), repr(err.value)
    assert "\n" not in str(failed) and "object store failed" in str(failed)
    flaky.up()
    keys = s3.keys("preds")
    assert not [k for k in keys if not k.startswith("preds/_staging-")], keys  # nothing visible
