"""Shared benchmark helpers: machine description and atomic JSON results."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["RESULTS_DIR", "machine_info", "spark_session", "write_results"]

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


def spark_session(quick: bool, cores: int) -> tuple[Any, Any, str]:
    """``(spark, cluster or None, description)``: ``local[2]`` for ``--quick``, else an
    embedded cluster of 2 workers x ``cores`` (stop both when done)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    if quick:
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        return spark, None, "local[2]"
    from gpuspark.cluster.local import LocalCluster

    cluster = LocalCluster(workers=2, cores=cores, state_dir=tempfile.mkdtemp())
    cluster.start()
    spark = cluster.session()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, cluster, f"LocalCluster(workers=2, cores={cores}) {cluster.master_url}"
