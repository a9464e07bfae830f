"""Whether a standalone master demands Spark's shared secret, asked in one RPC round trip.

A driver without the secret learns it the slow way: its registration is refused three times
20 s apart, then Spark gives up with "All masters are unresponsive" and a hundred lines of
Java and Python. Spark's RPC server says why at once, though: to an unauthenticated request
a master with ``spark.authenticate`` answers ``Expected SaslMessage, received something else
(maybe your client does not have SASL enabled?)`` (``SaslMessage.decode``, reached through
``AuthRpcHandler``), while an open master answers that the endpoint asked for does not exist.

:func:`master_requires_auth` sends one such request, in Spark's own framing (``network-common``
``MessageEncoder``: frame length, type ``RpcRequest`` = 3, request id, body length, body; the
body is a ``NettyRpcEnv`` ``RequestMessage`` for an endpoint nobody registers), and reads the
``RpcFailure`` (type 5) that comes back. An open master logs only that the probe disconnected.
"""

from __future__ import annotations

import socket
import struct

__all__ = ["AUTH_MARKERS", "PROBE_ENDPOINT", "master_requires_auth", "probe_request"]

PROBE_ENDPOINT = "gpuspark-auth-probe"
"""The endpoint the probe asks for; no Spark process registers it."""
AUTH_MARKERS = ("Expected SaslMessage", "Unknown challenge message", "Unauthenticated")
"""Words of the answer of a master that refuses unauthenticated clients."""
_RPC_REQUEST, _RPC_FAILURE, _RPC_RESPONSE = 3, 5, 4
_REQUEST_ID = 0x67707370  # "gpsp"
_MAX_ANSWER = 1 << 20


def _utf(text: str) -> bytes:
    """Java's ``DataOutputStream.writeUTF`` for ASCII text."""
    data = text.encode("utf-8")
    return struct.pack(">H", len(data)) + data


def probe_request(host: str, port: int) -> bytes:
    """One framed ``RpcRequest`` to :data:`PROBE_ENDPOINT` at ``host:port``."""
    receiver = b"\x01" + _utf(host) + struct.pack(">i", port) + _utf(PROBE_ENDPOINT)
    content = b"\xac\xed\x00\x05" + b"\x74" + _utf("probe")  # a Java-serialised String
    body = b"\x00" + receiver + content  # no sender address
    frame = struct.pack(">bqi", _RPC_REQUEST, _REQUEST_ID, len(body)) + body
    return struct.pack(">q", 8 + len(frame)) + frame


def _read_frame(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 8 or len(data) < min(struct.unpack(">q", data[:8])[0], _MAX_ANSWER):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _answer_text(frame: bytes) -> str | None:
    """The error text of an ``RpcFailure`` frame, ``""`` for an ``RpcResponse``, ``None``
    for anything else."""
    if len(frame) < 17:
        return None
    kind = frame[8]
    if kind == _RPC_RESPONSE:
        return ""
    if kind != _RPC_FAILURE or len(frame) < 21:
        return None
    (length,) = struct.unpack(">i", frame[17:21])
    return frame[21 : 21 + length].decode("utf-8", errors="replace")


def master_requires_auth(host: str, port: int, timeout: float = 2.0) -> bool | None:
    """``True`` when the Spark RPC server at ``host:port`` refuses clients without the shared
    secret, ``False`` when it serves them, ``None`` when it cannot be told (no answer, or one
    that is neither)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(probe_request(host, port))
            text = _answer_text(_read_frame(sock))
    except OSError:
        return None
    if text is None:
        return None
    return any(marker in text for marker in AUTH_MARKERS)
