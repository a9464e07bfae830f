"""The tasks' exchange before their ranks start goes through the driver's log server
(gpuspark.launch._internal.gather): real sockets on loopback, one thread per task."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpuspark.errors import LaunchError
from gpuspark.launch._internal.logs import LogServer, SocketSink


@pytest.fixture
def server() -> Iterator[LogServer]:
    srv = LogServer("tok", write=lambda _line: None)
    try:
        yield srv
    finally:
        srv.close()


def _gather_all(server: LogServer, parts: list[dict[str, Any]]) -> list[Any]:
    """Each part from its own task (thread); the answers in task order."""
    answers: list[Any] = [None] * len(parts)
    sinks = [SocketSink(*server.address, "tok", i) for i in range(len(parts))]

    def task(i: int) -> None:
        try:
            answers[i] = sinks[i].gather(parts[i])
        except LaunchError as exc:
            answers[i] = exc

    threads = [threading.Thread(target=task, args=(i,)) for i in reversed(range(len(parts)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for sink in sinks:
        sink.close()
    return answers


def test_every_task_gets_every_part_in_task_order_as_soon_as_the_last_is_in(
    server: LogServer,
) -> None:
    server.gathering.size = 3
    parts = [{"host": f"h{i}", "port": 100 + i} for i in range(3)]
    started = time.monotonic()
    answers = _gather_all(server, parts)
    took = time.monotonic() - started
    assert answers == [parts, parts, parts]
    assert took < 0.9, f"the exchange took {took:.2f} s: Spark's allGather takes a whole second"


def test_without_a_task_count_every_task_is_sent_to_allgather(server: LogServer) -> None:
    assert _gather_all(server, [{"a": 1}, {"a": 2}]) == [None, None]


def test_a_task_that_never_comes_sends_all_to_allgather_after_the_wait(
    server: LogServer,
) -> None:
    """The driver decides for everyone: the tasks that came, and any that come later."""
    server.gathering.size = 3
    server.gathering.wait_s = 0.3
    assert _gather_all(server, [{"a": 1}, {"a": 2}]) == [None, None]
    assert server.gathering.fallen_back
    assert _gather_all(server, [{"a": 3}]) == [None]


def test_a_task_that_cannot_reach_the_driver_uses_allgather() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once closed
    sink = SocketSink("127.0.0.1", port, "tok", 0)
    assert sink.gather({"a": 1}) is None
    sink.close()


def _waiting(sink: SocketSink, part: dict[str, Any]) -> tuple[threading.Thread, list[Any]]:
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: _catch(got, sink, part))
    waiter.start()
    time.sleep(0.2)
    return waiter, got


def test_a_stage_run_again_meets_among_its_new_tasks(server: LogServer) -> None:
    """Spark reruns a failed barrier stage: the killed task's part leaves with its
    connection, and the new tasks meet among themselves."""
    server.gathering.size = 2
    killed = SocketSink(*server.address, "tok", 0)
    waiter, got = _waiting(killed, {"run": 1})
    killed.close()
    waiter.join(5)
    assert len(got) == 1 and isinstance(got[0], LaunchError)
    parts = [{"run": 2, "t": 0}, {"run": 2, "t": 1}]
    assert _gather_all(server, parts) == [parts, parts]


def test_a_second_part_from_the_same_task_index_starts_a_new_round(server: LogServer) -> None:
    server.gathering.size = 2
    old = SocketSink(*server.address, "tok", 0)
    old_waiter, old_got = _waiting(old, {"run": 1})
    new0 = SocketSink(*server.address, "tok", 0)
    new_waiter, new_got = _waiting(new0, {"run": 2, "t": 0})
    new1 = SocketSink(*server.address, "tok", 1)
    answer = new1.gather({"run": 2, "t": 1})
    new_waiter.join(5)
    assert answer == new_got[0] == [{"run": 2, "t": 0}, {"run": 2, "t": 1}]
    assert old_got == []  # the first round is never answered
    for sink in (old, new0, new1):
        sink.close()
    old_waiter.join(5)


def _catch(out: list[Any], sink: SocketSink, part: dict[str, Any]) -> None:
    try:
        out.append(sink.gather(part))
    except LaunchError as exc:
        out.append(exc)


def test_an_abort_while_waiting_stops_the_task(server: LogServer) -> None:
    server.gathering.size = 2
    sink = SocketSink(*server.address, "tok", 0)
    waiter, got = _waiting(sink, {"a": 1})
    server.abort("a rank failed")
    waiter.join(5)
    sink.close()
    assert len(got) == 1 and isinstance(got[0], LaunchError)
    assert "stopped before its tasks met" in str(got[0])
