"""The tasks' reports on the driver (gpuspark.launch.results): rank 0's value, root cause."""

from __future__ import annotations

from pathlib import Path

import cloudpickle

from gpuspark.launch import make_request
from gpuspark.launch.results import rank0_value, result_error, timeout_error


def test_result_comes_from_the_task_holding_rank_0() -> None:
    # after a c10d restart, global rank 0 may live on another task than task 0
    results = [
        {"task": 0, "ok": True, "value": None, "rank0": False},
        {"task": 1, "ok": True, "value": cloudpickle.dumps({"loss": 0.5}), "rank0": True},
    ]
    assert rank0_value(results) == {"loss": 0.5}


def test_root_cause_is_the_earliest_failure_across_tasks() -> None:
    peer = {
        "rank": 0,
        "host": "a",
        "error": {"type": "RuntimeError", "message": "peer", "time": 9.5},
    }
    root = {"rank": 3, "host": "b", "error": {"type": "ValueError", "message": "bad", "time": 9.1}}
    killed = {"rank": 1, "host": "a", "signal": "SIGKILL", "timestamp": 10}
    err = result_error([{"failures": [peer, killed]}, {"failures": [root]}], 1)
    assert str(err).startswith("rank 3 failed on host b: ValueError: bad")


def test_a_peers_lost_connection_is_never_the_root_cause() -> None:
    # Seen in CI: rank 3's gloo error file was stamped before rank 2's own ValueError.
    gone = "[pair.cc:553] Connection closed by peer [127.0.0.1]:23717. remote worker crashing"
    peer = {"rank": 3, "host": "a", "error": {"type": "RuntimeError", "message": gone, "time": 9.0}}
    root = {"rank": 2, "host": "a", "error": {"type": "ValueError", "message": "boom", "time": 9.2}}
    err = result_error([{"failures": [peer, root]}], 1)
    assert str(err).startswith("rank 2 failed on host a: ValueError: boom")
    only_peer = result_error([{"failures": [peer]}], 1)  # no other failure: still reported
    assert str(only_peer).startswith("rank 3 failed on host a: RuntimeError")


def test_a_rank_the_agent_stopped_with_sigterm_is_not_the_root_cause() -> None:
    # Seen in CI: rank 0, stopped by torch's agent after rank 1 exited, carried the agent's
    # whole-second timestamp, earlier than rank 1's own error time.
    stopped = {"rank": 0, "host": "h", "signal": "SIGTERM", "timestamp": 20}
    root = {"rank": 1, "host": "h", "error": {"type": "SystemExit", "message": "no", "time": 20.6}}
    err = result_error([{"failures": [stopped, root]}], 1)
    assert str(err).startswith("rank 1 failed on host h: SystemExit: no")
    alone = result_error([{"failures": [stopped]}], 1)  # nothing else failed: still reported
    assert str(alone).startswith("rank 0 failed on host h: killed by SIGTERM")


def test_log_server_names_the_host_of_a_task_that_vanished() -> None:
    """A task that ends says BYE; one whose connection just drops (its executor or machine
    gone) is the lost one, named by the host it reported."""
    import socket

    from gpuspark.launch._internal.logs import LogServer, SocketSink

    server = LogServer("tok", write=lambda _line: None)
    try:
        done = SocketSink(*server.address, "tok", 0)
        done.notice("task", {"task": 0, "host": "127.0.0.2"})
        done.close()
        assert server.lost_host(wait=0.5) is None
        gone = SocketSink(*server.address, "tok", 1)
        gone.notice("task", {"task": 1, "host": "127.0.0.3"})
        assert gone._sock is not None
        gone._sock.shutdown(socket.SHUT_RDWR)  # no BYE: as when the process is killed
        assert server.lost_host(wait=5.0) == "127.0.0.3"
        assert server.vanished == [1]
    finally:
        server.close()


def test_host_lost_error_says_which_host_and_how_to_retry(tmp_path: Path) -> None:
    from gpuspark.launch.request import make_request
    from gpuspark.launch.results import host_lost_error

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    req = make_request(str(script), num_processes=2)
    err = host_lost_error("127.0.0.3", req)
    assert err.host == "127.0.0.3"
    assert str(err).startswith(f"host 127.0.0.3 was lost during the launch of {script}")
    assert "--max-attempts 2" in str(err) and "\n" not in str(err)


def test_timeout_error_names_the_flag_then_the_keyword() -> None:
    """``--timeout`` on the command line, ``timeout=`` from Python: the remedy says both."""
    req = make_request(print, num_processes=2, local=True, gpus_per_process=0, timeout=5)
    err = timeout_error(req)
    assert err.remedy is not None and err.remedy.startswith("raise --timeout (timeout=),")
