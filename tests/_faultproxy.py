"""A TCP proxy that breaks connections, between a client and the test S3 server: a TEST TOOL,
standing in for the resets, throttles and lost servers of a real network.

``FaultProxy(port, every=3)`` forwards 127.0.0.1:<its port> to 127.0.0.1:``port``; every
``every``-th connection is cut with a TCP reset once the client has sent ``cut_after`` bytes
(an upload cut midway, or a request cut before its answer). ``down()`` resets every open
connection and refuses new ones (the server stopped); ``up()`` lets them through again.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class FaultProxy:
    """A TCP proxy on 127.0.0.1 that resets every ``every``-th connection (a test tool)."""

    def __init__(self, target_port: int, every: int = 3, cut_after: int = 2048) -> None:
        self.target_port, self.every, self.cut_after = target_port, every, cut_after
        self.connections = 0
        self.cut = 0
        self._down = False
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the endpoint to give the client."""
        return f"http://127.0.0.1:{self.port}"

    def down(self) -> None:
        """Reset every open connection and every new one, as a stopped server would."""
        with self._lock:
            self._down = True
            for s in self._open:
                _reset(s)
            self._open.clear()

    def up(self) -> None:
        """Forward new connections again."""
        with self._lock:
            self._down = False

    def close(self) -> None:
        """Stop listening and reset what is open."""
        self.down()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                faulty = self.every > 0 and self.connections % self.every == 0
                if self._down:
                    _reset(client)
                    continue
            threading.Thread(target=self._serve, args=(client, faulty), daemon=True).start()

    def _serve(self, client: socket.socket, faulty: bool) -> None:
        try:
            server = socket.create_connection(("127.0.0.1", self.target_port))
        except OSError:
            _reset(client)
            return
        with self._lock:
            self._open += [client, server]
        limit = self.cut_after if faulty else None
        back = threading.Thread(target=self._pump, args=(server, client, None), daemon=True)
        back.start()
        if self._pump(client, server, limit):
            with self._lock:
                self.cut += 1
        _reset(client)
        _reset(server)

    def _pump(self, src: socket.socket, dst: socket.socket, limit: int | None) -> bool:
        """Copy ``src`` to ``dst`` until either closes; ``True`` when cut at ``limit``."""
        sent = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return False
                if limit is not None and sent + len(data) > limit:
                    dst.sendall(data[: max(0, limit - sent)])
                    return True
                dst.sendall(data)
                sent += len(data)
        except OSError:
            return False


def _reset(s: socket.socket) -> None:
    """Close ``s`` with a TCP reset (SO_LINGER 0), not a clean FIN."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    except OSError:
        pass


@contextmanager
def fault_proxy(target_port: int, every: int = 3, cut_after: int = 2048) -> Iterator[FaultProxy]:
    """A :class:`FaultProxy` for the ``with`` block."""
    proxy = FaultProxy(target_port, every, cut_after)
    try:
        yield proxy
    finally:
        proxy.close()
