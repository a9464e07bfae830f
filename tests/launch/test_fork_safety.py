"""A function's ranks are forked from the launching process only while that is safe.

A process that ran torch's OpenMP regions (a notebook that trained, a test process) keeps
OpenMP's thread team, and a rank forked from it hangs in its first parallel op: libgomp's
team does not survive ``fork``. Such a launch starts its ranks from a fork server (a new
interpreter) instead; a fresh process, or one where only gpuspark imported torch, still forks.

Local launches, no Spark: the same check runs in each barrier task.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from gpuspark.launch.ranks import start_method

PROGRAM = textwrap.dedent(
    """
    import json, sys
    from gpuspark.launch import run

    LAUNCHER = sys.orig_argv  # a forked rank has the same; a fork server's, its own

    def work(n):
        import sys, torch
        torch.set_num_threads(2)
        x = torch.randn(n, n)
        (x @ x).sum()  # an OpenMP region in the rank
        return sys.orig_argv != LAUNCHER

    seen = {}
    seen["fresh"] = run(work, 256, num_processes=2, local=True, gpus_per_process=0)
    seen["again"] = run(work, 256, num_processes=2, local=True, gpus_per_process=0)
    import torch
    torch.set_num_threads(2)
    a = torch.randn(512, 512)
    (a @ a).sum()  # an OpenMP region in the launching process: its team's threads stay
    seen["after_openmp"] = run(work, 256, num_processes=2, local=True, gpus_per_process=0)
    print("SEEN " + json.dumps(seen), flush=True)
    """
)


def test_ranks_fork_until_the_launching_process_runs_openmp() -> None:
    # Before the fix, the third launch hung in the ranks' first matrix product.
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("SEEN "))
    new_interpreter = json.loads(line[5:])
    assert new_interpreter == {"fresh": False, "again": False, "after_openmp": True}


@pytest.mark.parametrize(
    ("backend", "rdzv", "fork_ok", "want"),
    [
        ("gloo", "static", True, "fork"),
        ("gloo", "static", False, "forkserver"),
        ("gloo", "c10d", True, "forkserver"),
        ("nccl", "static", True, "spawn"),
        ("nccl", "static", False, "spawn"),
    ],
)
def test_start_method(backend: str, rdzv: str, fork_ok: bool, want: str) -> None:
    assert start_method(backend, rdzv, fork_ok) == want


LONG_TMPDIR = textwrap.dedent(
    """
    import sys, torch
    from gpuspark.launch import run

    def pid():
        import os
        return os.getpid()

    torch.set_num_threads(2)
    (torch.randn(256, 256) @ torch.randn(256, 256)).sum()  # ranks come from a fork server
    print("RANK0", run(pid, num_processes=2, local=True, gpus_per_process=0), flush=True)
    """
)


def test_a_fork_server_starts_under_a_temp_folder_too_long_for_a_socket(tmp_path) -> None:
    # Python 3.11 put the fork server's socket under $TMPDIR: "AF_UNIX path too long".
    long_dir = tmp_path / ("t" * 60) / ("m" * 60)
    long_dir.mkdir(parents=True)
    env = {**os.environ, "TMPDIR": str(long_dir)}
    done = subprocess.run(
        [sys.executable, "-c", LONG_TMPDIR], capture_output=True, text=True, timeout=240, env=env
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "RANK0 " in done.stdout, done.stdout[-2000:]
