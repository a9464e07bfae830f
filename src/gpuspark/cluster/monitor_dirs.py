"""Where monitoring state lives: the run target files Prometheus discovers, ``monitor up`` state.

Default ``~/.gpuspark/monitor``, overridable with ``GPUSPARK_MONITOR_DIR``; the spec's
``[monitoring] targets_dir`` names the file_sd directory on a real cluster (a path the
Prometheus server can read).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from gpuspark._util import envvars

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["MONITOR_DIR_ENV", "monitor_dir", "targets_dir"]

MONITOR_DIR_ENV = envvars.MONITOR_DIR.name


def monitor_dir() -> Path:
    """``$GPUSPARK_MONITOR_DIR`` or ``~/.gpuspark/monitor`` (not created here)."""
    env = os.environ.get(MONITOR_DIR_ENV)
    return Path(env).expanduser() if env else Path.home() / ".gpuspark" / "monitor"


def targets_dir(spec: ClusterSpec | None = None) -> Path:
    """The file_sd directory: ``[monitoring] targets_dir``, else ``monitor_dir()/targets``."""
    if spec is not None and spec.monitoring.targets_dir:
        return Path(spec.monitoring.targets_dir).expanduser()
    return monitor_dir() / "targets"
