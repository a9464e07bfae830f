"""Run a function or a script on N ranks: on Spark (one barrier stage) or on this machine.

``run(fn, *args, num_processes=4, spark=spark)`` builds a :class:`LaunchRequest` (plain data;
``materialize()`` prints it), checks the cluster up front, then runs one Spark barrier stage of
``num_processes / processes_per_task`` tasks with a task resource profile asking whole GPUs, so
the application keeps ``spark.task.resource.gpu.amount=0.25`` for its data work. Each task sets
``CUDA_VISIBLE_DEVICES`` from ``TaskContext.resources()``, shares task 0's host and a free port
with the others through the driver (``BarrierTaskContext.allGather`` when it cannot reach the
driver's log server) and starts its ranks through torch's elastic agent. Rank
lines stream to the driver as ``[rank r] ...``; rank 0's return value comes back; a failure
raises one :class:`~gpuspark.errors.LaunchError` naming the rank, its host and the end of its
traceback.

This is the package's public face; the modules behind it, one concern each:

- :mod:`~gpuspark.launch.request`: :class:`LaunchRequest`, :func:`make_request` (dry run;
  torchrun's ``-m``, ``--log-dir`` and ``--tee`` as ``module``, ``log_dir``, ``tee``);
- :mod:`~gpuspark.launch.preflight`: conf, free slots and Python checks before any task;
- :mod:`~gpuspark.launch.ranks`: backend choice, the ranks' environment, :func:`restart_count`;
- :mod:`~gpuspark.launch.spark`: the barrier stage; :mod:`~gpuspark.launch.local`: local mode;
- :mod:`~gpuspark.launch.results`: rank 0's value, or one error naming the root cause;
- :mod:`~gpuspark.launch.api`: :func:`run` and :func:`run_request`;
- ``_internal/``: the elastic agent per task, the rank process, log streaming (private).

Nothing here imports torch or pyspark at import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuspark.errors import LaunchError
    from gpuspark.launch.api import prepare, run, run_request
    from gpuspark.launch.preflight import (
        ExecutorCapacity,
        check_capacity,
        check_conf,
        check_python,
    )
    from gpuspark.launch.ranks import restart_count
    from gpuspark.launch.request import LaunchRequest, make_request

_LAZY = {
    "ExecutorCapacity": "gpuspark.launch.preflight",
    "LaunchError": "gpuspark.errors",
    "LaunchRequest": "gpuspark.launch.request",
    "check_capacity": "gpuspark.launch.preflight",
    "check_conf": "gpuspark.launch.preflight",
    "check_python": "gpuspark.launch.preflight",
    "make_request": "gpuspark.launch.request",
    "prepare": "gpuspark.launch.api",
    "restart_count": "gpuspark.launch.ranks",
    "run": "gpuspark.launch.api",
    "run_request": "gpuspark.launch.api",
}
"""Where each public name lives: loaded on first use, so that a barrier task on an executor,
which needs only :mod:`~gpuspark.launch.spark` and ``_internal``, does not import the driver
side (sessions, the spec's models) first."""

__all__ = [
    "ExecutorCapacity",
    "LaunchError",
    "LaunchRequest",
    "check_capacity",
    "check_conf",
    "check_python",
    "make_request",
    "prepare",
    "restart_count",
    "run",
    "run_request",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuspark.launch' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
