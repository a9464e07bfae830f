"""``with LocalCluster(...)`` stops the cluster it started however the block ends, SIGTERM and
SIGHUP included (a Python program's default is to die at once, leaving the master and workers
running in their own sessions). No Spark: ``start`` and ``stop`` are replaced."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuspark._util.signals import TERMINATING, Terminated
from gpuspark.cluster.local import LocalCluster


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What ``start`` and ``stop`` were asked, Python's default handlers around the test."""
    seen: list[str] = []

    def start(self: LocalCluster) -> LocalCluster:
        seen.append("start")
        self._owns = True
        return self

    def stop(self: LocalCluster, timeout: float = 15.0) -> list[int]:
        seen.append("stop")
        return []

    monkeypatch.setattr(LocalCluster, "start", start)
    monkeypatch.setattr(LocalCluster, "stop", stop)
    old = {s: signal.signal(s, signal.SIG_DFL) for s in TERMINATING}
    yield seen
    for sig, handler in old.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_in_the_block_stops_the_cluster(
    sig: int, calls: list[str], tmp_path: Path
) -> None:
    with pytest.raises(Terminated), LocalCluster(state_dir=str(tmp_path)):
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the handler raises before this ends
    assert calls == ["start", "stop"]
    assert signal.getsignal(sig) is signal.SIG_DFL


def test_handlers_are_restored_when_the_block_ends_or_the_start_fails(
    calls: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LocalCluster(state_dir=str(tmp_path)):
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    assert calls == ["start", "stop"]
    assert all(signal.getsignal(s) is signal.SIG_DFL for s in TERMINATING)

    def failed_start(self: LocalCluster) -> LocalCluster:
        raise RuntimeError("no start")

    monkeypatch.setattr(LocalCluster, "start", failed_start)
    with pytest.raises(RuntimeError), LocalCluster(state_dir=str(tmp_path)):
        pass  # pragma: no cover
    assert all(signal.getsignal(s) is signal.SIG_DFL for s in TERMINATING)
