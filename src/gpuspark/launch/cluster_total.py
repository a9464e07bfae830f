"""Before any Spark session: a launch that asks more GPUs than the standalone cluster holds in
all is refused with the numbers (the executors' capacity check needs a session; this needs
only the master's status page)."""

from __future__ import annotations

from typing import Any

from gpuspark.cluster.fit import master_workers
from gpuspark.cluster.local import LocalCluster
from gpuspark.errors import LaunchError
from gpuspark.launch.request import LaunchRequest
from gpuspark.schedulers.standalone import gpu_count

__all__ = ["check_cluster_total"]


def _workers(master: str | None) -> tuple[str, list[Any]] | None:
    """``(master URL, alive workers)`` of the running embedded cluster (``master`` unset or
    its URL) or of the standalone ``master``; ``None`` when no status page answers."""
    embedded = LocalCluster.running()
    if embedded is not None and master in (None, embedded.master_url):
        page = embedded.master_json(timeout=2.0)
        found = (embedded.master_url, list(page.get("workers") or [])) if page else None
    elif master is not None:
        workers = master_workers(master, None)
        found = (master, workers) if workers is not None else None
    else:
        return None  # no cluster yet: the session starts one of the spec's shape
    if found is None:
        return None
    return found[0], [w for w in found[1] if w.get("state", "ALIVE") == "ALIVE"]


def check_cluster_total(req: LaunchRequest, master: str | None) -> None:
    """Raise :class:`LaunchError` when ``req`` needs more GPUs than the cluster has in all."""
    need = req.num_processes * req.gpus_per_process
    if req.local or need <= 0:
        return
    found = _workers(master)
    if found is None or not found[1]:
        return
    url, workers = found
    total = sum(gpu_count(w.get("resources")) for w in workers)
    if need > total:
        most = int(total // req.gpus_per_process) if req.gpus_per_process else 0
        raise LaunchError(
            f"{req.num_processes} ranks x {req.gpus_per_process:g} GPU need {need:g} GPUs; "
            f"the cluster at {url} has {total} in all ({len(workers)} workers)",
            remedy=f"use -n {most} or fewer, or a cluster with more GPUs",
        )
