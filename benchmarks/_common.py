"""Shared benchmark helpers: machine description and atomic JSON results."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["RESULTS_DIR", "machine_info", "write_results"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def machine_info() -> dict[str, Any]:
    """CPU count, platform, Python and key library versions of this machine."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    with contextlib.suppress(OSError):
        info["load_avg_1m"] = os.getloadavg()[0]
    for module in ("torch", "numpy", "pyspark"):
        try:
            info[module] = __import__(module).__version__
        except ImportError:
            info[module] = None
    return info


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (plus machine info) to ``benchmarks/results/<name>.json`` atomically."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    target = RESULTS_DIR / f"{name}.json"
    data = {"benchmark": name, "machine": machine_info(), **payload}
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=RESULTS_DIR)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.write("\n")
    os.replace(tmp, target)
    return target
