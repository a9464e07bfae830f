"""``LocalCluster(hosts=N)`` / ``cluster up --hosts N`` without starting anything."""

from __future__ import annotations

import pytest

from gpuspark.cli.main import main
from gpuspark.cluster.local import LocalCluster
from gpuspark.cluster.state import ClusterStatus, WorkerStatus
from gpuspark.errors import ClusterError


def test_workers_get_their_own_loopback_addresses() -> None:
    cluster = LocalCluster(workers=3, hosts=2)
    assert [cluster.worker_host(i) for i in range(3)] == ["127.0.0.2", "127.0.0.3", "127.0.0.2"]
    assert LocalCluster(workers=2).worker_host(1) == "127.0.0.1"


BAD = [(0, "127.0.0.1", "127.0.0.2 to"), (254, "127.0.0.1", "127.0.0.2 to"),
       (2, "10.0.0.5", "cluster's host is")]  # fmt: skip


@pytest.mark.parametrize(("hosts", "host", "words"), BAD)
def test_bad_hosts_are_refused(hosts: int, host: str, words: str) -> None:
    with pytest.raises(ClusterError, match=words):
        LocalCluster(hosts=hosts, host=host)


def test_cli_hosts_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "up", "--hosts", "0"]) == 2
    assert "--hosts" in capsys.readouterr().err


def test_status_lists_distinct_hosts_in_worker_order() -> None:
    def worker(i: int, host: str) -> WorkerStatus:
        return WorkerStatus(i, 1, True, "ALIVE", 1, 0, "1g", [], True, "", host=host)

    hosts = ["127.0.0.3", "127.0.0.2", "127.0.0.3"]
    status = ClusterStatus(True, "d", workers=[worker(i, h) for i, h in enumerate(hosts)])
    assert status.hosts == ["127.0.0.3", "127.0.0.2"]
    assert status.as_dict()["hosts"] == ["127.0.0.3", "127.0.0.2"]
