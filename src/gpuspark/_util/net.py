"""Ports and HTTP: one free-port helper and one GET helper (timeout, retry) for every client
of a web API in gpuspark: Spark's master page, Prometheus, the ranks' ``/metrics``, YARN's
ResourceManager and the Kubernetes API server; and :func:`unreachable`, the up-front check
that a server answers at all (MLflow's tracking server) within a hard deadline."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

__all__ = ["free_port", "http_get", "http_get_json", "unreachable", "without_userinfo"]

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


def without_userinfo(url: str) -> str:
    """``url`` without a ``user:password@`` part (for messages and for urllib, which takes
    none)."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def unreachable(url: str, timeout: float = 5.0) -> str | None:
    """Why the server of the ``http(s)://`` ``url`` cannot be reached: ``"connection
    refused"``, ``"host not found ..."``, ``"no answer within 5 s"``, ...; ``None`` when it
    answered at all (any HTTP status, or a TLS handshake that failed: the client that talks
    to it has its own TLS settings). One GET of ``url``, given up after ``timeout`` seconds
    whatever blocks (urlopen's own timeout bounds each socket step, not the name lookup)."""
    outcome: list[str | None] = []
    thread = threading.Thread(
        target=lambda: outcome.append(_get_failure(without_userinfo(url), timeout)),
        name="gpuspark-reachable",
        daemon=True,  # a lookup that never returns must not keep the process alive
    )
    thread.start()
    thread.join(timeout + 0.5)
    return outcome[0] if outcome else f"no answer within {timeout:g} s"


def _get_failure(url: str, timeout: float) -> str | None:
    """The reason a GET of ``url`` got no HTTP answer, or ``None`` when it got one."""
    try:
        http_get(url, timeout=timeout)
    except urllib.error.HTTPError:
        return None  # an error status is an answer
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ssl.SSLError):
            return None
        return _reason(exc.reason, timeout)
    except http.client.HTTPException:
        return None  # something answered, if not in HTTP: the client will say what
    except OSError as exc:
        return _reason(exc, timeout)
    return None


def _reason(error: BaseException | str, timeout: float) -> str:
    """A few words for a socket error."""
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, TimeoutError | socket.timeout):
        return f"no answer within {timeout:g} s"
    if isinstance(error, socket.gaierror):
        return f"host not found: {error.strerror or error}"
    if isinstance(error, ConnectionResetError):
        return "the connection was closed without an answer"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror[:200]
    return str(error).splitlines()[0][:200] if str(error) else type(error).__name__
