"""``gpuspark doctor``: run every live check of this node and of the cluster behind the spec.

A doctor does not start clusters: when the spec's master is the embedded cluster and none runs,
the report says so (fix: ``gpuspark cluster up``) and skips the cluster checks. When a cluster
runs, the checks use one data session on it (:func:`gpuspark.cluster.session.job_session`,
reusing the caller's active session when neither ``master`` nor ``spec`` asks for another) and
one tiny Python job with a task per executor slot.
"""

from __future__ import annotations

import socket
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuspark._util.net import http_get_json
from gpuspark.cluster.local import LocalCluster
from gpuspark.cluster.session import JobKind, job_session, session_plan
from gpuspark.doctor import task
from gpuspark.doctor.cluster import (
    CAPACITY_CHECK,
    capacity_check,
    discovery_output_check,
    disjoint_check,
    dynamic_allocation_check,
    executor_gpu_checks,
    executor_job_failure,
    python_check,
    slot_check,
    workers_check,
)
from gpuspark.doctor.node import node_checks, tool_output
from gpuspark.doctor.probe import run_probe
from gpuspark.doctor.report import Check, Report, failure, info, ok, skipped, warning
from gpuspark.doctor.task import python_facts
from gpuspark.errors import GpusparkError
from gpuspark.launch.preflight import executor_capacity
from gpuspark.schedulers import find_backend
from gpuspark.spec import resolve_spec

if TYPE_CHECKING:
    from gpuspark.cluster.local import LocalCluster

__all__ = ["EXECUTOR_JOB_TIMEOUT_S", "run_checks"]

EXECUTOR_JOB_TIMEOUT_S = 120.0
"""How long the executors' Python job may wait for resources before it counts as a failure."""
_UP_FIX = "start it with `gpuspark cluster up` (add --spec FILE for your spec's shape)"


def run_checks(
    spec: Any = None,
    master: str | None = None,
    probe: bool = False,
    world_size: int | None = None,
) -> Report:
    """Every live check: this node (Java, pyspark, NVIDIA stack, InfiniBand, NCCL variables),
    the cluster (master, workers, executors' Python, GPU discovery and slots, capacity for
    ``world_size`` whole-GPU ranks, dynamic allocation) and, with ``probe``, an allreduce
    (skipped when the capacity check says its ranks cannot all start).

    ``spec``: a :class:`~gpuspark.spec.ClusterSpec`, a file, or ``None`` (``$GPUSPARK_SPEC`` or
    the built-in spec); ``master`` overrides its master. Nothing raises for what it finds: each
    finding is a check of the returned :class:`Report` (``exit_code`` 1 on any failure).
    """

    spec_obj = resolve_spec(spec)
    report = Report()
    report.add(node_checks(spec_obj))
    report.add(cluster_checks(spec, master, world_size))
    if probe:
        report.add(_probe(report, spec, master, world_size))
    return report


def _probe(report: Report, spec: Any, master: str | None, world_size: int | None) -> Check:
    """The probe, unless the capacity check already says its ranks cannot all start."""
    unfit = [c for c in report.failures if c.name == CAPACITY_CHECK]
    if unfit:
        return skipped("collective probe", f"{CAPACITY_CHECK} failed: {unfit[0].evidence}",
                       unfit[0].fix)  # fmt: skip
    return run_probe(spec, master, world_size, spark=_active_session())


def _active_session() -> Any:
    """This process's active SparkSession (a notebook's, a test's), else None: the probe
    then runs on it instead of building a second session next to it."""
    if "pyspark.sql" not in sys.modules:
        return None
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def cluster_checks(spec: Any, master: str | None, world_size: int | None) -> list[Check]:
    """Master, workers, discovery, then the checks that need a session."""

    target = master or resolve_spec(spec).spark.master
    cluster = _embedded(target)
    backend = find_backend(target)
    if backend is not None and backend.is_embedded(target) and cluster is None:
        return [
            warning(
                "Spark master",
                "no embedded cluster running (the spec's master is "
                "local-cluster; jobs would start one for themselves)",
                _UP_FIX,
            ),
            skipped("cluster checks", "no cluster to check", _UP_FIX),
        ]
    head, workers = _master(target, cluster)
    checks = [head]
    if head.status.value == "failure":
        return [*checks, skipped("cluster checks", "the master does not answer", head.fix)]
    simulated = bool(cluster and cluster.gpus_simulated)
    if workers is not None:
        checks += [workers_check(workers), disjoint_check(workers, simulated)]
    if cluster is not None:
        checks += _embedded_discovery(cluster)
    return checks + _session_checks(spec, master, world_size, simulated)


def _embedded(target: str) -> LocalCluster | None:

    running = LocalCluster.running()
    if running is None:
        return None
    backend = find_backend(target)
    embedded = backend is not None and backend.is_embedded(target)
    return running if embedded or target == running.master_url else None


