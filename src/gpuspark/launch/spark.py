"""Spark mode: one barrier stage of ``num_tasks`` tasks, each one node of the job.

The stage carries a task resource profile asking whole GPUs per task (stage-level scheduling),
so the application keeps ``spark.task.resource.gpu.amount=0.25`` for its data work. Each task
sets ``CUDA_VISIBLE_DEVICES`` from ``TaskContext.resources()``, shares task 0's host and a free
port through the driver's log server (:mod:`._internal.gather`; ``BarrierTaskContext.allGather``
when a task cannot reach it) and starts its ranks through torch's elastic agent.
Every task compares its Python with the driver's (after the gather, before any rank starts), so
no separate job has to start the executors' Python workers first. Rank lines stream to the
driver's log server; the first failure, or the timeout, stops every task. A task the driver
stops hearing (its host cut off) cancels the stage at once (:mod:`._internal.watch`) instead of
waiting for Spark to drop the lost worker, and the error names that host.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from typing import Any

from gpuspark._util.procs import machine_key
from gpuspark.launch._internal.agent import TaskSetup, run_task, store_port
from gpuspark.launch._internal.logs import LogServer, RankOutput, SocketSink
from gpuspark.launch._internal.watch import StageWatch
from gpuspark.launch.preflight import check_python, executor_capacity
from gpuspark.launch.ranks import (
    cuda_available,
    import_launcher,
    rank_env,
    rank_map,
    resolve_backend,
    start_method,
)
from gpuspark.launch.request import LaunchRequest
from gpuspark.launch.results import (
    host_lost_error,
    host_unreachable_error,
    spark_error,
    timeout_error,
)

__all__ = ["barrier_task", "check_pythons", "exclude_host", "lost_error", "run_barrier"]


def _task_profile(req: LaunchRequest, cpus: int) -> Any:
    from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

    treqs = TaskResourceRequests().cpus(cpus)
    if req.gpus_per_task > 0:
        treqs = treqs.resource("gpu", float(req.gpus_per_task))
    return ResourceProfileBuilder().require(treqs).build


def barrier_task(
    req: LaunchRequest, run_id: str, attempt: int, server: tuple[str, int, str], _it: Any
) -> Any:
    """Body of one barrier task (runs on an executor): yields the task's report. The classic
    stage runs it as is; the Spark Connect stage wraps it (:mod:`gpuspark.launch.connect`)."""
    import json
    import sys

    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    index = ctx.partitionId()
    sink = SocketSink(server[0], server[1], server[2], index)
    store_fd = -1
    try:
        res = ctx.resources().get("gpu")
        gpus = sorted(res.addresses, key=lambda a: (len(a), a)) if res is not None else []
        fork_ok = import_launcher()  # a reused Python worker may have run torch already

        host = _task_host(ctx, index)
        sink.notice("task", {"task": index, "host": host})
        port, store_fd = store_port(host, req.rdzv_backend) if index == 0 else (0, -1)
        me = {
            "host": host,
            "port": port,
            "gpus": gpus,
            "cuda": bool(gpus) and cuda_available(),
            "python": list(sys.version_info[:2]),
        }
        tasks = sink.gather(me)
        if tasks is None:
            tasks = [json.loads(s) for s in ctx.allGather(json.dumps(me))]
        if any(tuple(t["python"]) != tuple(req.driver_python) for t in tasks):
            pythons = [t["python"] for t in tasks]
            yield {"ok": False, "task": index, "host": host, "pythons": pythons}
            return
        all_gpus = all(t["gpus"] for t in tasks)
        backend, why = resolve_backend(req.backend, all_gpus, all(t["cuda"] for t in tasks))
        workdir = _workdir(req)
        if index == 0:
            ranks = rank_map(tasks, req.per_task, int(req.gpus_per_process))
            sink.notice("info", {"text": f"backend {backend} ({why}); ranks: {ranks}"})
            if not workdir:
                sink.notice("info", {"text": _WORKDIR_NOTE})
        env = rank_env(req, run_id, attempt, backend, host)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        spec = TaskSetup(
            run_id=run_id,
            task_index=index,
            num_tasks=req.num_tasks,
            nproc=req.per_task,
            master_addr=tasks[0]["host"],
            master_port=tasks[0]["port"],
            local_addr=host,
            rdzv_backend=req.rdzv_backend,
            max_restarts=req.max_restarts,
            start_method=start_method(backend, req.rdzv_backend, fork_ok),
            payload=req.payload,
            script=req.script,
            module=req.module,
            env=env,
            host=host,
            store_fd=store_fd,
            workdir=workdir,
            collective_timeout=req.collective_timeout,
        )
        store_fd = -1  # run_task owns it now
        result = run_task(spec, sink)
    finally:
        if store_fd >= 0:  # failed before run_task took it over
            os.close(store_fd)
        sink.close()
    yield result


def _workdir(req: LaunchRequest) -> str:
    """The launch's own directory when this executor runs on the driver's machine (as with
    ``--local``, relative paths then mean the same), else ``""``: the executor's work folder."""
    same = req.driver_machine == machine_key() and os.path.isdir(req.workdir)
    return req.workdir if same else ""


