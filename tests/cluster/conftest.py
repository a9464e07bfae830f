"""Running the ``gpuspark`` command as a user would, each test with its own cluster state."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

CliRunner = Callable[..., subprocess.CompletedProcess]


def run_cli(
    *args: str, cwd: Path, state: Path, timeout: float = 240
) -> subprocess.CompletedProcess:
    """``gpuspark ARGS`` in ``cwd`` with its own state dir and driver-log dir under ``state``."""
    env = {**os.environ, "GPUSPARK_STATE_DIR": str(state), "PYSPARK_PYTHON": sys.executable}
    env["GPUSPARK_LOG_DIR"] = str(state / "driver-logs")
    env.pop("GPUSPARK_SPEC", None)
    cmd = [sys.executable, "-m", "gpuspark.cli.main", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture()
def cli() -> CliRunner:
    """:func:`run_cli` as a fixture."""
    return run_cli
