"""Spark Connect mode: the barrier stage as ``DataFrame.mapInArrow(..., barrier=True)``.

A Spark Connect client has no RDD API and no JVM, so the stage is
``spark.range(n, numPartitions=n).mapInArrow(fn, schema, barrier=True, profile=...)``, the way
Spark's own TorchDistributor runs on Connect. ``fn`` wraps the classic stage's task body
(:func:`gpuspark.launch.spark.barrier_task`): the same exchange through the log server, log
streaming to a :class:`LogServer` on this client, failure reports and rank 0's value. Each
task's report comes back cloudpickled in a binary column (one Arrow batch per report, in
chunks of 1 MiB) and is unpickled here.

What differs from the classic stage:

- no free-slot check before the stage (it reads the executors through the JVM): a stage larger
  than the free slots fails at Spark's own barrier check (SPARK-24819), named as such;
- whole GPUs per task come from a task resource profile on ``mapInArrow`` (pyspark 4.0+);
- the timeout cancels through the session's tags (``addTag`` / ``interruptTag``);
- the log server binds to the address the executors reach this client at: loopback when the
  Connect server runs on this machine.
"""

from __future__ import annotations

import functools
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from gpuspark._util.spark_compat import missing
from gpuspark.errors import LaunchError
from gpuspark.launch._internal.logs import LogServer, RankOutput
from gpuspark.launch._internal.watch import StageWatch
from gpuspark.launch.preflight import ExecutorCapacity, check_conf
from gpuspark.launch.request import LaunchRequest
from gpuspark.launch.results import spark_error, timeout_error
from gpuspark.launch.spark import barrier_task, check_pythons, lost_error

__all__ = ["arrow_task", "client_host", "connect_preflight", "run_connect"]

_CHUNK = 1 << 20
"""Bytes of a report per row (a report carries rank 0's return value, which may be large)."""
_SLOTS_SHORT = "SPARK-24819"
"""Spark's message when a barrier stage needs more slots than the cluster offers."""
_LOOPBACK = ("127.", "localhost", "::1")


def arrow_task(
    req: LaunchRequest, run_id: str, attempt: int, server: tuple[str, int, str], batches: Any
) -> Iterator[Any]:
    """:func:`~gpuspark.launch.spark.barrier_task` as a ``mapInArrow`` function (runs on an
    executor): the input (one row per task) only places the task; each report it yields
    becomes one Arrow batch of ``(task, seq, chunk)`` rows, the report cloudpickled."""
    import cloudpickle
    import pyarrow as pa
    from pyspark import BarrierTaskContext

    for _batch in batches:
        pass
    task = BarrierTaskContext.get().partitionId()
    for report in barrier_task(req, run_id, attempt, server, iter(())):
        blob = cloudpickle.dumps(report)
        chunks = [blob[i : i + _CHUNK] for i in range(0, len(blob), _CHUNK)]
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([task] * len(chunks), pa.int32()),
                pa.array(range(len(chunks)), pa.int32()),
                pa.array(chunks, pa.binary()),
            ],
            names=["task", "seq", "chunk"],
        )


def _schema() -> Any:
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    return StructType(
        [
            StructField("task", IntegerType(), False),
            StructField("seq", IntegerType(), False),
            StructField("chunk", BinaryType(), False),
        ]
    )


def _reports(rows: list[Any]) -> list[dict[str, Any]]:
    """The tasks' reports, in task order, from the stage's rows."""
    import cloudpickle

    parts: dict[int, list[tuple[int, bytes]]] = {}
    for row in rows:
        parts.setdefault(int(row["task"]), []).append((int(row["seq"]), bytes(row["chunk"])))
    return [
        cloudpickle.loads(b"".join(chunk for _, chunk in sorted(parts[task])))
        for task in sorted(parts)
    ]


def client_host(spark: Any) -> str:
    """The address executors reach this client at: loopback when the Connect server is on
    this machine, else this machine's address on the route to the server."""
    host = str(spark.client.host).strip("[]")
    if host.startswith(_LOOPBACK):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host, 9))  # UDP: picks the route, sends nothing
            return str(probe.getsockname()[0])
        except OSError:
            return socket.gethostbyname(socket.gethostname())


def _server_conf(spark: Any) -> dict[str, str]:
    """The settings of the Connect server's application a launch depends on."""
    keys = (
        "spark.master",
        "spark.dynamicAllocation.enabled",
        "spark.executor.cores",
        "spark.executor.resource.gpu.amount",
        "spark.task.cpus",
    )
    values = {key: spark.conf.get(key, None) for key in keys}
    return {k: str(v) for k, v in values.items() if v is not None}


def _capacity(conf: dict[str, str]) -> ExecutorCapacity:
    """One executor's shape (how many there are, and what runs on them, only the JVM says)."""
    return ExecutorCapacity(
        executors=0,
        cores_per_executor=int(conf.get("spark.executor.cores", "1")),
        gpus_per_executor=float(conf.get("spark.executor.resource.gpu.amount", "0")),
        task_cpus=int(conf.get("spark.task.cpus", "1")),
    )


