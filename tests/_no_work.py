"""In-process CLI runs that must not start work: a private home and state, and a child
process (Spark's JVM, a cluster, a rank) raises :class:`Started`.

Importable from every test module (pytest puts ``tests/`` on ``sys.path`` for its conftest).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest


class Started(BaseException):  # not an error: a marker that no command can catch as one
    """A command started a child process."""


def refuse_work(monkeypatch: pytest.MonkeyPatch, tmp: Path, cwd: Path) -> None:
    """Clear ``GPUSPARK_*``/``SPARK_*``, put state, logs, monitor dir and home under ``tmp``,
    make starting a child process raise :class:`Started`, and run in ``cwd``."""
    for name in [k for k in os.environ if k.startswith(("GPUSPARK_", "SPARK_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GPUSPARK_STATE_DIR", str(tmp / "state"))
    monkeypatch.setenv("GPUSPARK_LOG_DIR", str(tmp / "logs"))
    monkeypatch.setenv("GPUSPARK_MONITOR_DIR", str(tmp / "mon"))
    monkeypatch.setenv("HOME", str(tmp / "home"))

    def started(*args: Any, **kwargs: Any) -> None:
        raise Started(args[:2])

    monkeypatch.setattr(subprocess.Popen, "__init__", started)
    monkeypatch.setattr(os, "fork", started)
    monkeypatch.chdir(cwd)