_WORKDIR_NOTE = (
    "ranks run in their executor's work folder on each host (not on this machine): "
    "relative paths land there; give absolute or shared paths"
)


def _task_host(ctx: Any, index: int) -> str:
    """This task's host: the address its executor binds to when ``SPARK_LOCAL_IP`` says
    (Spark records a client-mode executor at its connection's source address, which on one
    machine is always 127.0.0.1), else what Spark's task infos say."""
    import os

    return os.environ.get("SPARK_LOCAL_IP") or str(
        ctx.getTaskInfos()[index].address.rsplit(":", 1)[0]
    )


def _driver_host(sc: Any) -> str:
    return str(sc.getConf().get("spark.driver.host", "127.0.0.1"))


def run_barrier(
    req: LaunchRequest,
    sc: Any,
    run_id: str,
    attempt: int,
    on_metrics: Callable[[dict[str, Any]], None] | None = None,
    output: RankOutput | None = None,
) -> list[dict]:
    """Run one attempt of ``req`` as a barrier stage on ``sc``; return the tasks' reports.

    ``on_metrics`` gets each rank's ``/metrics`` endpoint as the rank reports it; ``output``
    places the ranks' lines on the driver (default: the console).
    """
    import functools

    token = uuid.uuid4().hex
    server = LogServer(token, host=_driver_host(sc))
    server.on_failure = lambda _rec: server.abort("a rank failed")
    server.show_info = attempt == 0
    server.on_metrics = on_metrics
    server.gathering.size = req.num_tasks
    if output is not None:
        server.output = output
    tag = f"gpuspark-launch-{run_id}-{attempt}"
    timers = _timers(req.timeout, server, sc, tag)
    body = functools.partial(barrier_task, req, run_id, attempt, (*server.address, token))
    rdd = sc.parallelize(range(req.num_tasks), req.num_tasks).barrier().mapPartitions(body)
    sc.addJobTag(tag)
    sc.setInterruptOnCancel(True)
    watch = StageWatch(server, lambda: sc.cancelJobsWithTag(tag), req.collective_timeout)
    try:
        sc.setJobDescription(f"gpuspark launch {req.entrypoint} ({req.num_processes} ranks)")
        cpus = executor_capacity(sc, dict(sc.getConf().getAll())).task_cpus_for(req.gpus_per_task)
        with watch:
            results: list[dict] = rdd.withResources(_task_profile(req, cpus)).collect()
    except BaseException as exc:
        lost = lost_error(exc, server, watch, req)
        server.abort("driver stopped")
        sc.cancelJobsWithTag(tag)
        if server.abort_reason == "timeout":
            raise timeout_error(req) from None
        if lost is not None:
            raise lost from None
        raise spark_error(exc, server) from None
    finally:
        for timer in timers:
            timer.cancel()
        sc.removeJobTag(tag)
        sc.setJobDescription(None)
        server.drain(5.0, skip=watch.lost_tasks)
        server.close()
    if server.abort_reason == "timeout":
        raise timeout_error(req)
    check_pythons(req, results)
    return results


def lost_error(
    exc: BaseException, server: LogServer, watch: StageWatch, req: LaunchRequest
) -> BaseException | None:
    """The error for a stage that failed because a host was lost, else ``None``: a host the
    driver stopped hearing (``watch`` cancelled the stage), or one whose task vanished."""
    if watch.lost is not None:
        return host_unreachable_error(watch.lost.host, watch.lost.silent_s, req, server.failures)
    host = None if isinstance(exc, KeyboardInterrupt) else server.lost_host()
    return None if host is None else host_lost_error(host, req)


def exclude_host(sc: Any, host: str) -> list[str]:
    """Tell Spark to stop using the executors on ``host``, a host the launch lost; return
    their ids. A cut-off host's executor stays registered until Spark's own timeouts drop it
    (``spark.network.timeout``, 120 s), and a retry placed on it would wait for a task that
    can never start; ``SparkContext.killExecutor`` takes it off the scheduler's offers now
    (and the application does not ask for a replacement: dynamic allocation is off)."""
    jsc = sc._jsc.sc()
    alive = jsc.taskScheduler().getExecutorsAliveOnHost(host)
    if alive.isEmpty():
        return []
    ids = [i for i in str(alive.get().mkString(",")).split(",") if i]
    for executor in ids:
        jsc.killExecutor(executor)
    return ids


def check_pythons(req: LaunchRequest, results: list[dict]) -> None:
    """The executors' Pythons, which every task compared with the driver's before starting a
    rank (in the barrier stage itself: no separate job starts the Python workers first)."""
    seen = {tuple(v) for r in results for v in r.get("pythons", ())}
    if seen:
        check_python(req.driver_python, seen)


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
