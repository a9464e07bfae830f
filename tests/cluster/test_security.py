"""Spark security from the spec: the shared secret, rendered conf, sessions, a secure cluster."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _proc import WILDCARD, descendants, listeners_of  # tests/_proc.py
from gpuspark.cluster.security import (
    REDACTED,
    SECRET_KEY,
    ensure_secret,
    read_secret,
    redact,
    security_conf,
)
from gpuspark.errors import ClusterError
from gpuspark.spec import example_spec, parse_spec


def _secure_spec(tmp_path: Path, **security: object) -> Path:
    text = example_spec().replace("enabled = false", "enabled = true")
    secret = tmp_path / "secret" / "spark-secret"
    text = text.replace('"~/.gpuspark/spark-secret"', f'"{secret}"')
    for key, value in security.items():
        text += f"{key} = {value!r}\n".replace("'", '"')
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return path


def test_secret_file_is_private_from_creation_and_refused_when_readable(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "spark-secret"
    secret, created = ensure_secret(path)
    assert created and len(secret) == 64 and int(secret, 16) >= 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_secret(path) == (secret, False) and read_secret(path) == secret
    assert [p.name for p in path.parent.iterdir()] == ["spark-secret"]  # no temp file left
    path.chmod(0o640)
    with pytest.raises(ClusterError, match=r"readable by others \(mode 0640\)") as err:
        read_secret(path)
    assert err.value.remedy == f"chmod 600 {path}"
    with pytest.raises(ClusterError, match="no Spark secret file"):
        read_secret(tmp_path / "missing")


def test_security_conf_from_spec(tmp_path: Path) -> None:
    spec = parse_spec(_secure_spec(tmp_path, ui_keystore="/etc/spark/ui.jks").read_text())
    conf = security_conf(spec, "s3cret")
    assert conf["spark.authenticate"] == "true" and conf[SECRET_KEY] == "s3cret"
    assert conf["spark.network.crypto.enabled"] == "true"
    assert conf["spark.io.encryption.enabled"] == "true"
    assert conf["spark.acls.enable"] == "true"
    assert conf["spark.admin.acls"] == conf["spark.modify.acls"] == "alice"
    members = {m for t in spec.teams for m in t.members} | {"alice"}
    assert set(conf["spark.ui.view.acls"].split(",")) == members
    assert conf["spark.ssl.ui.keyStore"] == "/etc/spark/ui.jks"
    assert security_conf(spec)[SECRET_KEY] == REDACTED
    assert redact(conf)[SECRET_KEY] == REDACTED
    off = parse_spec(example_spec())
    assert not off.security.enabled and security_conf(off, "x") == {}


def test_render_secure_prints_no_secret_and_writes_a_private_conf(tmp_path: Path, cli: Any) -> None:
    plain = cli("render", "spark", "examples/cluster.toml", "--secure", cwd=_root(), state=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert f"{SECRET_KEY} {REDACTED}" in plain.stdout and "spark.authenticate true" in plain.stdout
    spec = _secure_spec(tmp_path)
    out = tmp_path / "conf"
    r = cli("render", "spark", str(spec), "-o", str(out), cwd=tmp_path, state=tmp_path)
    assert r.returncode == 0, r.stderr
    secret = read_secret(tmp_path / "secret" / "spark-secret")
    assert "generated the shared secret" in r.stdout and secret not in r.stdout + r.stderr
    defaults = out / "spark-defaults.conf"
    assert stat.S_IMODE(defaults.stat().st_mode) == 0o600
    assert f"{SECRET_KEY} {secret}\n" in defaults.read_text()
    assert stat.S_IMODE((out / "metrics.properties").stat().st_mode) == 0o644
    again = cli("render", "spark", str(spec), "-o", str(out), cwd=tmp_path, state=tmp_path)
    assert "read the shared secret" in again.stdout
    assert f"{SECRET_KEY} {secret}\n" in defaults.read_text()  # the same secret, not a new one


def test_session_plan_reads_the_secret_and_the_dry_run_hides_it(tmp_path: Path) -> None:
    from gpuspark.cluster.session import session_plan

    spec = parse_spec(_secure_spec(tmp_path).read_text())
    secret, _ = ensure_secret(spec.security.secret_file)
    plan = session_plan("spark://10.0.0.1:7077", spec)
    assert plan.conf[SECRET_KEY] == secret and plan.conf["spark.authenticate"] == "true"
    assert secret not in plan.materialize() and REDACTED in plan.materialize()
    assert SECRET_KEY not in session_plan("local[2]", spec).conf  # one JVM: nothing to guard


def _root() -> Path:
    return Path(__file__).resolve().parents[2]


def _unauthenticated_client(master: str, seconds: float) -> str:
    """Output of a plain PySpark driver (no secret) trying ``master`` until it is refused."""
    code = (
        "from pyspark.sql import SparkSession\n"
        f"s = SparkSession.builder.master({master!r}).config('spark.driver.host', '127.0.0.1')"
        ".config('spark.ui.enabled', 'false').getOrCreate()\n"
        "print('REGISTERED', s.sparkContext.parallelize(range(4), 1).sum(), flush=True)\n"
    )
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []
    deadline = time.monotonic() + seconds
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "Expected SaslMessage" in line or "REGISTERED" in line:
                break
            if time.monotonic() > deadline:
                break
    finally:
        proc.kill()
        proc.wait()
    return "".join(lines)


@pytest.mark.spark
@pytest.mark.slow
def test_secure_cluster_refuses_a_client_without_the_secret(tmp_path: Path, cli: Any) -> None:
    from gpuspark.cluster.local import LocalCluster

    state = tmp_path / "state"
    up = cli("cluster", "up", "--secure", "--workers", "1", "--cores", "1", "--gpus", "0",
             cwd=tmp_path, state=state)  # fmt: skip
    assert up.returncode == 0, up.stderr
    assert "Spark authentication and RPC encryption on" in up.stdout
    cluster = LocalCluster.running(state)
    assert cluster is not None
    try:
        status = cluster.status()
        assert status.secure and stat.S_IMODE(Path(status.secret_file).stat().st_mode) == 0o600
        conf = state / "conf" / "spark-defaults.conf"
        assert stat.S_IMODE(conf.stat().st_mode) == 0o600
        out = _unauthenticated_client(cluster.master_url, 120)
        assert "Expected SaslMessage" in out and "REGISTERED" not in out, out[-2000:]
        assert cluster.state is not None
        assert "AuthRpcHandler" in Path(cluster.state.master_log).read_text()
        spark = cluster.session()
        try:
            assert spark.sparkContext.parallelize(range(10), 2).sum() == 45
            assert spark.conf.get("spark.authenticate") == "true"
        finally:
            spark.stop()
        info = cluster.master_json() or {}
        apps = info.get("completedapps", []) + info.get("activeapps", [])
        assert len(apps) == 1  # the refused client never registered an application

        # A gpuspark job that does not hold the secret (its state dir is another): one line
        # in seconds, not a minute of retries and ~100 lines of Java and Python.
        from gpuspark.schedulers import backend_for

        assert backend_for(cluster.master_url).requires_authentication(cluster.master_url)
        job = _job_without_secret(tmp_path, cli, cluster.master_url)
        _assert_one_line_about_the_secret(job, cluster.master_url, tmp_path / "other")
    finally:
        cli("cluster", "down", cwd=tmp_path, state=state)


def _job_without_secret(tmp_path: Path, cli: Any, master: str) -> subprocess.CompletedProcess:
    """``gpuspark prep parquet ... --master MASTER`` with a state dir of its own."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1.0, 2.0], "y": [0, 1]}), tmp_path / "t.parquet")
    args = ["prep", "parquet", str(tmp_path / "t.parquet"), str(tmp_path / "out"), "--label", "y"]
    return cli(*args, "--master", master, cwd=tmp_path, state=tmp_path / "other", timeout=60)


