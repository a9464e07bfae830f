"""Refuse, before a session starts, an executor shape that no worker of a standalone master
can ever hold.

Spark's standalone master keeps such an application WAITING for ever and only its own log
says why (``requires more resource than any of Workers could have``); the driver waits in
silence. The master's ``/json/`` page lists every worker's total cores, memory and GPU
addresses, so the session path compares one executor's request with them first. Only the
totals count: a worker that is busy now frees its resources later, and waiting for it is
standalone's first-come-first-served queue, not an error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuspark._util.net import http_get_json
from gpuspark.cluster.shape import parse_memory_mb
from gpuspark.errors import ClusterError
from gpuspark.schedulers import find_backend
from gpuspark.schedulers.standalone import MASTER_UI_PORT, gpu_count
from gpuspark.spec import gpu_slots_per_executor

__all__ = [
    "MASTER_UI_PORT",
    "ExecutorNeed",
    "check_fits",
    "check_slots",
    "gpu_count",
    "master_workers",
    "unfit_reason",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExecutorNeed:
    """What one executor asks a standalone worker for (``cores`` 0: not set, any worker)."""

    cores: int
    memory_mb: int
    gpus: int

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> ExecutorNeed:
        """From ``spark.executor.cores``, ``.memory`` (Spark's default 1g) and GPU amount."""

        gpus = float(conf.get("spark.executor.resource.gpu.amount", 0) or 0)
        return cls(
            cores=int(conf.get("spark.executor.cores", 0) or 0),
            memory_mb=parse_memory_mb(conf.get("spark.executor.memory", "1g")),
            gpus=int(gpus),
        )

    def describe(self) -> str:
        """``8 cores, 16384 MB, 2 GPUs`` (cores left out when not set)."""
        parts = [f"{self.cores} cores"] if self.cores else []
        parts.append(f"{self.memory_mb} MB")
        if self.gpus:
            parts.append(f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}")
        return ", ".join(parts)


def _gpus(worker: Mapping[str, Any]) -> int:
    return gpu_count(worker.get("resources"))


def _short(worker: Mapping[str, Any]) -> str:
    return (
        f"{worker.get('host')}:{worker.get('port')} {worker.get('cores')} cores, "
        f"{worker.get('memory')} MB, {_gpus(worker)} GPUs"
    )


def unfit_reason(need: ExecutorNeed, workers: Sequence[Mapping[str, Any]]) -> str | None:
    """Why no ALIVE worker can ever hold one executor of ``need`` (``None``: one can)."""
    alive = [w for w in workers if w.get("state") == "ALIVE"]
    if not alive:
        return None  # workers may still be registering; the master's own wait applies
    for w in alive:
        if (
            int(w.get("cores", 0)) >= need.cores
            and int(w.get("memory", 0)) >= need.memory_mb
            and _gpus(w) >= need.gpus
        ):
            return None
    listed = "; ".join(_short(w) for w in alive[:4]) + ("; …" if len(alive) > 4 else "")
    return f"one executor asks for {need.describe()}, more than any worker has ({listed})"


def _fix(need: ExecutorNeed, workers: Sequence[Mapping[str, Any]]) -> str:
    alive = [w for w in workers if w.get("state") == "ALIVE"]
    cores = max(int(w.get("cores", 0)) for w in alive)
    memory = max(int(w.get("memory", 0)) for w in alive)
    gpus = max(_gpus(w) for w in alive)
    asks = []
    if need.cores > cores:
        asks.append(f"spark.executor.cores <= {cores}")
    if need.memory_mb > memory:
        asks.append(f"spark.executor.memory <= {memory}m")
    if need.gpus > gpus:
        asks.append(f"spark.executor.resource.gpu.amount <= {gpus}")
    which = ", ".join(asks) or "an executor no larger than one worker"
    return f"set {which} (the spec's [spark] table or --conf), or add a larger worker"


def master_workers(
    master: str, ui_url: str | None, timeout: float = 2.0, port: int | str = MASTER_UI_PORT
) -> list[Any] | None:
    """The workers on the ``/json/`` page of the standalone master ``master`` (``None``: no
    page answered, or it belongs to another master). ``ui_url`` defaults to ``port`` (8080)
    of the master's host; a high-availability URL (several hosts) is not probed."""
    found = find_backend(master)
    hosts = found.master_ui_hosts(master) if found is not None else []
    if len(hosts) != 1:
        return None
    base = ui_url or f"http://{hosts[0]}:{port}"
    try:
        page = http_get_json(f"{base.rstrip('/')}/json/", timeout=timeout)
    except (OSError, ValueError) as exc:
        log.debug("no standalone master page at %s: %s", base, exc)
        return None
    if not isinstance(page, dict) or page.get("url") != master:
        return None
    return list(page.get("workers") or [])


def check_fits(master: str, conf: Mapping[str, str], ui_url: str | None = None) -> None:
    """Raise :class:`ClusterError` when no worker of ``master`` can ever hold one executor of
    ``conf``'s shape; nothing when it can, or when the master's page cannot be read (its port:
    ``spark.master.ui.port`` in ``conf``, as the spec's ``[spark.conf]`` may set it, else 8080).
    """
    port = conf.get("spark.master.ui.port", MASTER_UI_PORT)
    workers = master_workers(master, ui_url, port=port)
    if not workers:
        return
    need = ExecutorNeed.from_conf(conf)
    reason = unfit_reason(need, workers)
    if reason is not None:
        raise ClusterError(
            f"the Spark master at {master} can never start this job's executors: {reason}",
            remedy=_fix(need, workers),
        )


def check_slots(conf: dict[str, str]) -> None:
    """Refuse an executor shape whose GPU and CPU task slots differ: Spark would warn that it
    "will result in wasted resources" and leave cores or GPU shares idle."""
    gpus = float(conf.get("spark.executor.resource.gpu.amount", 0) or 0)
    amount = float(conf.get("spark.task.resource.gpu.amount", 0) or 0)
    cores = conf.get("spark.executor.cores")
    if not (gpus and amount and cores):
        return
    cpus = int(conf.get("spark.task.cpus", "1"))
    gpu_slots = gpu_slots_per_executor(int(gpus), amount)
    cpu_slots = int(cores) // cpus
    if gpu_slots != cpu_slots:
        raise ClusterError(
            f"executors of {cores} cores / {cpus} CPU per task = {cpu_slots} task slots, but "
            f"{gpus:g} GPUs / {amount:g} GPU per task = {gpu_slots}: Spark would warn of "
            "wasted resources and leave "
            f"{'cores' if cpu_slots > gpu_slots else 'GPU shares'} idle",
            remedy=f"set spark.executor.cores={gpu_slots * cpus} or "
            f"spark.task.resource.gpu.amount to give {cpu_slots} tasks per executor",
        )
