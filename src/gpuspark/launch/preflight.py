"""Checks before any task starts: the Spark conf and free slots; and the rule for the
executors' Python, which the barrier tasks apply themselves (no separate job).

Each check raises one :class:`~gpuspark.errors.LaunchError` with a remedy. The pure checks
(:func:`check_conf`, :func:`check_capacity`, :func:`check_python`) take plain values;
:func:`preflight` reads those values from a live SparkContext and runs them all.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuspark.errors import LaunchError

if TYPE_CHECKING:
    from gpuspark.launch.request import LaunchRequest

__all__ = [
    "ExecutorCapacity",
    "check_capacity",
    "check_conf",
    "check_python",
    "executor_capacity",
    "preflight",
]

_REGISTER_WAIT_S = 10.0
"""How long the capacity check waits for executors still registering before it refuses."""


@dataclass
class ExecutorCapacity:
    """What the executors offer a barrier stage, read from the Spark conf and status tracker."""

    executors: int
    cores_per_executor: int
    gpus_per_executor: float
    running_tasks: int = 0
    task_gpu_amount: float = 0.0
    task_cpus: int = 1

    def task_cpus_for(self, gpus_per_task: float) -> int:
        """CPUs a barrier task asks for: its share of the executor's cores, so that CPU and
        GPU slots agree (else Spark warns of wasted resources); 1 for CPU-only tasks."""
        if gpus_per_task <= 0 or self.gpus_per_executor <= 0:
            return 1
        gpu_slots = max(1, math.floor(self.gpus_per_executor / gpus_per_task + 1e-9))
        return max(1, self.cores_per_executor // gpu_slots)

    def slots(self, gpus_per_task: float) -> int:
        """How many barrier tasks (``gpus_per_task`` GPUs each) fit on idle executors."""
        per_exec = self.cores_per_executor // self.task_cpus_for(gpus_per_task)
        if gpus_per_task > 0:
            per_exec = min(per_exec, math.floor(self.gpus_per_executor / gpus_per_task))
        return self.executors * per_exec

    @property
    def free_gpus(self) -> float:
        """GPUs not held by running tasks."""
        busy = self.running_tasks * self.task_gpu_amount
        return max(0.0, self.executors * self.gpus_per_executor - busy)

    @property
    def free_cores(self) -> int:
        """Cores not held by running tasks."""
        busy = self.running_tasks * self.task_cpus
        return max(0, self.executors * self.cores_per_executor - busy)


def check_conf(conf: Mapping[str, str]) -> None:
    """Refuse a Spark conf a barrier stage cannot run with (dynamic allocation, SPARK-24942)."""
    if str(conf.get("spark.dynamicAllocation.enabled", "false")).lower() == "true":
        raise LaunchError(
            "Spark dynamic allocation is on, and barrier stages refuse to run with it "
            "(SPARK-24942)",
            remedy="build the training session with spark.dynamicAllocation.enabled=false",
        )


def check_capacity(num_tasks: int, gpus_per_task: float, cap: ExecutorCapacity) -> None:
    """Refuse a barrier stage that cannot get all its slots at once (needed vs available)."""
    need_gpus = num_tasks * gpus_per_task
    if gpus_per_task > cap.gpus_per_executor:
        raise LaunchError(
            f"a barrier task needs {gpus_per_task:g} GPUs but each executor has "
            f"{cap.gpus_per_executor:g}",
            remedy="lower --nproc-per-node (processes_per_task) or --gpus-per-process "
            "(gpus_per_process), or give executors more GPUs (spark.executor.resource.gpu.amount)",
        )
    slots = cap.slots(gpus_per_task)
    short_gpus = gpus_per_task > 0 and need_gpus > cap.free_gpus + 1e-9
    cpus = cap.task_cpus_for(gpus_per_task)
    if num_tasks > slots or num_tasks * cpus > cap.free_cores or short_gpus:
        what = f"{num_tasks} tasks x {gpus_per_task:g} GPU = {need_gpus:g} GPUs"
        have = (
            f"{cap.executors} executor(s) x {cap.gpus_per_executor:g} GPUs, "
            f"{cap.free_gpus:g} GPUs and {cap.free_cores} cores free, room for {slots} tasks"
        )
        raise LaunchError(
            f"not enough free slots for the barrier stage: needs {what}; the cluster has {have}",
            remedy="use fewer processes, wait for running jobs, or add workers",
        )


def check_python(driver: tuple[int, int], executors: set[tuple[int, int]]) -> None:
    """Refuse executors running another Python than the driver (cloudpickle needs the same)."""
    other = sorted(v for v in executors if tuple(v) != tuple(driver))
    if other:
        shown = ", ".join(f"{a}.{b}" for a, b in other)
        raise LaunchError(
            f"the driver runs Python {driver[0]}.{driver[1]} but executors run {shown}",
            remedy="point spark.pyspark.python / PYSPARK_PYTHON at the driver's Python",
        )


def _jvm_executor_counts(sc: Any) -> tuple[int, int]:
    """(registered executors, tasks running on them), asked of the JVM SparkContext.

    PySpark has no public API for executor infos (its ``StatusTracker`` covers jobs and stages
    only), so this is the one place that goes through ``sc._jsc`` to Scala's
    ``SparkContext.getExecutorIds`` and ``statusTracker.getExecutorInfos``.
    """
    jsc = sc._jsc.sc()
    executors = int(jsc.getExecutorIds().size())
    running = sum(int(i.numRunningTasks()) for i in jsc.statusTracker().getExecutorInfos())
    return executors, running


def executor_capacity(sc: Any, conf: Mapping[str, str]) -> ExecutorCapacity:
    """What the executors of ``sc`` offer now, from the conf and the running tasks."""
    executors, running = _jvm_executor_counts(sc)
    if str(sc.master).startswith("local"):
        cores = int(sc.defaultParallelism)
        return ExecutorCapacity(1, cores, 0.0, running, 0.0, 1)
    return ExecutorCapacity(
        executors=executors,
        cores_per_executor=int(conf.get("spark.executor.cores", sc.defaultParallelism)),
        gpus_per_executor=float(conf.get("spark.executor.resource.gpu.amount", 0)),
        running_tasks=running,
        task_gpu_amount=float(conf.get("spark.task.resource.gpu.amount", 0)),
        task_cpus=int(conf.get("spark.task.cpus", 1)),
    )


def preflight(req: LaunchRequest, sc: Any) -> None:
    """Refuse, before any task starts, a launch the cluster behind ``sc`` cannot run."""
    conf = dict(sc.getConf().getAll())
    check_conf(conf)
    if str(sc.master).startswith("local") and req.gpus_per_process > 0:
        raise LaunchError(
            f"master={sc.master} cannot give barrier tasks whole GPUs",
            remedy="use the embedded cluster (gpuspark cluster up), --local (local=True), or "
            "--gpus-per-process 0 (gpus_per_process=0)",
        )
    deadline = time.monotonic() + _REGISTER_WAIT_S
    while True:
        try:
            check_capacity(req.num_tasks, req.gpus_per_task, executor_capacity(sc, conf))
            break
        except LaunchError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