def _assert_one_line_about_the_secret(
    job: subprocess.CompletedProcess, master: str, state: Path
) -> None:
    assert job.returncode == 1, job.stdout + job.stderr
    err = job.stderr
    assert f"error: the Spark master at {master} requires authentication" in err
    assert "this job holds no shared secret" in err
    assert f"this job looked in {state}" in err and "[security] secret_file" in err
    assert "All masters are unresponsive" not in err and "SparkContext" not in err
    assert "Traceback" not in err and " ERROR " not in err
    assert [line for line in err.splitlines() if line.strip()] == [err.strip()]
    assert not (state / "driver-logs").exists()  # refused before the driver JVM started


# A stand-in for a secure master's RPC server: it answers any request as Spark's does when
# the client holds no secret (`SaslMessage.decode` in `SaslRpcHandler`, via `AuthRpcHandler`).
_SASL_REFUSAL = (
    "java.lang.IllegalStateException: Expected SaslMessage, received something else "
    "(maybe your client does not have SASL enabled?)\n\tat org.apache.spark.network.sasl."
)


def _rpc_failure(request: bytes, text: str) -> bytes:
    data = text.encode()
    body = struct.pack(">b", 5) + request[9:17] + struct.pack(">i", len(data)) + data
    return struct.pack(">q", 8 + len(body)) + body


