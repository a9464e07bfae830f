"""Ports and HTTP: one free-port helper and one GET helper (timeout, retry) for every client
of a web API in gpuspark: Spark's master page, Prometheus, the ranks' ``/metrics``, YARN's
ResourceManager and the Kubernetes API server."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = ["free_port", "http_get", "http_get_json"]

_BACKOFF = 0.2
"""Seconds before the first retry; doubled for each next one."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (``""``: on every interface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def http_get(
    url: str,
    *,
    timeout: float = 5.0,
    retries: int = 0,
    headers: dict[str, str] | None = None,
    context: Any = None,
) -> bytes:
    """The body of a GET of ``url``; retried ``retries`` times after a connection error or a
    timeout (not after an HTTP error status, which is an answer). Raises what
    :func:`urllib.request.urlopen` raises (``HTTPError``, ``URLError``, ``OSError``)."""
    request = urllib.request.Request(url, headers=headers or {})
    for attempt in range(retries + 1):
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
                return bytes(resp.read())
        except urllib.error.HTTPError:
            raise
        except OSError:
            if attempt == retries:
                raise
            time.sleep(_BACKOFF * 2**attempt)
    raise AssertionError("unreachable")


def http_get_json(url: str, **kwargs: Any) -> Any:
    """:func:`http_get` decoded as JSON (``ValueError`` when it is not JSON)."""
    headers = {"Accept": "application/json", **(kwargs.pop("headers", None) or {})}
    return json.loads(http_get(url, headers=headers, **kwargs).decode("utf-8"))
