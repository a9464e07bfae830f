"""A host cut off mid-launch, without Spark or namespaces: the driver's log server tells a
quiet task (heartbeats) from one it can no longer hear, the stage watch cancels the stage and
names that task's host, and the error is one line (the partition itself, on namespace hosts:
tests/cluster/test_netns_partition.py)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpuspark.errors import HostLostError
from gpuspark.launch import make_request
from gpuspark.launch._internal import logs
from gpuspark.launch._internal.logs import LogServer, SocketSink
from gpuspark.launch._internal.watch import StageWatch
from gpuspark.launch.results import host_unreachable_error
from gpuspark.launch.spark import lost_error

TOKEN = "t0k"


def _noop(*_args: Any) -> None:
    return None


@pytest.fixture()
def server() -> Iterator[LogServer]:
    srv = LogServer(TOKEN, write=_noop)
    yield srv
    srv.close()


def _cut_task(server: LogServer, task: int, host: str) -> socket.socket:
    """A task that connected, said where it runs, then fell silent (its host cut off: the
    connection stays open, nothing arrives)."""
    sock = socket.create_connection(server.address)
    note = json.dumps({"task": task, "host": host})
    sock.sendall(f"HELLO {TOKEN} {task}\nN task {note}\n".encode())
    return sock


def _wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_a_quiet_task_keeps_being_heard_and_a_cut_one_falls_silent(
    server: LogServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "HEARTBEAT_S", 0.05)
    quiet = SocketSink(*server.address, TOKEN, 0)  # prints nothing: only heartbeats
    cut = _cut_task(server, 1, "10.0.0.9")
    try:
        _wait_for(lambda: set(server.heard) == {0, 1} and server.hosts.get(1) == "10.0.0.9")
        time.sleep(0.6)
        assert server.silent(0.4) == [1]
        assert server.host_of(1) == "10.0.0.9" and server.host_of(7) == "the host of task 7"
        quiet.close()  # said BYE: finished, never silent
        _wait_for(lambda: 0 in server.finished)
        time.sleep(0.5)
        assert server.silent(0.4) == [1]
    finally:
        cut.close()
    _wait_for(lambda: server.vanished == [1])  # the stream ended without BYE: vanished
    assert server.silent(0.0) == []


def test_drain_does_not_wait_for_a_cut_task(server: LogServer) -> None:
    cut = _cut_task(server, 1, "10.0.0.9")
    try:
        _wait_for(lambda: 1 in server.heard)
        start = time.monotonic()
        server.drain(5.0, skip=(1,))
        assert time.monotonic() - start < 1.0
        start = time.monotonic()
        server.drain(0.5)  # without skipping it, the open stream is waited for
        assert time.monotonic() - start >= 0.5
    finally:
        cut.close()


class _Cancel:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def _watched(server: LogServer, collective_timeout: float | None = 20.0) -> tuple[Any, _Cancel]:
    cancel = _Cancel()
    watch = StageWatch(server, cancel, collective_timeout, silent_after=15.0, grace=30.0)
    return watch, cancel


def test_a_failure_with_a_silent_task_cancels_at_once_and_names_its_host(
    server: LogServer,
) -> None:
    now = time.monotonic()
    server.hosts = {0: "10.0.0.8", 1: "10.0.0.9", 2: "10.0.0.10"}
    server.heard = {0: now - 0.5, 1: now - 21.0, 2: now - 16.0}
    watch, cancel = _watched(server)
    assert not watch.check(now) and cancel.calls == 0  # silence alone, short of the timeout
    server.first_failure = now - 0.2  # rank 0 reported: its collective with a peer timed out
    assert watch.check(now) and cancel.calls == 1
    assert watch.lost is not None and watch.lost.host == "10.0.0.9"  # silent the longest
    assert watch.lost.silent_s == pytest.approx(21.0) and watch.lost_tasks == (1,)
    assert server.abort_reason == "host lost"


def test_a_failure_with_every_task_heard_is_left_to_the_tasks_until_the_grace_ends(
    server: LogServer,
) -> None:
    now = time.monotonic()
    server.heard = {0: now - 0.5, 1: now - 1.0}
    server.first_failure = now
    watch, cancel = _watched(server)
    assert not watch.check(now + 10) and cancel.calls == 0
    server.heard = {0: now + 29.0, 1: now + 29.0}  # still talking, not stopping
    assert watch.check(now + 31) and cancel.calls == 1
    assert watch.lost is None and watch.lost_tasks == ()


def test_silence_past_the_collective_timeout_alone_is_a_lost_host(server: LogServer) -> None:
    now = time.monotonic()
    server.hosts = {0: "10.0.0.8", 1: "10.0.0.9"}
    server.heard = {0: now, 1: now - 30.0}
    watch, cancel = _watched(server, collective_timeout=20.0)
    assert not watch.check(now)  # 30 s <= 20 s + 15 s
    assert watch.check(now + 6) and cancel.calls == 1
    assert watch.lost is not None and watch.lost.host == "10.0.0.9"
    never, never_cancel = _watched(server, collective_timeout=None)
    assert not never.check(now + 3600) and never_cancel.calls == 0


def test_finished_and_vanished_tasks_are_not_silent(server: LogServer) -> None:
    now = time.monotonic()
    server.heard = {0: now - 100.0, 1: now - 100.0}
    server.finished = {0}
    server.vanished = [1]
    server.first_failure = now
    watch, cancel = _watched(server)
    assert not watch.check(now + 1) and cancel.calls == 0


def test_the_watch_thread_cancels_a_stage_with_a_cut_task(server: LogServer) -> None:
    cut = _cut_task(server, 1, "10.0.0.9")
    try:
        _wait_for(lambda: 1 in server.heard)
        cancel = _Cancel()
        server.first_failure = time.monotonic()
        with StageWatch(server, cancel, 20.0, silent_after=0.2, tick=0.05) as watch:
            _wait_for(lambda: cancel.calls == 1)
        assert watch.lost is not None and watch.lost.host == "10.0.0.9"
    finally:
        cut.close()


def _rank_failure(rank: int, host: str, message: str, at: float) -> dict[str, Any]:
    error = {"type": "RuntimeError", "message": message, "time": at, "traceback": []}
    return {"ok": False, "failures": [{"rank": rank, "host": host, "error": error}]}


TIMED_OUT = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
    "Timed out waiting 20000ms for recv operation to complete"
)


def test_the_unreachable_error_is_one_line_naming_the_cut_host_not_the_reporter() -> None:
    req = make_request(_noop, num_processes=2)
    reports = [
        _rank_failure(2, "10.0.0.10", "Connection reset\nby peer", 200.0),
        _rank_failure(0, "10.0.0.8", TIMED_OUT, 100.0),
    ]
    err = host_unreachable_error("10.0.0.9", 21.6, req, reports)
    text = str(err)
    assert isinstance(err, HostLostError) and err.host == "10.0.0.9"
    assert "\n" not in text
    assert text.startswith(
        "host 10.0.0.9 became unreachable during the launch of function _noop: nothing was "
        "heard from its task for 22 s"
    )
    assert "rank 0 on host 10.0.0.8 reported" in text and TIMED_OUT in text  # the earliest
    assert "--max-attempts 2" in text
    bare = str(host_unreachable_error("10.0.0.9", 3.0, req))
    assert "reported" not in bare and "the other ranks were stopped" in bare


def test_an_unreachable_host_wins_over_a_vanished_one(server: LogServer) -> None:
    req = make_request(_noop, num_processes=2)
    server.hosts = {0: "10.0.0.8", 1: "10.0.0.9"}
    server.vanished = [0]
    watch, _ = _watched(server)
    vanished = lost_error(RuntimeError("job cancelled"), server, watch, req)
    assert isinstance(vanished, HostLostError) and vanished.host == "10.0.0.8"
    assert "was lost during the launch" in str(vanished)
    now = time.monotonic()
    server.heard = {1: now - 30.0}
    server.first_failure = now
    assert watch.check(now)
    unreachable = lost_error(RuntimeError("job cancelled"), server, watch, req)
    assert isinstance(unreachable, HostLostError) and unreachable.host == "10.0.0.9"
    assert "became unreachable" in str(unreachable)
    server.vanished = []
    fresh, _ = _watched(server)
    assert lost_error(KeyboardInterrupt(), server, fresh, req) is None


@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="Linux socket option")
def test_a_task_gives_up_on_bytes_the_driver_never_acknowledges(server: LogServer) -> None:
    # a task cut off from the driver must not block in sendall on a full send buffer
    sink = SocketSink(*server.address, TOKEN, 0)
    try:
        assert sink._sock is not None
        option = sink._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
        assert option == logs.SEND_GIVE_UP_S * 1000
    finally:
        sink.close()
