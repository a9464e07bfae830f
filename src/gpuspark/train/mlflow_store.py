"""Reaching an MLflow store without waiting for minutes: a tracking server is asked once,
with a deadline of a few seconds, before anything talks to it (:func:`check_server`), and
MLflow's own HTTP client is bounded in every process that uses it (:func:`bound_http_client`).

MLflow's client retries a request 7 times with a growing back-off, each try waiting up to
120 s: against a server that is not there (``--mlflow http://127.0.0.1:1``) a command used to
print nothing for minutes. Now such a command stops within :data:`PROBE_TIMEOUT` seconds with
one line naming the URL, and a server that goes away during a run costs a few seconds a call
(connection refused) or at most about 50 s (a host that no longer answers) instead of minutes.

No MLflow import here: plain checks on the tracking URI.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuspark._util.net import unreachable, without_userinfo
from gpuspark.errors import GpusparkError

__all__ = [
    "HTTP_CLIENT_BOUNDS",
    "PROBE_TIMEOUT",
    "bound_http_client",
    "check_server",
    "local_store",
]

PROBE_TIMEOUT = 8.0
"""Seconds the tracking server has to answer :func:`check_server`."""
HTTP_CLIENT_BOUNDS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
}
"""MLflow's HTTP client settings gpuspark sets unless they are set already (MLflow's defaults:
120 s, 7 retries, factor 2, i.e. minutes): seconds a request waits for the server (for
connecting, and for its answer once sent), retries after a failed request, and the back-off
(0 s, then 2 s, ...). A run that uploads large models through a slow artifact proxy can raise
``MLFLOW_HTTP_REQUEST_TIMEOUT``."""


def bound_http_client() -> None:
    """Set :data:`HTTP_CLIENT_BOUNDS` in this process (and the processes it starts) where the
    user has not set them; MLflow reads them at each request."""
    for name, value in HTTP_CLIENT_BOUNDS.items():
        os.environ.setdefault(name, value)


def check_server(uri: str, *, remedy: str, timeout: float = PROBE_TIMEOUT) -> None:
    """Raise a one-line :class:`~gpuspark.errors.GpusparkError` (with ``remedy``) when the
    ``http(s)://`` tracking server ``uri`` does not answer within ``timeout`` seconds (a GET
    of its ``/health``; any HTTP answer will do). Other stores (folders, ``sqlite:``,
    ``databricks``) are not asked."""
    if not uri.startswith(("http://", "https://")):
        return
    why = unreachable(uri.rstrip("/") + "/health", timeout)
    if why is not None:
        raise GpusparkError(
            f"MLflow tracking server {without_userinfo(uri)} is not reachable: {why}",
            remedy=remedy,
        )


def local_store(uri: str) -> Path | None:
    """The file or folder of a local store (an absolute folder: MLflow's file store;
    ``sqlite:////abs/file.db``), as :func:`gpuspark.train.tracking.tracking_uri` writes them;
    ``None`` for a server or an in-memory database."""
    if uri.startswith("/"):
        return Path(uri)
    if uri.startswith("sqlite:///") and uri != "sqlite:///:memory:":
        return Path(uri[len("sqlite:///") :])
    return None
