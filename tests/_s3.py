"""A real S3-protocol server for the tests: moto's server mode on 127.0.0.1 (a test tool: the
same server s3fs and pyarrow test against), reached through s3fs exactly as a user reaches AWS
S3 or MinIO, only ``AWS_ENDPOINT_URL`` differs.

``s3_server`` (session) starts it once; ``s3`` (per test) sets the standard AWS variables of
this process (so the CLI's subprocesses and the ranks inherit them) and makes a fresh bucket.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

ACCESS_KEY = "gpuspark-test-access-key"
SECRET_KEY = "gpuspark-test-SECRET-7f3a9c"  # planted: outputs must never show it


@dataclass(frozen=True)
class S3Bucket:
    """A fresh bucket on the test server."""

    url: str
    """``s3://<bucket>``"""
    endpoint: str

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key under ``prefix`` (no leading bucket), sorted."""
        import s3fs

        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": self.endpoint})
        bucket = self.url.removeprefix("s3://")
        found = fs.find(f"{bucket}/{prefix}".rstrip("/"), refresh=True)
        return sorted(k.removeprefix(bucket + "/") for k in found)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """The endpoint URL of a moto S3 server on 127.0.0.1, for the whole session."""
    pytest.importorskip("s3fs", reason="the [s3] extra (make setup installs it)")
    server_mod = pytest.importorskip("moto.server", reason="moto[server] (make setup)")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    """A new bucket, with this process's AWS variables pointing at the test server."""
    import fsspec

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    bucket = f"gpuspark-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    return S3Bucket(url=f"s3://{bucket}", endpoint=s3_server)
