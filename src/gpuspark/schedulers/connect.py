"""Spark Connect, ``sc://host:port``: the client talks gRPC to a Connect server, whose own
Spark application (on whatever cluster the server runs) holds the executors.

So a Connect session is ``SparkSession.builder.remote(url)``, and only session settings
(``spark.sql.*``) can be set from the client: the executors' shape, GPUs, Python, dynamic
allocation and per-application caps (``spark.cores.max``, a team's quota) are the server's
application's, fixed when the server started. Connect has no RDD API: the launcher runs its
barrier stage as a ``DataFrame.mapInArrow(..., barrier=True)``, and the data jobs that use
only the DataFrame API (``prep``, ``from_dataframe``, ``write_dataframe``) run as they are;
the others (batch prediction, doctor's live checks: accumulators, the status tracker) say
so in one line naming the classic alternative.

The client needs ``pyspark``'s ``connect`` extra (grpcio, grpcio-status,
googleapis-common-protos, zstandard, pandas, pyarrow): ``pip install 'gpuspark[connect]'``.
"""

from __future__ import annotations

import importlib.util
import re
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from gpuspark._util.spark_compat import is_connect
from gpuspark.errors import ClusterError
from gpuspark.schedulers.base import Backend

__all__ = [
    "CONNECT_EXTRA",
    "CONNECT_SCHEME",
    "ConnectBackend",
    "check_client",
    "client_conf",
    "client_session",
    "is_connect_session",
    "redact_url",
    "require_classic",
    "server_only",
]

CONNECT_SCHEME = "sc://"
CONNECT_EXTRA = "pip install 'gpuspark[connect]'"
"""What installs the client side of Spark Connect."""

_CLIENT_MODULES = {
    "grpc": "grpcio",
    "grpc_status": "grpcio-status",
    "google.rpc": "googleapis-common-protos",
    "zstandard": "zstandard",
    "pandas": "pandas",
    "pyarrow": "pyarrow",
}
"""Module -> package the Connect client imports (pyspark's ``connect`` extra)."""

_LOOPBACK = ("127.", "localhost", "::1", "[::1]")

_CLASSIC_ALTERNATIVE = (
    "use a classic master: --master spark://…, yarn or k8s://… (on this machine: "
    "`gpuspark cluster up` without --connect)"
)


def _missing_packages() -> list[str]:
    """Packages of the ``connect`` extra whose module cannot be found (nothing imported)."""
    missing = []
    for module, package in _CLIENT_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing, or hidden (None)
            found = False
        if not found:
            missing.append(package)
    return missing


def check_client(master: str) -> None:
    """Refuse in one line, naming the extra, a Connect master without the client's packages."""
    missing = _missing_packages()
    if missing:
        raise ClusterError(
            f"master={master!r} is Spark Connect, whose client needs {', '.join(missing)} "
            "(not installed)",
            remedy=CONNECT_EXTRA,
        )


def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` (a session, a context or a DataFrame) is a Spark Connect client's
    (told by its class's module: nothing is imported)."""
    return is_connect(spark)


def require_classic(spark: Any, what: str) -> None:
    """Refuse in one line, naming the classic alternative, a Spark Connect ``spark`` (session
    or DataFrame) for ``what`` (a job that uses the RDD API, which Connect lacks)."""
    if is_connect_session(spark):
        raise ClusterError(
            f"{what} does not run over Spark Connect (it uses Spark's RDD API, which "
            "Connect clients lack)",
            remedy=_CLASSIC_ALTERNATIVE,
        )


def client_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The settings of ``conf`` a Connect client can set: session (SQL) settings."""
    return {k: v for k, v in conf.items() if k.startswith("spark.sql.")}


def server_only(conf: Mapping[str, str]) -> list[str]:
    """The keys of ``conf`` only the Connect server's application can set (they do not apply
    to a client's session)."""
    return sorted(k for k in conf if not k.startswith("spark.sql."))


def client_session(url: str, conf: Mapping[str, str], token: str | None = None) -> Any:
    """A new Connect client session on ``url`` with session settings ``conf`` (``token``: the
    server's, added to the URL). Built with the Connect client's own builder, so that nothing
    process-wide switches this process's classic sessions to Connect. One-line errors when
    nothing listens there (the client would retry for minutes) or the server refuses it."""
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    _check_listening(url)
    builder = RemoteSession.builder.remote(f"{url}/;token={token}" if token else url)
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        spark = builder.create()  # sets the session settings: the first round trip
        spark.version  # noqa: B018  (a round trip even without settings)
    except Exception as exc:
        raise ClusterError(
            f"the Spark Connect server at {redact_url(url)} refused this session: "
            f"{_grpc_reason(exc)}",
            remedy="check the URL's parameters (token=, use_ssl=) and the server's log",
        ) from None
    return spark


def _grpc_reason(exc: Exception) -> str:
    """The server's own words in a gRPC error (``details = "..."``), else its first line."""
    found = re.search(r'details = "([^"]*)"', str(exc))
    return found.group(1) if found else (str(exc).strip().splitlines() or [repr(exc)])[0]


def _check_listening(url: str) -> None:
    host, port = ConnectBackend().master_address(url) or ("localhost", 15002)
    try:
        socket.create_connection((host, port), timeout=5.0).close()
    except OSError as exc:
        raise ClusterError(
            f"no Spark Connect server answers at {host}:{port} ({redact_url(url)}): "
            f"{exc.strerror or exc}",
            remedy="start one (gpuspark cluster up --connect; its URL: gpuspark cluster status) "
            "or fix the URL",
        ) from None


class ConnectBackend(Backend):
    """``sc://host:port[/;param=value…]``: a Spark Connect server."""

    name = "connect"
    example = "sc://host:port"

    def matches(self, master: str) -> bool:
        return master.startswith(CONNECT_SCHEME)

    def is_local(self, master: str) -> bool:
        return (urlparse(master).hostname or "").startswith(_LOOPBACK)

    def check_environment(self, master: str) -> None:
        check_client(master)

    def check_classic_job(self, master: str, what: str) -> None:
        """Refuse ``what``, a job that needs the RDD API, in one line naming the alternative."""
        raise ClusterError(
            f"master={master!r}: {what} does not run over Spark Connect (it uses Spark's RDD "
            "API; prep, from_dataframe and shards writes do)",
            remedy=_CLASSIC_ALTERNATIVE,
        )

    def master_address(self, master: str) -> tuple[str, int] | None:
        """The Connect server's host and gRPC port (15002 when the URL names none)."""
        url = urlparse(master.split("/;", 1)[0])
        return (url.hostname or "localhost"), url.port or 15002


def redact_url(master: str) -> str:
    """``master`` without a ``token=`` parameter's value (for messages and dry runs)."""
    base, sep, params = master.partition("/;")
    if not sep:
        return master
    shown = [p if not p.startswith("token=") else "token=***" for p in params.split(";")]
    return f"{base}/;{';'.join(shown)}"
