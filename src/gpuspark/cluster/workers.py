"""What each worker of the embedded cluster is given: the Spark it runs, its GPU addresses
(this machine's NVIDIA GPUs split, or simulated ones), its properties file (its own GPU
discovery script; the shared secret on a secure cluster), and its folder, which a start that
fails half way removes again."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from gpuspark._util.spark_compat import PYSPARK_REQUIREMENT
from gpuspark.cluster.shape import EmbeddedShape
from gpuspark.errors import ClusterError

__all__ = [
    "assign_gpus",
    "daemon_security",
    "detect_gpus",
    "remove_dirs",
    "spark_home",
    "worker_properties",
]


def spark_home() -> Path:
    """The Spark distribution bundled with pyspark (``bin/spark-class``, ``jars/``)."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").exists():
        raise ClusterError(
            f"pyspark at {home} has no bin/spark-class",
            remedy=f"reinstall pyspark from PyPI (pip install '{PYSPARK_REQUIREMENT}')",
        )
    return home


def detect_gpus() -> list[str]:
    """Indices of the NVIDIA GPUs on this machine via ``nvidia-smi -L`` (no torch import)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20, check=True)
    except (subprocess.SubprocessError, OSError):
        return []
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("GPU ")]
    return [str(i) for i in range(len(lines))]


def assign_gpus(shape: EmbeddedShape, real: list[str]) -> tuple[list[list[str]], bool]:
    """GPU addresses of each worker: real indices split evenly, else simulated ones."""
    per = shape.gpus_per_worker
    if real:
        return [real[i * per : (i + 1) * per] for i in range(shape.workers)], False
    return [[str(i * per + j) for j in range(per)] for i in range(shape.workers)], True


def remove_dirs(paths: list[Path]) -> None:
    """Remove ``paths`` and what they hold (worker folders of a start that failed)."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    paths.clear()


def worker_properties(work: Path, addresses: list[str]) -> str:
    """Spark properties of one worker: its own GPU discovery script (disjoint addresses)."""
    lines = ["spark.worker.cleanup.enabled=true"]
    if addresses:
        script = work / "gpus.sh"
        payload = json.dumps({"name": "gpu", "addresses": addresses})
        script.write_text(f"#!/usr/bin/env bash\necho '{payload}'\n")
        script.chmod(0o755)
        lines += [
            f"spark.worker.resource.gpu.amount={len(addresses)}",
            f"spark.worker.resource.gpu.discoveryScript={script}",
        ]
    return "\n".join(lines) + "\n"


def daemon_security(secret: str) -> str:
    """Properties master and workers need to accept only applications holding ``secret``
    (the same authentication and RPC encryption as a secure session asks for)."""
    return (
        "spark.authenticate=true\n"
        f"spark.authenticate.secret={secret}\n"
        "spark.network.crypto.enabled=true\n"
    )
