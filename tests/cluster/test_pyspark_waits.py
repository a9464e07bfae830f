"""The two PySpark waits a command skips (gpuspark.cluster.pyspark_waits): PySpark's own
accumulator server with a connection open, as the driver JVM holds one; pandas imported in a
fresh interpreter."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

from gpuspark.cluster.pyspark_waits import stop_session


def _server_with_a_client() -> tuple[object, socket.socket]:
    from pyspark.accumulators import _start_update_server

    server = _start_update_server("token", False)
    client = socket.create_connection(server.server_address)  # the JVM's connection
    client.sendall(b"token" + (0).to_bytes(4, "big"))  # the token, then 0 updates
    assert client.recv(1) == b"\x01"  # the server's acknowledgement
    return server, client


def _session(server: object) -> SimpleNamespace:
    """A classic session's stop as PySpark does it: the JVM side, then the server."""
    sc = SimpleNamespace(_accumulatorServer=server)

    def stop() -> None:
        if sc._accumulatorServer is not None:
            sc._accumulatorServer.shutdown()

    return SimpleNamespace(_sc=sc, stop=stop)


def test_stop_leaves_the_accumulator_server_to_a_daemon_thread() -> None:
    """PySpark's own stop waits up to 1 s here (the handler's poll); the command's does not:
    the JVM side stops first, then the server shuts down on its own thread."""
    server, client = _server_with_a_client()
    calls: list[str] = []
    shutdown = server.shutdown

    def recorded() -> None:
        calls.append(threading.current_thread().name)
        shutdown()

    server.shutdown = recorded
    session = _session(server)
    stop = session.stop
    session.stop = lambda: (calls.append("jvm side"), stop())
    started = time.monotonic()
    stop_session(session)
    took = time.monotonic() - started
    assert took < 0.3, f"stop took {took:.2f} s"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and server.socket.fileno() != -1:
        time.sleep(0.05)
    assert server.socket.fileno() == -1, "the server was never shut down"
    assert calls == ["jvm side", "gpuspark-accumulator-stop"]
    assert session._sc._accumulatorServer is None
    client.close()


def test_a_session_without_an_accumulator_server_stops_as_is() -> None:
    stopped: list[bool] = []
    stop_session(SimpleNamespace(stop=lambda: stopped.append(True)))
    assert stopped == [True]


def test_pandas_is_imported_on_a_thread() -> None:
    code = (
        "import sys\n"
        "from gpuspark.cluster.pyspark_waits import preload_pandas\n"
        "t = preload_pandas()\n"
        "assert t is not None and t.daemon\n"
        "t.join(60)\n"
        "assert 'pandas' in sys.modules\n"
        "assert preload_pandas() is None\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
