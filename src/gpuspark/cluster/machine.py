"""Refuse, before anything starts, an embedded cluster this machine cannot hold.

Every worker of the embedded cluster is a JVM of its own, and so is the master. Two rules,
checked with the numbers before the first process starts (both broken: both said):

- **CPUs**: at most :data:`WORKERS_PER_CPU` workers per CPU this process may run on. A worker
  JVM spends seconds of CPU starting, and its executors need CPU to run tasks; 99 workers on
  2 CPUs once took 139 s to time out. (Task slots may exceed the CPUs: they only share them.)
- **Memory**: every daemon JVM (master and workers) may take ``SPARK_DAEMON_MEMORY`` (512m
  unless set) and every worker offers its ``--memory`` to executors, so
  ``workers x (worker memory + daemon memory) + daemon memory`` must fit in the machine's
  memory (``MemTotal`` of ``/proc/meminfo``). The total, not what is free now: a worker's
  memory is an offer that executors take only while they run, and what other programs hold
  comes and goes (the same rule as :mod:`.fit`: only totals count).

A machine that does not say (no ``/proc/meminfo``) is not checked for memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpuspark.cluster.shape import EmbeddedShape, parse_memory_mb
from gpuspark.errors import ClusterError

__all__ = [
    "DAEMON_MEMORY",
    "WORKERS_PER_CPU",
    "Machine",
    "check_machine",
    "cluster_memory_mb",
    "daemon_memory_mb",
]

WORKERS_PER_CPU = 4
"""Worker JVMs per CPU the embedded cluster may start (the default shape starts at most 4)."""
DAEMON_MEMORY = "512m"
"""Heap of the master's and each worker's own JVM unless ``SPARK_DAEMON_MEMORY`` says."""


@dataclass(frozen=True)
class Machine:
    """What this machine offers the embedded cluster."""

    cpus: int
    """CPUs this process may run on (its affinity, else ``os.cpu_count()``)."""
    memory_mb: int | None
    """The machine's memory in MiB (``None``: unknown, not checked)."""

    @classmethod
    def here(cls) -> Machine:
        """This machine, now."""
        return cls(cpus=_cpus(), memory_mb=_total_mb())


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _total_mb(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        text = meminfo.read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024  # the figure is in kB
    return None


def daemon_memory_mb() -> int:
    """What one daemon JVM (master or worker) may take: ``SPARK_DAEMON_MEMORY`` or 512m."""
    return parse_memory_mb(os.environ.get("SPARK_DAEMON_MEMORY") or DAEMON_MEMORY)


def cluster_memory_mb(shape: EmbeddedShape) -> int:
    """Memory the cluster of ``shape`` may take at most: its workers' offers to executors and
    every daemon JVM (the workers' and the master's)."""
    daemon = daemon_memory_mb()
    return shape.workers * (parse_memory_mb(shape.memory_per_worker) + daemon) + daemon


def _cpu_problem(shape: EmbeddedShape, machine: Machine) -> tuple[str, str] | None:
    most = WORKERS_PER_CPU * machine.cpus
    if shape.workers <= most:
        return None
    return (
        f"{shape.workers} worker JVMs on {machine.cpus} CPU(s), more than {WORKERS_PER_CPU} "
        f"per CPU ({most})",
        f"at most {most} workers (--workers; more task slots each with --cores)",
    )


def _memory_problem(shape: EmbeddedShape, machine: Machine) -> tuple[str, str] | None:
    if machine.memory_mb is None:
        return None
    need = cluster_memory_mb(shape)
    if need <= machine.memory_mb:
        return None
    daemon = daemon_memory_mb()
    per_worker = parse_memory_mb(shape.memory_per_worker)
    fit = max(0, (machine.memory_mb - daemon) // (per_worker + daemon))
    return (
        f"{shape.workers} workers x ({shape.memory_per_worker} for executors + {daemon} MiB "
        f"worker JVM) + {daemon} MiB master = {need} MiB, more than the machine's "
        f"{machine.memory_mb} MiB",
        _memory_fix(fit, shape.memory_per_worker, machine.memory_mb - 2 * daemon),
    )


def _memory_fix(fit: int, per_worker: str, most_mb: int) -> str:
    if fit >= 1:
        return f"at most {fit} workers of {per_worker} (--workers) or less memory each (--memory)"
    return f"less memory per worker (--memory, at most {most_mb}m for one worker)"


def check_machine(shape: EmbeddedShape, machine: Machine | None = None) -> None:
    """Raise :class:`ClusterError`, naming the numbers, when ``machine`` (default: this one,
    now) cannot hold an embedded cluster of ``shape`` (see the module's rules)."""
    found = machine or Machine.here()
    problems = [p for p in (_cpu_problem(shape, found), _memory_problem(shape, found)) if p]
    if not problems:
        return
    raise ClusterError(
        "this machine cannot hold the embedded cluster asked for: "
        + "; ".join(reason for reason, _fix in problems)
        + "; nothing started",
        remedy="ask for " + ", and ".join(fix for _reason, fix in problems),
    )
