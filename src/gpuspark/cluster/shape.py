"""The embedded cluster's shape, derived from a cluster spec and scaled to this machine.

A spec describes the real cluster (say 2 servers x 8 GPUs, executors of 1 GPU and 16 cores
with 4 data tasks per GPU). The embedded cluster rehearses that shape on one machine: the
same task GPU amount and the same number of task slots per executor, fewer workers and GPUs,
one CPU per task and small memory. :func:`embedded_shape` works it out as plain data and
lists every value it scaled, so ``gpuspark cluster up --spec`` can print them.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuspark.errors import ClusterError
from gpuspark.spec import ClusterSpec, gpu_slots_per_executor

__all__ = [
    "EmbeddedShape",
    "check_hosts",
    "check_hosts_workers",
    "embedded_shape",
    "fraction",
    "parse_memory_mb",
    "worker_address",
]

MAX_SIMULATED_GPUS_PER_WORKER = 2
"""Simulated GPU slots per worker when the spec's nodes have more (one JVM each costs RAM)."""
MAX_EXECUTOR_MEMORY_MB = 1024
"""Executor memory on the embedded cluster (the spec's real executors are far larger)."""


@dataclass(frozen=True)
class EmbeddedShape:
    """Workers of the embedded cluster and the executors a session asks them for."""

    workers: int
    gpus_per_worker: int
    cores_per_worker: int
    memory_per_worker: str
    executor_gpus: int
    executor_cores: int
    task_cpus: int
    task_gpu_amount: float
    executor_memory: str
    spec_name: str = "embedded"
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def executors_per_worker(self) -> int:
        """Executors one application gets on each worker."""
        return self.cores_per_worker // self.executor_cores

    @property
    def task_slots(self) -> int:
        """Data tasks the whole cluster runs at once (one application)."""
        return self.workers * self.executors_per_worker * (self.executor_cores // self.task_cpus)

    def executor_conf(self) -> dict[str, str]:
        """The executor shape as Spark properties (applied over the spec's settings)."""
        conf = {
            "spark.executor.cores": str(self.executor_cores),
            "spark.task.cpus": str(self.task_cpus),
            "spark.executor.memory": self.executor_memory,
        }
        if self.executor_gpus:
            conf["spark.executor.resource.gpu.amount"] = str(self.executor_gpus)
            conf["spark.task.resource.gpu.amount"] = fraction(self.task_gpu_amount)
        return conf

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``cluster.json`` and ``cluster status --json``."""
        data = asdict(self)
        data["notes"] = list(self.notes)
        data["executors_per_worker"] = self.executors_per_worker
        data["task_slots"] = self.task_slots
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmbeddedShape:
        """Inverse of :meth:`as_dict`."""
        names = set(cls.__dataclass_fields__)
        kept = {k: v for k, v in data.items() if k in names}
        kept["notes"] = tuple(kept.get("notes", ()))
        return cls(**kept)


def fraction(value: float) -> str:
    """``1.0`` -> ``"1"``, ``0.25`` -> ``"0.25"`` (Spark's form of a resource amount)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def parse_memory_mb(text: str) -> int:
    """A JVM memory string (``512m``, ``4g``, ``1t``; no suffix means bytes) in MiB."""
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024, "p": 1024**3}
    value = str(text).strip().lower()
    try:
        if value and value[-1] in units:
            mb = float(value[:-1]) * units[value[-1]]
        else:
            mb = int(value) / (1024 * 1024)
    except ValueError:
        mb = -1.0
    if mb <= 0:
        raise ClusterError(
            f"memory {text!r} is not a JVM memory size",
            remedy="use a size like 512m, 4g or 1t",
        )
    return max(1, int(mb))


def _memory(mb: int) -> str:
    return f"{mb // 1024}g" if mb % 1024 == 0 else f"{mb}m"


def _workers(spec: ClusterSpec, want: int | None, real_gpus: int, notes: list[str]) -> int:
    if want is not None:
        if want < 1:
            raise ClusterError(f"--workers {want} (workers={want}) must be at least 1")
        return want
    limit = max(1, min(4, os.cpu_count() or 1))
    workers = min(spec.total_hosts, limit)
    if real_gpus:
        workers = max(1, min(workers, real_gpus))
    if workers != spec.total_hosts:
        notes.append(f"workers: {spec.total_hosts} hosts in the spec -> {workers} on this machine")
    return workers


def _gpus_per_worker(
    spec: ClusterSpec, workers: int, want: int | None, real_gpus: int, notes: list[str]
) -> int:
    per_node = max(g.gpus_per_node for g in spec.nodes)
    if want is not None:
        if want < 0:
            raise ClusterError(f"--gpus {want} (gpus={want}) must be 0 or more")
        if real_gpus and want * workers > real_gpus:
            raise ClusterError(
                f"--gpus {want} (gpus={want}) per worker x {workers} workers needs "
                f"{want * workers} GPUs but nvidia-smi shows {real_gpus}",
                remedy="lower --gpus or --workers",
            )
        return want
    cap = real_gpus // workers if real_gpus else MAX_SIMULATED_GPUS_PER_WORKER
    gpus = min(per_node, cap)
    if gpus != per_node:
        kind = "real GPUs" if real_gpus else "simulated GPU slots"
        notes.append(f"GPUs per worker: {per_node} per node in the spec -> {gpus} {kind}")
    return gpus


def _task_amount(executor_gpus: int, slots: int) -> float:
    """The task GPU amount that gives ``slots`` tasks on ``executor_gpus`` GPUs, if any."""
    if slots <= executor_gpus:
        if executor_gpus % slots:
            raise ClusterError(
                f"{slots} task slots cannot split {executor_gpus} GPUs evenly",
                remedy="give each worker a number of cores that divides its GPUs, or the reverse",
            )
        return float(executor_gpus // slots)
    if slots % executor_gpus:
        raise ClusterError(
            f"{slots} task slots cannot share {executor_gpus} GPUs evenly",
            remedy="give each worker a multiple of its GPUs in cores",
        )
    return 1.0 / (slots // executor_gpus)


def _executor_memory_mb(
    spec_memory: str, worker_memory: str | None, executors: int, notes: list[str]
) -> int:
    mb = min(parse_memory_mb(spec_memory), MAX_EXECUTOR_MEMORY_MB)
    if worker_memory is not None:
        mb = min(mb, parse_memory_mb(worker_memory) // executors)
        if mb < 512:
            raise ClusterError(
                f"--memory {worker_memory} (memory={worker_memory!r}) per worker leaves {mb} "
                f"MiB to each of its {executors} executors; Spark needs at least 512m",
                remedy=f"give each worker at least {_memory(512 * executors)}",
            )
    if mb != parse_memory_mb(spec_memory):
        notes.append(f"executor memory: {spec_memory} -> {_memory(mb)}")
    return mb


def embedded_shape(
    spec: ClusterSpec,
    *,
    workers: int | None = None,
    gpus: int | None = None,
    cores: int | None = None,
    memory: str | None = None,
    real_gpus: int = 0,
) -> EmbeddedShape:
    """The embedded cluster that rehearses ``spec`` here; explicit arguments override it.

    Kept from the spec: the task GPU amount and the task slots per executor (so 4 data tasks
    share a GPU exactly as on the real cluster). Scaled: workers (at most the spec's hosts, 4
    and this machine's CPUs or real GPUs), GPUs per worker (real ones split evenly, else at
    most 2 simulated), one CPU per task, 1 GiB executors. ``cores`` (per worker) changes the
    slots per executor; the task GPU amount then follows so GPU and CPU slots stay equal (a
    conf Spark would call wasteful is never produced).
    """
    notes: list[str] = []
    s = spec.spark
    n_workers = _workers(spec, workers, real_gpus, notes)
    per_worker = _gpus_per_worker(spec, n_workers, gpus, real_gpus, notes)
    executor_gpus = min(s.executor_gpus, per_worker)
    if executor_gpus != s.executor_gpus and per_worker:
        notes.append(f"executor GPUs: {s.executor_gpus} -> {executor_gpus}")
    executors = per_worker // executor_gpus if executor_gpus else 1
    if executor_gpus:
        amount = min(s.task_gpu_amount, float(executor_gpus))
        slots = gpu_slots_per_executor(executor_gpus, amount)
    else:
        amount, slots = 0.0, s.executor_cores // s.task_cpus
    if cores is not None:
        if cores < executors:
            raise ClusterError(
                f"--cores {cores} (cores={cores}) per worker cannot hold {executors} executors of "
                f"{executor_gpus} GPU(s) each",
                remedy=f"give each worker at least {executors} cores, or fewer GPUs",
            )
        slots = cores // executors
        if executor_gpus:
            amount = _task_amount(executor_gpus, slots)
    if s.task_cpus != 1:
        notes.append(
            f"task CPUs: {s.task_cpus} -> 1 (executor cores {s.executor_cores} -> {slots})"
        )
    memory_mb = _executor_memory_mb(s.executor_memory, memory, executors, notes)
    return EmbeddedShape(
        workers=n_workers,
        gpus_per_worker=per_worker,
        cores_per_worker=executors * slots,
        memory_per_worker=memory or _memory(executors * memory_mb),
        executor_gpus=executor_gpus,
        executor_cores=slots,
        task_cpus=1,
        task_gpu_amount=amount,
        executor_memory=_memory(memory_mb),
        spec_name=spec.name,
        notes=tuple(notes),
    )


def check_hosts(hosts: int | None, host: str) -> int | None:
    """``hosts`` distinct worker addresses need the cluster on 127.0.0.1 and 1 to 253 of them."""
    if hosts is None:
        return None
    if not 1 <= hosts <= 253:
        raise ClusterError(
            f"--hosts {hosts} (hosts={hosts}): the workers' loopback addresses are 127.0.0.2 "
            "to 127.0.0.254",
            remedy="pick 1 to 253 hosts",
        )
    if host != "127.0.0.1":
        raise ClusterError(
            f"--hosts {hosts} (hosts={hosts}) gives each worker its own loopback address, but "
            f"the cluster's host is {host}",
            remedy="leave the host at 127.0.0.1 with --hosts, or drop --hosts",
        )
    return hosts


def check_hosts_workers(hosts: int | None, workers: int) -> None:
    """``hosts`` distinct hosts need a worker each: fewer workers would give fewer hosts."""
    if hosts is None or workers >= hosts:
        return
    raise ClusterError(
        f"--hosts {hosts} (hosts={hosts}) needs a worker on each host, but --workers {workers} "
        f"(workers={workers}) would give only {workers} host(s)",
        remedy=f"ask for --workers {hosts} (or more) with --hosts {hosts}, "
        f"or for --hosts {workers}",
    )


def worker_address(index: int, hosts: int | None, host: str) -> str:
    """Worker ``index``'s address: ``127.0.0.<2 + index % hosts>`` with ``hosts`` distinct
    hosts (Linux routes all of 127.0.0.0/8 to loopback), else the cluster's ``host``."""
    return host if hosts is None else f"127.0.0.{2 + index % hosts}"
