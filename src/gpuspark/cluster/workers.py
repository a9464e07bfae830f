"""What each worker of the embedded cluster is given: its GPU addresses, its properties file
(its own GPU discovery script; the shared secret on a secure cluster), and its folder, which
a start that fails half way removes again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from gpuspark.cluster.shape import EmbeddedShape

__all__ = ["assign_gpus", "daemon_security", "remove_dirs", "worker_properties"]


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
