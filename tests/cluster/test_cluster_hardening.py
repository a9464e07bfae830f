"""A new user's mistakes on the embedded cluster fail fast and say what to do (real cluster).

Reproduces, as a user types them: a launch that cannot fit (once waited ~10 minutes on
Spark's barrier retries), `cluster up` with a dead worker (once "already running; nothing
started", exit 0), and Spark's start-up noise on the console.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from gpuspark._util.procs import pid_alive

pytestmark = pytest.mark.spark

SCRIPT = "import os\nprint('rank', os.environ['RANK'], flush=True)\n"


@pytest.mark.slow  # a fresh cluster and a killed worker (about 40 s); test_fit covers the refusal
def test_unfit_launch_fails_in_seconds_dead_worker_is_reported(tmp_path: Path, cli: Any) -> None:
    state = tmp_path / "state"
    (tmp_path / "ddp.py").write_text(SCRIPT)
    try:
        up = cli(
            "cluster",
            "up",
            "--workers",
            "2",
            "--gpus",
            "2",
            "--cores",
            "2",
            cwd=tmp_path,
            state=state,
        )
        assert up.returncode == 0, up.stderr
        # Spark's own start-up notes and WARN lines stay out of the console (they go to a file)
        assert " WARN " not in up.stdout + up.stderr

        t0 = time.monotonic()
        proc = cli(
            "launch", "-n", "8", "--gpus-per-process", "0", "ddp.py", cwd=tmp_path, state=state
        )
        seconds = time.monotonic() - t0
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert seconds < 60, f"took {seconds:.0f} s"
        err = proc.stderr
        assert "not enough free slots" in err and "needs 8 tasks" in err
        assert "4 cores free" in err  # the real numbers: 2 workers x 2 cores
        assert "Traceback" not in proc.stdout + err
        assert " WARN " not in proc.stdout + err
        assert "Setting default log level" not in proc.stdout + err  # Spark's shell notice

        status = json.loads(cli("cluster", "status", "--json", cwd=tmp_path, state=state).stdout)
        victim = status["workers"][1]["pid"]
        os.killpg(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        # gone, or a zombie nobody reaps (a container whose PID 1 does not): dead either way
        while time.monotonic() < deadline and pid_alive(victim):
            time.sleep(0.2)
        again = cli("cluster", "up", cwd=tmp_path, state=state)
        assert again.returncode == 1
        assert "worker(s) 1 not alive" in again.stderr
        assert "gpuspark cluster down && gpuspark cluster up" in again.stderr
    finally:
        down = cli("cluster", "down", cwd=tmp_path, state=state, timeout=60)
    assert down.returncode == 0
