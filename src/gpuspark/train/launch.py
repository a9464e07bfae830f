"""Run a function or a script on N ranks: on Spark (one barrier stage) or on this machine.

``run(fn, *args, num_processes=4, spark=spark)`` builds a :class:`LaunchRequest` (plain data;
``materialize()`` prints it), checks the cluster up front, then runs one Spark barrier stage of
``num_processes / processes_per_task`` tasks with a task resource profile asking whole GPUs, so
the application keeps ``spark.task.resource.gpu.amount=0.25`` for its data work. Each task sets
``CUDA_VISIBLE_DEVICES`` from ``TaskContext.resources()``, shares task 0's host and a free port
with ``BarrierTaskContext.allGather`` and starts its ranks through torch's elastic agent (see
:mod:`gpuspark.train._agent`). Rank lines stream to the driver as ``[rank r] ...``; rank 0's
return value comes back; a failure raises one :class:`~gpuspark.errors.LaunchError` naming the
rank, its host and the end of its traceback.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuspark.errors import LaunchError

__all__ = [
    "ExecutorCapacity",
    "LaunchError",
    "LaunchRequest",
    "check_capacity",
    "check_conf",
    "check_python",
    "make_request",
    "restart_count",
    "run",
    "run_request",
]

_BACKENDS = ("auto", "nccl", "gloo")
_PY_VERSIONS: dict[str, set[tuple[int, int]]] = {}
_ERROR_LINES = 8
_REGISTER_WAIT_S = 10.0
"""How long the capacity check waits for executors still registering before it refuses."""


# ---------------------------------------------------------------------------- the request


@dataclass
class LaunchRequest:
    """What to run, on how many ranks, where: plain data, built before anything starts."""

    num_processes: int
    """World size: the number of ranks."""
    gpus_per_process: float = 1.0
    """Whole GPUs per rank (0 for CPU ranks)."""
    processes_per_task: int | None = None
    """Ranks per Spark barrier task (default 1 on Spark; all of them in local mode)."""
    local: bool = False
    """Run on this machine instead of Spark."""
    master: str | None = None
    """Spark master URL, for display."""
    backend: str = "auto"
    """``auto`` (NCCL when GPUs are assigned and CUDA is available, else gloo), nccl, gloo."""
    max_restarts: int = 0
    """Restarts of failed ranks by the elastic agent."""
    max_attempts: int = 1
    """Attempts of the whole barrier stage (the last one's failure is raised)."""
    timeout: float | None = None
    """Seconds per attempt (all ranks are stopped when it runs out), or None."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of every rank."""
    function: str | None = None
    """Name of the function (function mode)."""
    payload: bytes | None = field(default=None, repr=False)
    """``cloudpickle.dumps((fn, args, kwargs))`` (function mode)."""
    script: list[str] | None = None
    """``[script.py, *args]`` (script mode)."""

    def __post_init__(self) -> None:
        _check_shape(self)

    @property
    def per_task(self) -> int:
        """Ranks per task (per node in local mode)."""
        if self.local:
            return self.num_processes
        return self.processes_per_task or 1

    @property
    def num_tasks(self) -> int:
        """Barrier tasks (elastic agents / nodes)."""
        return self.num_processes // self.per_task

    @property
    def gpus_per_task(self) -> float:
        """GPUs one barrier task asks for in its resource profile."""
        return self.gpus_per_process * self.per_task

    @property
    def rdzv_backend(self) -> str:
        """``static`` (one TCP store at task 0, fastest) unless ranks may restart.

        The static rendezvous never forms a new round: restarted ranks would read their peers'
        old addresses, and other nodes would not follow. ``c10d`` starts a new round on every
        restart, on every node.
        """
        return "c10d" if self.max_restarts > 0 else "static"

    @property
    def entrypoint(self) -> str:
        """What each rank runs, for humans."""
        if self.script is not None:
            return " ".join(shlex.quote(a) for a in self.script)
        return f"function {self.function or '?'}"

    def materialize(self) -> str:
        """The launch as text: what would run where (a dry run; nothing is started)."""
        gpu = f"{self.gpus_per_task:g}"
        lines = [
            f"ranks: {self.num_processes} ({self.num_tasks} node(s) x {self.per_task})",
            f"entrypoint: {self.entrypoint}",
            f"backend: {self.backend}",
            f"elastic agent: rdzv={self.rdzv_backend} max_restarts={self.max_restarts} "
            f"attempts={self.max_attempts} timeout={self.timeout}",
        ]
        if self.local:
            lines.insert(0, "mode: local (this machine)")
        else:
            lines.insert(0, f"mode: spark ({self.master or 'session master'})")
            lines.append(
                f"barrier stage: {self.num_tasks} tasks, task resource profile cpus=1 gpu={gpu}"
            )
        lines.append("per node: " + self._torchrun_line())
        lines += [f"env: {k}={v}" for k, v in sorted(self.env.items())]
        return "\n".join(lines)

    def _torchrun_line(self) -> str:
        parts = ["torchrun", f"--nnodes={self.num_tasks}", f"--nproc-per-node={self.per_task}"]
        parts += [f"--rdzv-backend={self.rdzv_backend}", "--rdzv-endpoint=<task0-host>:<port>"]
        parts += [f"--max-restarts={self.max_restarts}"]
        if self.num_tasks > 1 and self.rdzv_backend == "static":
            parts.append("--node-rank=<task>")
        return " ".join([*parts, self.entrypoint])


def _whole(value: float) -> bool:
    return float(value).is_integer()


def _check_shape(req: LaunchRequest) -> None:
    if not isinstance(req.num_processes, int) or req.num_processes < 1:
        raise LaunchError(
            f"num_processes={req.num_processes!r} must be a whole number >= 1",
            remedy="pass num_processes=N, the number of ranks",
        )
    ppt = req.processes_per_task
    if ppt is not None and (not isinstance(ppt, int) or ppt < 1):
        raise LaunchError(f"processes_per_task={ppt!r} must be a whole number >= 1")
    if ppt is not None and req.local and ppt != req.num_processes:
        raise LaunchError(
            f"processes_per_task={ppt} does not apply in local mode (one node, "
            f"{req.num_processes} processes)",
            remedy="leave processes_per_task out with local=True",
        )
    if ppt is not None and req.num_processes % ppt:
        lower = req.num_processes - req.num_processes % ppt
        options = ", ".join(str(n) for n in (lower, lower + ppt) if n > 0)
        raise LaunchError(
            f"num_processes={req.num_processes} is not a multiple of processes_per_task={ppt}",
            remedy=f"use num_processes={options}, or another processes_per_task",
        )
    g = req.gpus_per_process
    if g < 0 or not _whole(g):
        raise LaunchError(
            f"gpus_per_process={g!r}: a training process needs whole GPUs",
            remedy="use 1 (or 2, ...); use 0 for CPU ranks",
        )
    if req.backend not in _BACKENDS:
        from gpuspark.errors import did_you_mean

        raise LaunchError(
            f"backend={req.backend!r} is not one of {', '.join(_BACKENDS)}"
            + did_you_mean(req.backend, _BACKENDS)
        )
    if req.max_restarts < 0 or req.max_attempts < 1:
        raise LaunchError(
            f"max_restarts={req.max_restarts}, max_attempts={req.max_attempts}",
            remedy="max_restarts must be >= 0 and max_attempts >= 1",
        )
    if (req.payload is None) == (req.script is None):
        raise LaunchError("a launch needs exactly one of a function or a script")


# ---------------------------------------------------------------------------- checks


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
            remedy="lower processes_per_task or gpus_per_process, or give executors more GPUs "
            "(spark.executor.resource.gpu.amount)",
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


def _executor_capacity(sc: Any, conf: Mapping[str, str]) -> ExecutorCapacity:
    jsc = sc._jsc.sc()
    executors = int(jsc.getExecutorIds().size())
    running = sum(int(i.numRunningTasks()) for i in jsc.statusTracker().getExecutorInfos())
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


def _executor_pythons(sc: Any) -> set[tuple[int, int]]:
    """Python versions of the executors, by one tiny job per application (cached)."""
    app = str(sc.applicationId)
    if app not in _PY_VERSIONS:
        n = max(2, int(sc.defaultParallelism))
        rdd = sc.parallelize(range(n), n).map(lambda _: tuple(__import__("sys").version_info[:2]))
        _PY_VERSIONS[app] = {tuple(v) for v in rdd.distinct().collect()}
    return _PY_VERSIONS[app]


def _preflight(req: LaunchRequest, sc: Any) -> None:
    conf = dict(sc.getConf().getAll())
    check_conf(conf)
    if str(sc.master).startswith("local") and req.gpus_per_process > 0:
        raise LaunchError(
            f"master={sc.master} cannot give barrier tasks whole GPUs",
            remedy="use the embedded cluster (gpuspark cluster up), local=True, or "
            "gpus_per_process=0",
        )
    deadline = time.monotonic() + _REGISTER_WAIT_S
    while True:
        try:
            check_capacity(req.num_tasks, req.gpus_per_task, _executor_capacity(sc, conf))
            break
        except LaunchError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    check_python((sys.version_info[0], sys.version_info[1]), _executor_pythons(sc))


# ---------------------------------------------------------------------------- results


def _failure_sort_key(rec: dict[str, Any]) -> tuple[float, int]:
    # The root cause is the earliest failure: peers of a dead rank fail after it. The error
    # file's time is precise; the agent's timestamp (whole seconds) covers signals.
    err = rec.get("error") or {}
    return (float(err.get("time", rec.get("timestamp", 0))), rec.get("rank", 0))


def _failure_error(rec: dict[str, Any], attempts: int) -> LaunchError:
    rank, host = rec.get("rank"), rec.get("host", "?")
    err = rec.get("error") or {}
    if rec.get("signal"):
        cause = f"killed by {rec['signal']}"
    elif err:
        cause = f"{err.get('type')}: {err.get('message')}"
    else:
        cause = f"exit code {rec.get('exitcode')}"
    lines = err.get("traceback") or rec.get("tail") or []
    tail = "".join(f"\n    {line}" for line in lines[-_ERROR_LINES:])
    after = f" after {attempts} attempt(s)" if attempts > 1 else ""
    return LaunchError(
        f"rank {rank} failed on host {host}{after}: {cause}"
        + (f"\n  last lines of rank {rank}:{tail}" if tail else "")
    )


def _result_error(results: Sequence[dict[str, Any]], attempts: int) -> LaunchError:
    failures = [f for r in results for f in r.get("failures", [])]
    if failures:
        return _failure_error(min(failures, key=_failure_sort_key), attempts)
    for r in results:
        if r.get("agent_error"):
            tail = "".join(f"\n    {line}" for line in r["agent_error"][-_ERROR_LINES:])
            return LaunchError(f"the elastic agent of task {r.get('task')} failed:{tail}")
    stopped = {r.get("stopped") for r in results if r.get("stopped")}
    return LaunchError(f"the launch stopped ({', '.join(sorted(map(str, stopped)))})")


def _value(results: Sequence[dict[str, Any]]) -> Any:
    import cloudpickle

    for r in results:
        if r.get("rank0"):
            raw = r.get("value")
            return None if raw is None else cloudpickle.loads(raw)
    return None


# ---------------------------------------------------------------------------- ranks' env


def _resolve_backend(requested: str, gpus: bool, cuda: bool) -> tuple[str, str]:
    """The backend and why: NCCL needs GPUs assigned and CUDA available; else gloo."""
    if requested != "auto":
        return requested, "requested"
    if gpus and cuda:
        return "nccl", "GPUs assigned and CUDA available"
    if not gpus:
        return "gloo", "no GPUs assigned"
    return "gloo", "CUDA not available (simulated or missing GPUs)"


def _cuda_available() -> bool:
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # does not initialise CUDA
    import torch

    return bool(torch.cuda.is_available())


def _rank_env(req: LaunchRequest, run_id: str, attempt: int, backend: str) -> dict[str, str]:
    env = {
        "GPUSPARK_RUN_ID": run_id,
        "GPUSPARK_ATTEMPT": str(attempt),
        "GPUSPARK_BACKEND": backend,
        "PYTHONUNBUFFERED": "1",
    }
    env.update({str(k): str(v) for k, v in req.env.items()})
    return env


def _rank_map(tasks: Sequence[dict[str, Any]], per_task: int, gpus_per_process: int) -> str:
    parts = []
    for t, info in enumerate(tasks):
        for local in range(per_task):
            gpus = info["gpus"][local * gpus_per_process : (local + 1) * gpus_per_process]
            where = f"{info['host']} gpu {','.join(gpus)}" if gpus else f"{info['host']} cpu"
            parts.append(f"{t * per_task + local}->{where}")
    return ", ".join(parts)


def _start_method(backend: str) -> str:
    # fork reuses the agent's imports (torch) and starts ranks in milliseconds; NCCL ranks are
    # spawned like torchrun does, so CUDA never meets a forked process.
    return "spawn" if backend == "nccl" or sys.platform != "linux" else "fork"


# ---------------------------------------------------------------------------- local mode


def _run_local(req: LaunchRequest, run_id: str, attempt: int) -> list[dict[str, Any]]:
    import torch.distributed.launcher.api  # noqa: F401  (imported once here, not per fork)

    from gpuspark.train._agent import TaskSpec, free_port, run_task
    from gpuspark.train._logs import PrintSink

    want_gpus = req.gpus_per_process > 0
    cuda = want_gpus and _cuda_available()
    backend, why = _resolve_backend(req.backend, want_gpus and cuda, cuda)
    if backend == "nccl":
        _check_local_gpus(req)
    env = _rank_env(req, run_id, attempt, backend)
    sink = PrintSink()
    if attempt == 0:
        sink.write(f"[gpuspark] backend {backend} ({why}); {req.num_processes} local ranks")
    spec = TaskSpec(
        run_id=run_id,
        task_index=0,
        num_tasks=1,
        nproc=req.num_processes,
        master_addr="127.0.0.1",
        master_port=free_port(),
        local_addr="127.0.0.1",
        rdzv_backend=req.rdzv_backend,
        max_restarts=req.max_restarts,
        start_method=_start_method(backend),
        payload=req.payload,
        script=req.script,
        env=env,
        host="localhost",
    )
    return [run_task(spec, sink, timeout=req.timeout)]


def _check_local_gpus(req: LaunchRequest) -> None:
    import torch

    have = torch.cuda.device_count()
    need = int(req.num_processes * req.gpus_per_process)
    if need > have:
        raise LaunchError(
            f"{req.num_processes} local ranks x {req.gpus_per_process:g} GPU need {need} GPUs; "
            f"this machine has {have}",
            remedy="use fewer processes, or backend='gloo'",
        )


# ---------------------------------------------------------------------------- Spark mode


def _task_profile(req: LaunchRequest, cpus: int) -> Any:
    from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

    treqs = TaskResourceRequests().cpus(cpus)
    if req.gpus_per_task > 0:
        treqs = treqs.resource("gpu", float(req.gpus_per_task))
    return ResourceProfileBuilder().require(treqs).build


def _barrier_partition(
    req: LaunchRequest, run_id: str, attempt: int, server: tuple[str, int, str], _it: Any
) -> Any:
    """Body of one barrier task (runs on an executor)."""
    import json

    from pyspark import BarrierTaskContext

    from gpuspark.train._agent import TaskSpec, free_port, run_task
    from gpuspark.train._logs import SocketSink

    ctx = BarrierTaskContext.get()
    index = ctx.partitionId()
    sink = SocketSink(server[0], server[1], server[2], index)
    try:
        res = ctx.resources().get("gpu")
        gpus = sorted(res.addresses, key=lambda a: (len(a), a)) if res is not None else []
        import torch.distributed.launcher.api  # noqa: F401  (the forked agent inherits it)

        host = str(ctx.getTaskInfos()[index].address.rsplit(":", 1)[0])
        me = {
            "host": host,
            "port": free_port() if index == 0 else 0,
            "gpus": gpus,
            "cuda": bool(gpus) and _cuda_available(),
        }
        tasks = [json.loads(s) for s in ctx.allGather(json.dumps(me))]
        all_gpus = all(t["gpus"] for t in tasks)
        backend, why = _resolve_backend(req.backend, all_gpus, all(t["cuda"] for t in tasks))
        if index == 0:
            ranks = _rank_map(tasks, req.per_task, int(req.gpus_per_process))
            sink.notice("info", {"text": f"backend {backend} ({why}); ranks: {ranks}"})
        env = _rank_env(req, run_id, attempt, backend)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        spec = TaskSpec(
            run_id=run_id,
            task_index=index,
            num_tasks=req.num_tasks,
            nproc=req.per_task,
            master_addr=tasks[0]["host"],
            master_port=tasks[0]["port"],
            local_addr=host,
            rdzv_backend=req.rdzv_backend,
            max_restarts=req.max_restarts,
            start_method=_start_method(backend),
            payload=req.payload,
            script=req.script,
            env=env,
            host=host,
        )
        result = run_task(spec, sink)
    finally:
        sink.close()
    yield result


def _driver_host(sc: Any) -> str:
    return str(sc.getConf().get("spark.driver.host", "127.0.0.1"))


def _run_barrier(req: LaunchRequest, sc: Any, run_id: str, attempt: int) -> list[dict]:
    import functools

    from gpuspark.train._logs import LogServer

    token = uuid.uuid4().hex
    server = LogServer(token, host=_driver_host(sc))
    server.on_failure = lambda _rec: server.abort("a rank failed")
    server.show_info = attempt == 0
    tag = f"gpuspark-launch-{run_id}-{attempt}"
    timers = _timers(req.timeout, server, sc, tag)
    body = functools.partial(_barrier_partition, req, run_id, attempt, (*server.address, token))
    rdd = sc.parallelize(range(req.num_tasks), req.num_tasks).barrier().mapPartitions(body)
    sc.addJobTag(tag)
    sc.setInterruptOnCancel(True)
    try:
        sc.setJobDescription(f"gpuspark launch {req.entrypoint} ({req.num_processes} ranks)")
        cpus = _executor_capacity(sc, dict(sc.getConf().getAll())).task_cpus_for(req.gpus_per_task)
        results: list[dict] = rdd.withResources(_task_profile(req, cpus)).collect()
    except BaseException as exc:
        server.abort("driver stopped")
        sc.cancelJobsWithTag(tag)
        if server.abort_reason == "timeout":
            raise _timeout_error(req) from None
        raise _spark_error(exc, server) from None
    finally:
        for timer in timers:
            timer.cancel()
        sc.removeJobTag(tag)
        sc.setJobDescription(None)
        server.drain(5.0)
        server.close()
    if server.abort_reason == "timeout":
        raise _timeout_error(req)
    return results


def _timers(timeout: float | None, server: Any, sc: Any, tag: str) -> list[threading.Timer]:
    if timeout is None:
        return []
    # ABORT lets every task stop its ranks; cancelling the job is the fallback if one is stuck.
    timers = [
        threading.Timer(timeout, server.abort, args=("timeout",)),
        threading.Timer(timeout + 30, sc.cancelJobsWithTag, args=(tag,)),
    ]
    for timer in timers:
        timer.daemon = True
        timer.start()
    return timers


def _timeout_error(req: LaunchRequest) -> LaunchError:
    return LaunchError(
        f"the launch of {req.entrypoint} on {req.num_processes} ranks timed out after "
        f"{req.timeout:g} s; every rank was stopped",
        remedy="raise timeout=, or look at the [rank r] lines above for the stuck rank",
    )


def _spark_error(exc: BaseException, server: Any) -> BaseException:
    if isinstance(exc, KeyboardInterrupt):
        return exc
    if server.failures:
        return _result_error(server.failures, 1)
    text = str(exc)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    py = [ln for ln in lines if ln and not ln.startswith(("\tat ", "at "))]
    short = "\n    ".join(py[-_ERROR_LINES:]) if py else type(exc).__name__
    return LaunchError(f"the barrier stage failed in Spark:\n    {short}")


# ---------------------------------------------------------------------------- public API


def run_request(req: LaunchRequest, spark: Any = None, *, spec: Any = None) -> Any:
    """Run a prepared :class:`LaunchRequest`; return rank 0's return value.

    On Spark: ``spark`` as given (a session or context), else a training session from
    :func:`gpuspark.cluster.session.job_session` on ``req.master`` or the spec's master (the
    embedded cluster is started for the run when none is running, and stopped after).
    """
    if req.local:
        return _attempts(req, None)
    if spark is not None:
        return _attempts(req, spark.sparkContext if hasattr(spark, "sparkContext") else spark)
    from gpuspark.cluster.session import JobKind, job_session

    with job_session(JobKind.TRAINING, master=req.master, spec=spec) as session:
        return _attempts(req, session.sparkContext)


def _attempts(req: LaunchRequest, sc: Any) -> Any:
    run_id = uuid.uuid4().hex[:12]
    if sc is not None:
        req.master = req.master or str(sc.master)
        _preflight(req, sc)
    last: list[dict[str, Any]] = []
    for attempt in range(req.max_attempts):
        if attempt:
            _note(f"retry {attempt} of {req.max_attempts - 1} after: {_result_error(last, 1)}")
        last = (
            _run_local(req, run_id, attempt)
            if sc is None
            else _run_barrier(req, sc, run_id, attempt)
        )
        if all(r.get("ok") for r in last):
            return _value(last)
        if any(r.get("stopped") == "timeout" for r in last):
            raise _timeout_error(req)
    raise _result_error(last, req.max_attempts)


def _note(text: str) -> None:
    sys.stdout.write(f"[gpuspark] {text.splitlines()[0]}\n")
    sys.stdout.flush()


def run(
    fn: Callable[..., Any] | str,
    *args: Any,
    num_processes: int,
    gpus_per_process: float = 1,
    processes_per_task: int | None = None,
    spark: Any = None,
    spec: Any = None,
    local: bool = False,
    backend: str = "auto",
    max_restarts: int = 0,
    max_attempts: int = 1,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> Any:
    """Run ``fn(*args, **kwargs)`` on ``num_processes`` ranks; return rank 0's return value.

    On Spark (``spark`` is a SparkSession, or ``None`` for the embedded cluster): one barrier
    stage of ``num_processes / processes_per_task`` tasks, each with
    ``processes_per_task * gpus_per_process`` whole GPUs. With ``local=True``: ranks are
    processes of this machine. Each rank sees ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
    ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ``GPUSPARK_BACKEND``
    and ``CUDA_VISIBLE_DEVICES`` (its task's GPUs; use ``cuda:LOCAL_RANK``).

    ``fn`` may be a script path (``str``); ``args`` are then its command-line arguments.
    ``max_restarts`` restarts failed ranks in place (read :func:`restart_count` to resume);
    ``max_attempts`` reruns the whole stage. Raises :class:`LaunchError` before anything starts
    when the cluster cannot run the job, and naming the failing rank and host when one fails.
    """
    req = make_request(
        fn,
        *args,
        num_processes=num_processes,
        gpus_per_process=gpus_per_process,
        processes_per_task=processes_per_task,
        local=local,
        backend=backend,
        max_restarts=max_restarts,
        max_attempts=max_attempts,
        timeout=timeout,
        env=env,
        **kwargs,
    )
    return run_request(req, spark, spec=spec)


def make_request(
    fn: Callable[..., Any] | str, *args: Any, env: Mapping[str, str] | None = None, **kw: Any
) -> LaunchRequest:
    """Build the :class:`LaunchRequest` for :func:`run`'s arguments (nothing starts)."""
    names = set(LaunchRequest.__dataclass_fields__) - {"payload", "script", "function", "env"}
    opts = {k: kw.pop(k) for k in list(kw) if k in names}
    if isinstance(fn, str | os.PathLike):
        if kw:
            raise LaunchError(f"a script takes command-line arguments, not {sorted(kw)}")
        script = [_script_path(fn), *map(str, args)]
        return LaunchRequest(script=script, env=dict(env or {}), **opts)
    import cloudpickle

    payload = cloudpickle.dumps((fn, args, kw))
    name = getattr(fn, "__qualname__", type(fn).__name__)
    return LaunchRequest(function=name, payload=payload, env=dict(env or {}), **opts)


def _script_path(path: str | os.PathLike[str]) -> str:
    """The script as an absolute path, checked on the driver: ranks start in other working
    directories (a Spark worker's), where a relative path names nothing."""
    p = Path(path).expanduser()
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "does not exist"
        raise LaunchError(
            f"script {os.fspath(path)}: {what}",
            remedy="give the path of a Python file (relative to the current directory or absolute)",
        )
    return str(p.resolve())


def restart_count() -> int:
    """How many times this rank's function was started before now (0 on the first start).

    Counts the elastic agent's restarts (``TORCHELASTIC_RESTART_COUNT``) and the barrier
    stage's earlier attempts; a function resumes from its own checkpoint when this is > 0.
    """
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    attempt = int(os.environ.get("GPUSPARK_ATTEMPT", "0"))
    max_restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0"))
    return attempt * (max_restarts + 1) + restarts