def connect_preflight(req: LaunchRequest, spark: Any) -> None:
    """Refuse, before any task starts, what the Connect server's application can never run:
    dynamic allocation on, whole GPUs on a ``local[N]`` server, more GPUs per task than an
    executor has, whole GPUs per task with a pyspark that cannot ask for them over Connect.
    Free slots are not checked here (see the module's docstring)."""
    conf = _server_conf(spark)
    check_conf(conf)
    master = conf.get("spark.master", "")
    if req.gpus_per_task > 0:
        problem = missing("connect-profile")
        if problem is not None:
            raise LaunchError(
                problem,
                remedy="use pyspark>=4 here, or --gpus-per-process 0 (gpus_per_process=0)",
            )
        if master.startswith("local"):
            raise LaunchError(
                f"the Spark Connect server runs master={master}, which cannot give barrier "
                "tasks whole GPUs",
                remedy="run the server on a cluster (gpuspark cluster up --connect), or "
                "--gpus-per-process 0 (gpus_per_process=0)",
            )
        gpus = _capacity(conf).gpus_per_executor
        if req.gpus_per_task > gpus:
            raise LaunchError(
                f"a barrier task needs {req.gpus_per_task:g} GPUs but each executor of the "
                f"Spark Connect server's application has {gpus:g}",
                remedy="lower --nproc-per-node (processes_per_task) or --gpus-per-process "
                "(gpus_per_process), or start the server with more GPUs per executor "
                "(spark.executor.resource.gpu.amount)",
            )


def _profile(spark: Any, req: LaunchRequest) -> Any:
    """The stage's task resource profile (its share of an executor's cores, whole GPUs),
    created on the server through this session's own client (pyspark would otherwise pick a
    session and a JVM from process-wide state); ``None`` where pyspark cannot send one."""
    if missing("connect-profile") is not None:
        return None  # CPU ranks only (connect_preflight): the default profile fits them
    import pyspark.sql.connect.proto as pb2
    from pyspark.resource import ResourceProfile, TaskResourceRequest

    cpus = _capacity(_server_conf(spark)).task_cpus_for(req.gpus_per_task)
    wanted = {"cpus": float(cpus)}
    if req.gpus_per_task > 0:
        wanted["gpu"] = float(req.gpus_per_task)
    task = {name: TaskResourceRequest(name, amount) for name, amount in wanted.items()}
    remote = pb2.ResourceProfile(
        task_resources={
            name: pb2.TaskResourceRequest(resource_name=name, amount=amount)
            for name, amount in wanted.items()
        }
    )
    profile = ResourceProfile(_exec_req={}, _task_req=task)
    profile._id = spark.client._create_profile(remote)
    return profile


def run_connect(
    req: LaunchRequest,
    spark: Any,
    run_id: str,
    attempt: int,
    on_metrics: Callable[[dict[str, Any]], None] | None = None,
    output: RankOutput | None = None,
) -> list[dict]:
    """Run one attempt of ``req`` as a barrier ``mapInArrow`` stage on the Connect session
    ``spark``; return the tasks' reports (as :func:`gpuspark.launch.spark.run_barrier`)."""
    token = uuid.uuid4().hex
    server = LogServer(token, host=client_host(spark))
    server.on_failure = lambda _rec: server.abort("a rank failed")
    server.show_info = attempt == 0
    server.on_metrics = on_metrics
    server.gathering.size = req.num_tasks
    if output is not None:
        server.output = output
    tag = f"gpuspark-launch-{run_id}-{attempt}"
    timers = _timers(req.timeout, server, lambda: _interrupt(spark, tag))
    body = functools.partial(arrow_task, req, run_id, attempt, (*server.address, token))
    spark.addTag(tag)
    watch = StageWatch(server, lambda: _interrupt(spark, tag), req.collective_timeout)
    try:
        stage = spark.range(0, req.num_tasks, 1, req.num_tasks).mapInArrow(
            body, _schema(), barrier=True, profile=_profile(spark, req)
        )
        with watch:
            rows = stage.collect()
    except BaseException as exc:
        lost = lost_error(exc, server, watch, req)
        server.abort("driver stopped")
        _interrupt(spark, tag)
        if server.abort_reason == "timeout":
            raise timeout_error(req) from None
        if lost is not None:
            raise lost from None
        raise _stage_error(exc, server, req) from None
    finally:
        for timer in timers:
            timer.cancel()
        spark.removeTag(tag)
        server.drain(5.0, skip=watch.lost_tasks)
        server.close()
    if server.abort_reason == "timeout":
        raise timeout_error(req)
    results = _reports(rows)
    check_pythons(req, results)
    return results


def _interrupt(spark: Any, tag: str) -> None:
    """Cancel the stage's operations (best effort: the session may be gone)."""
    try:
        spark.interruptTag(tag)
    except Exception:  # cancelling never hides the launch's own error
        pass


def _stage_error(exc: BaseException, server: Any, req: LaunchRequest) -> BaseException:
    """What to raise when the stage failed: as on the classic path, except that Spark's
    barrier check (no free-slot check ran before the stage) is named with the numbers."""
    if not server.failures and _SLOTS_SHORT in str(exc):
        return LaunchError(
            f"not enough free slots for the barrier stage: needs {req.num_tasks} tasks x "
            f"{req.gpus_per_task:g} GPU at once, more than the Spark Connect server's "
            "application has free (Spark's barrier check, SPARK-24819)",
            remedy="use fewer processes, wait for running jobs, or give the Connect server's "
            "application more executors",
        )
    return spark_error(exc, server)


def _timers(
    timeout: float | None, server: Any, cancel: Callable[[], None]
) -> list[threading.Timer]:
    if timeout is None:
        return []
    # ABORT lets every task stop its ranks; cancelling the stage is the fallback if one is stuck.
    timers = [
        threading.Timer(timeout, server.abort, args=("timeout",)),
        threading.Timer(timeout + 30, cancel),
    ]
    for timer in timers:
        timer.daemon = True
        timer.start()
    return timers
