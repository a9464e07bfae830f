"""Test helper: an embedded cluster of N distinct hosts, as `gpuspark cluster up --hosts N`
starts it (importable from every test module, like ``_proc``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuspark.cli.main import main
from gpuspark.cluster.local import LocalCluster


def hosts_cluster(factory: pytest.TempPathFactory, hosts: int) -> Iterator[LocalCluster]:
    """``gpuspark cluster up --hosts N --workers N``: workers of 2 cores, 1 (simulated) GPU and
    2 GB each, worker *i* on 127.0.0.(2+i); stopped with ``cluster down`` at the end."""
    state = str(factory.mktemp(f"{hosts}-hosts") / "state")
    argv = ["cluster", "up", "--hosts", str(hosts), "--workers", str(hosts), "--cores", "2"]
    assert main([*argv, "--gpus", "1", "--memory", "2g", "--state-dir", state]) == 0
    cluster = LocalCluster.running(state)
    assert cluster is not None
    try:
        yield cluster
    finally:
        main(["cluster", "down", "--state-dir", state])
