"""``cluster up --connect`` without starting Spark: the state records the server and reads
back, a busy ``--connect-port`` and a pyspark without a Connect server are refused in one line
before anything starts, and the server's settings file reads back as Java properties."""

from __future__ import annotations

import json
import socket
from dataclasses import asdict
from pathlib import Path

import pytest

from gpuspark.cluster import connect_server
from gpuspark.cluster.local import LocalCluster
from gpuspark.cluster.state import ClusterState, ConnectState
from gpuspark.errors import ClusterError


def _state(connect: ConnectState | None) -> ClusterState:
    return ClusterState("spark://127.0.0.1:1", "127.0.0.1", 1, 1, 2, True, connect=connect)


def test_state_records_the_server_and_reads_it_back() -> None:
    server = ConnectState("sc://127.0.0.1:15002", 123, 15002, "/x/connect.log")
    again = ClusterState.from_json(json.loads(json.dumps(asdict(_state(server)))))
    assert again.connect == server
    assert ClusterState.from_json(json.loads(json.dumps(asdict(_state(None))))).connect is None


def test_down_stops_the_server_first_and_status_shows_it(tmp_path: Path) -> None:
    from gpuspark.cluster.state import ClusterStatus

    dead = ConnectState("sc://127.0.0.1:15002", 2**22 + 1, 15002, "log")  # no such pid
    state = _state(dead)
    assert state.pids() == [dead.pid, state.master_pid]
    status = ClusterStatus.of(state, str(tmp_path), {}, []).as_dict()
    assert (status["connect_url"], status["connect_alive"]) == (dead.url, False)
    assert ClusterStatus.of(_state(None), str(tmp_path), {}, []).connect_url == ""


def test_connect_port_implies_connect() -> None:
    assert LocalCluster(connect_port=15002).connect
    assert not LocalCluster().connect


def test_a_busy_connect_port_is_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ClusterError) as err:
            connect_server._port(port)
    assert f"--connect-port {port}: cannot listen on 127.0.0.1:{port}" in err.value.message
    assert "\n" not in str(err.value)


def test_no_connect_server_in_pyspark_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = "a local Spark Connect server needs pyspark >= 4.0.0 (installed: 3.5.1; ...)"
    monkeypatch.setattr(connect_server, "missing", lambda feature: line)
    with pytest.raises(ClusterError, match=r"needs pyspark >= 4\.0\.0"):
        LocalCluster(state_dir=tmp_path / "state", connect=True).start()
    assert not (tmp_path / "state").exists()


def test_properties_escape_reads_back() -> None:
    value = "C:\\dir\nnext"
    assert connect_server.escape(value) == "C:\\\\dir\\nnext"


def test_log_says_only_after_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "connect.log"
    log.write_text("old run: Spark Connect server started at: 127.0.0.1:1\n")
    offset = log.stat().st_size
    assert not connect_server.log_says(log, offset, "Spark Connect server started at")
    with log.open("a") as fh:
        fh.write("INFO SparkConnectServer: Spark Connect server started at: 127.0.0.1:2\n")
    assert connect_server.log_says(log, offset, "Spark Connect server started at")
    assert not connect_server.log_says(tmp_path / "missing.log", 0, "x")
