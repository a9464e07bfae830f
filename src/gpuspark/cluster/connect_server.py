"""The embedded cluster's Spark Connect server (``gpuspark cluster up --connect``).

One more child daemon of the embedded cluster, started once its workers registered: Spark's
``SparkConnectServer`` from the pyspark wheel (``spark-submit --class ...``), a Spark
application on the cluster with a gpuspark training session's settings there (the executor
shape and GPUs, dynamic allocation off, this Python), bound to 127.0.0.1. It holds every
executor of the cluster (:mod:`.connect_session` routes jobs accordingly). Its settings go in
a properties file of mode 600 (a secure cluster's shared secret is among them, kept off the
command line), its log in the cluster's ``logs/connect.log``, which says when it accepts
clients. With a secure cluster, clients authenticate with a token (``connect-token``).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from gpuspark._util.net import free_port
from gpuspark._util.procs import spawn_group
from gpuspark._util.spark_compat import missing
from gpuspark.cluster.conf import write_rendered
from gpuspark.cluster.driver_log import driver_java_options
from gpuspark.cluster.security import ensure_secret
from gpuspark.cluster.session import JobKind, session_plan
from gpuspark.cluster.state import ConnectState
from gpuspark.errors import ClusterError

if TYPE_CHECKING:
    from gpuspark.cluster.local import LocalCluster

__all__ = ["HOST", "check_available", "spawn", "wait_ready"]

HOST = "127.0.0.1"
"""The only address the server listens on."""
_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_READY = "Spark Connect server started at"
"""What the server logs once its gRPC port accepts clients."""
_NAME = "gpuspark-connect"
_CONF = {
    # Without a capacity check before the stage (it needs the JVM, which Connect clients
    # lack), a barrier stage larger than the free slots fails at Spark's own check: after
    # 5 tries 2 s apart here, instead of 40 tries 15 s apart (10 minutes) by default.
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "2s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "5",
}


def check_available() -> None:
    """Refuse ``--connect`` where the installed pyspark ships no Connect server."""
    problem = missing("connect-server")
    if problem is not None:
        raise ClusterError(problem, remedy="pip install 'pyspark>=4,<5', or leave out --connect")


def spawn(
    cluster: LocalCluster, port: int | None, conf: Mapping[str, str], env: dict[str, str]
) -> ConnectState:
    """Start the server of the running ``cluster`` (none may run yet) on ``port`` (default a
    free one), with ``conf`` over its settings and ``env`` (the cluster's daemon environment);
    return it without waiting (:func:`wait_ready`)."""
    check_available()
    running = cluster.state.connect if cluster.state is not None else None
    if running is not None and running.alive:
        raise ClusterError(f"a Spark Connect server already runs on this cluster: {running.url}")
    port = _port(port)
    state_dir = cluster.state_dir
    properties = _write_conf(state_dir, _conf(cluster, port, conf))
    env = {k: v for k, v in env.items() if k not in _CLIENT_SWITCHES}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    token_file = ""
    if cluster.state is not None and cluster.state.secure:
        token_file = str(state_dir / "connect-token")
        env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = ensure_secret(token_file)[0]
    log = state_dir / "logs" / "connect.log"
    cmd = [os.path.join(env["SPARK_HOME"], "bin", "spark-submit"), "--class", _CLASS]
    cmd += ["--name", _NAME, "--properties-file", str(properties)]
    offset = log.stat().st_size if log.exists() else 0
    pid = spawn_group(cmd, log, env=env, cwd=state_dir)
    # pyspark sends a token without TLS only to "localhost" (local channel credentials)
    url = f"sc://{'localhost' if token_file else HOST}:{port}"
    return ConnectState(url, pid, port, str(log), token_file, log_offset=offset)


_CLIENT_SWITCHES = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_API_MODE")
"""pyspark's process-wide switches to Connect: the server is a classic application itself."""


def _conf(cluster: LocalCluster, port: int, extra: Mapping[str, str]) -> dict[str, str]:
    """A training session's settings on ``cluster``, as the server application's."""
    plan = session_plan(
        cluster.master_url,
        cluster.spec,
        kind=JobKind.TRAINING,
        app_name=_NAME,
        cluster=cluster,
        state_dir=cluster.state_dir,
    )
    conf = dict(plan.conf)
    # The server logs with Spark's own profile into connect.log (read for readiness), not
    # into a driver log of the process that started it.
    ours = driver_java_options(None) or ""
    java = conf.pop("spark.driver.extraJavaOptions", "").replace(ours, "").strip()
    if java:
        conf["spark.driver.extraJavaOptions"] = java
    conf.update(_CONF)
    conf.update(extra)
    conf.update(
        {
            "spark.master": plan.master,
            "spark.app.name": _NAME,
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(port),
        }
    )
    return conf


def _write_conf(state_dir: Path, conf: Mapping[str, str]) -> Path:
    text = "".join(f"{k}={escape(v)}\n" for k, v in conf.items())
    conf_dir = state_dir / "conf"
    write_rendered({"connect.conf": text}, conf_dir, private=frozenset({"connect.conf"}))
    return conf_dir / "connect.conf"


def wait_ready(server: ConnectState, timeout: float) -> None:
    """Until the server's log says it accepts clients; a one-line error when it exits or
    ``timeout`` seconds pass first."""
    log = Path(server.log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log_says(log, server.log_offset, _READY):
            return
        if not server.alive:
            raise ClusterError(
                "the Spark Connect server exited during start-up", remedy=f"see {log}"
            )
        time.sleep(0.5)
    raise ClusterError(
        f"the Spark Connect server did not start within {timeout:.0f}s",
        remedy=f"see {log}; raise --timeout",
    )


def _port(port: int | None) -> int:
    """``port`` if it is free (a one-line error if not), else a free one."""
    if port is None:
        return free_port(HOST)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            raise ClusterError(
                f"--connect-port {port}: cannot listen on {HOST}:{port} ({exc.strerror})",
                remedy="name a free port, or leave out --connect-port (a free one is chosen)",
            ) from None
    return port


def escape(value: str) -> str:
    """A value as a Java properties file reads it back."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def log_says(log: Path, offset: int, text: str) -> bool:
    """Whether ``log`` has ``text`` after byte ``offset`` (what this start wrote)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            return text.encode() in fh.read()
    except OSError:
        return False