def _master(target: str, cluster: LocalCluster | None) -> tuple[Check, list[Any] | None]:
    """The master answers? And its workers (``/json/``), when it is a standalone master."""
    if cluster is not None:
        data = cluster.master_json()
        if data is None:
            return failure(
                "Spark master",
                f"{cluster.master_url}: the web UI does not answer",
                "restart it: gpuspark cluster down && gpuspark cluster up",
            ), None
        return ok(
            "Spark master",
            f"{cluster.master_url} is {data.get('status', '?')} "
            f"(embedded, state in {cluster.state_dir})",
        ), list(data.get("workers", []))
    found = find_backend(target)
    address = found.master_address(target) if found is not None else None
    if address is None:
        return info(
            "Spark master",
            f"{target}: no standalone master to ask; checked through a session below",
        ), None
    host, port = address
    try:
        socket.create_connection((host, port), timeout=5).close()
    except (OSError, ValueError) as exc:
        return failure(
            "Spark master",
            f"cannot connect to {target}: {exc}",
            "start the master (start-master.sh), or fix --master / the spec's spark.master",
        ), None
    return ok("Spark master", f"{target} accepts connections"), _standalone_workers(host)


def _standalone_workers(host: str) -> list[Any] | None:
    """Workers from a standalone master's web UI on its default port 8080 (``None``: no UI)."""

    try:
        return list(http_get_json(f"http://{host}:8080/json/", timeout=5).get("workers", []))
    except (OSError, ValueError):
        return None


def _embedded_discovery(cluster: LocalCluster) -> list[Check]:
    """Run each embedded worker's discovery script (named in its ``worker.conf``)."""
    key = "spark.worker.resource.gpu.discoveryScript="
    checks = []
    for w in cluster.state.workers if cluster.state else []:
        conf = Path(cluster.state_dir) / f"worker-{w.index}" / "worker.conf"
        lines = conf.read_text().splitlines() if conf.exists() else []
        script = next((ln[len(key) :] for ln in lines if ln.startswith(key)), None)
        if script is not None:
            checks.append(discovery_output_check(f"worker {w.index}", tool_output([script])))
    return checks


def _session_checks(
    spec: Any, master: str | None, world_size: int | None, simulated: bool
) -> list[Check]:
    try:
        with job_session(JobKind.DATA, master=master, spec=spec, app_name="gpuspark-doctor") as s:
            checks = _live_conf_checks(s.sparkContext, world_size, simulated)
        checks.append(_training_plan_check(spec, master))
    except GpusparkError as exc:
        return [failure("Spark session", str(exc).splitlines()[0], exc.remedy or "")]
    except Exception as exc:  # a doctor reports what it finds; it must not crash on it
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return [failure("Spark session", first[:300], "see the Spark driver log")]
    return checks


def _live_conf_checks(sc: Any, world_size: int | None, simulated: bool) -> list[Check]:

    conf = dict(sc.getConf().getAll())
    checks = [slot_check(conf, simulated)]
    executors, error = executor_facts(sc)
    if error is None:
        checks.append(python_check(python_facts(), executors))
        checks += executor_gpu_checks(executors)
    else:
        checks.append(executor_job_failure(error))
    checks.append(capacity_check(executor_capacity(sc, conf), world_size))
    checks.append(dynamic_allocation_check(conf, training=False))
    return checks


def _training_plan_check(spec: Any, master: str | None) -> Check:
    """The conf gpuspark gives a training session on this cluster: dynamic allocation off."""

    plan = session_plan(master, spec, kind=JobKind.TRAINING)
    return dynamic_allocation_check(plan.conf, training=True)


def executor_facts(
    sc: Any, timeout: float = EXECUTOR_JOB_TIMEOUT_S
) -> tuple[list[dict[str, Any]], str | None]:
    """:func:`~gpuspark.doctor.task.python_facts` from one task per executor slot, or the
    job's error (its text, with the executor's host) when it fails or gets no resources."""
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(task)  # executors need pyspark only, not gpuspark
    n = max(1, int(sc.defaultParallelism))
    group = f"gpuspark-doctor-{uuid.uuid4().hex[:8]}"

    def job() -> list[dict[str, Any]]:
        sc.setJobGroup(group, "gpuspark doctor: executors' Python", interruptOnCancel=True)
        return list(sc.parallelize(range(n), n).map(task.python_facts).collect())

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(job)
        try:
            return future.result(timeout), None
        except FutureTimeout:
            sc.cancelJobGroup(group)
            return [], (
                f"Initial job has not accepted any resources within {timeout:g} s: no executor "
                "with free slots"
            )
        except Exception as exc:
            return [], str(exc)