@contextlib.contextmanager
def _fake_master(answer: str) -> Iterator[int]:
    """A loopback server answering every framed request with an ``RpcFailure`` of ``answer``."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(30)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                with conn:
                    request = conn.recv(65536)
                    conn.sendall(_rpc_failure(request, answer))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def test_the_master_is_asked_whether_it_demands_the_secret() -> None:
    from gpuspark.schedulers.standalone.rpc import master_requires_auth, probe_request

    frame = probe_request("127.0.0.1", 7077)
    assert int.from_bytes(frame[:8], "big") == len(frame) and frame[8] == 3  # an RpcRequest
    with _fake_master(_SASL_REFUSAL) as port:
        assert master_requires_auth("127.0.0.1", port) is True
    with _fake_master("org.apache.spark.SparkException: Could not find gpuspark-x.") as port:
        assert master_requires_auth("127.0.0.1", port) is False
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    assert master_requires_auth("127.0.0.1", port) is None  # nobody listens: cannot tell


def test_a_job_without_the_secret_is_refused_in_one_line(tmp_path: Path, cli: Any) -> None:
    """As a user types it, against a stand-in master (the real one: the slow test above)."""
    with _fake_master(_SASL_REFUSAL) as port:
        job = _job_without_secret(tmp_path, cli, f"spark://127.0.0.1:{port}")
    _assert_one_line_about_the_secret(job, f"spark://127.0.0.1:{port}", tmp_path / "other")


@pytest.mark.spark
def test_an_open_master_is_not_taken_for_a_secure_one(local_cluster: Any) -> None:
    from gpuspark.schedulers import backend_for

    master = local_cluster.master_url
    assert backend_for(master).requires_authentication(master) is False


# --------------------------------------------------------------------------- listeners


@pytest.mark.spark
def test_no_spark_or_gpuspark_listener_on_every_interface(local_cluster: Any, spark: Any) -> None:
    """Everything this test run started (the embedded cluster's daemons and executors, the
    session's driver with its web UI on, the executors' Python workers) listens on 127.0.0.1
    only."""
    assert spark.sparkContext.parallelize(range(8), 4).sum() == 28
    assert spark.conf.get("spark.ui.enabled") == "true"
    listeners = listeners_of(descendants({os.getpid()}))
    ports = {port for _pid, _addr, port in listeners}
    assert local_cluster.state.webui_port in ports and local_cluster.state.master_port in ports
    assert int(spark.sparkContext.uiWebUrl.rsplit(":", 1)[1]) in ports  # the driver's UI
    wide = [x for x in listeners if x[1] in WILDCARD]
    assert not wide, f"listening on every interface: {wide}"
