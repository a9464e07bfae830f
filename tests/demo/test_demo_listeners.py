"""``make demo`` listens on loopback only: no gpuspark or Spark socket on 0.0.0.0 or ``::``.

The demo runs as a subprocess (its own embedded cluster under ``<out>/cluster``) while the
test polls the listening TCP sockets (``/proc/net/tcp{,6}``) of it and all its descendants:
the Spark master and workers, executors, the driver, the training ranks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _proc import WILDCARD, command, descendants, listeners_of  # tests/_proc.py

Listener = tuple[int, str, int, str]
"""(pid, local address, port, command) of a listening socket."""


def _listeners_with_commands(pids: set[int]) -> set[Listener]:
    return {(pid, addr, port, command(pid)) for pid, addr, port in listeners_of(pids)}


def _stop_leftover_cluster(state_dir: Path) -> None:
    """Stop the embedded cluster the demo started if it left one (it crashed or timed out)."""
    if (state_dir / "cluster.json").exists():
        from gpuspark.cluster.local import LocalCluster

        LocalCluster(state_dir=state_dir).stop()


def _run_watched(argv: list[str], log: Path, cluster_dir: Path) -> tuple[int, set[Listener]]:
    """Run ``argv`` to its end; return its exit status and every listener its process tree
    held at some poll (every 0.3 s)."""
    seen: set[Listener] = set()
    with open(log, "wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 480
        while proc.poll() is None and time.monotonic() < deadline:
            seen |= _listeners_with_commands(descendants({proc.pid}))
            time.sleep(0.3)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _stop_leftover_cluster(cluster_dir)
    return proc.returncode, seen


@pytest.mark.spark
@pytest.mark.slow
def test_make_demo_listens_on_loopback_only(tmp_path: Path) -> None:
    """Acceptance: ``ss -ltn`` during ``make demo`` shows no gpuspark or Spark listener on
    0.0.0.0 (here a small demo, 16 studies and 1 epoch: 100-180 s on 2 cores, 320 s at load 20)."""
    out, log = tmp_path / "demo", tmp_path / "demo.log"
    argv = [sys.executable, "-m", "gpuspark.cli.main", "demo", "--studies", "16", "--epochs", "1"]
    rc, seen = _run_watched([*argv, "--out", str(out)], log, out / "cluster")
    listed = "\n".join(f"  {a}:{port} pid {pid} {cmd}" for pid, a, port, cmd in sorted(seen))
    print(f"listeners of the demo's process tree:\n{listed}")
    assert rc == 0, f"gpuspark demo exited {rc}:\n{log.read_text(errors='replace')[-3000:]}"
    # not vacuous: the polls saw the Spark master and a training rank listen, among others
    assert len({port for _pid, _a, port, _cmd in seen}) >= 3, listed
    assert any("deploy.master.Master" in cmd for *_x, cmd in seen), listed
    assert any(cmd.startswith("[gpuspark-rank") for *_x, cmd in seen), listed
    wide = [f"  pid {pid} port {port} on {a}: {cmd}" for pid, a, port, cmd in seen if a in WILDCARD]
    assert not wide, "listening on every interface:\n" + "\n".join(sorted(wide))
