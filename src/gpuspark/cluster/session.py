"""The one session path: (cluster spec or the built-in one) + the kind of job -> SparkSession.

- **Spec**: ``spec=`` (a :class:`~gpuspark.spec.ClusterSpec` or a file), else
  ``$GPUSPARK_SPEC``, else :func:`gpuspark.spec.default_spec`. Its master and ``[spark]``
  settings are the only source of Spark settings; ``conf`` overrides them last.
- **Embedded cluster** (master ``local-cluster``): the executor shape comes from the running
  cluster, which ``gpuspark cluster up --spec`` sized from the spec (:mod:`.shape`).
- **Kind**: ``data`` jobs keep the spec's fractional task GPU amount (4 tasks share a GPU) and
  its dynamic allocation; ``training`` turns dynamic allocation off, since barrier stages refuse
  it (SPARK-24942), and gets whole GPUs per task from the launcher's task resource profile.
- **Ownership**: :func:`job_session` reuses a session the caller already has and never stops
  it; it stops only what it started (the session, and an embedded cluster started for the job).
- **Spark Connect** (``sc://…``): a client session (``SparkSession.builder.remote``) that can
  set only session (``spark.sql.*``) settings; the rest belongs to the Connect server's
  application, and a note names what did not apply. A data job runs over Connect when its
  caller says it uses only the DataFrame API (``dataframe_only``: prep, from_dataframe, shards
  writes); other data jobs are refused there in one line. When the embedded cluster runs a
  Connect server (``cluster up --connect``), that server holds its executors: training and
  DataFrame-only data jobs on the embedded cluster go through it.

The conf is plain data first (:func:`session_plan`), printable without starting anything
(``yarn`` and ``k8s://`` included; ``.materialize()`` gives the ``spark-submit`` line).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuspark._util import envvars
from gpuspark.cluster import netns
from gpuspark.cluster.announce import announce_app, withdraw_app
from gpuspark.cluster.conf import driver_metrics_conf, spark_conf
from gpuspark.cluster.connect_session import connect_plan, connect_session, through_connect
from gpuspark.cluster.driver_log import driver_java_options, write_log_config
from gpuspark.cluster.fit import check_fits, check_slots
from gpuspark.cluster.given_conf import check_given, real_cluster_only
from gpuspark.cluster.jvm import java_options
from gpuspark.cluster.plan import SessionPlan, local_defaults
from gpuspark.cluster.pyspark_waits import preload_pandas, stop_session
from gpuspark.cluster.security import missing_secret, read_secret, security_conf
from gpuspark.cluster.state import ClusterState
from gpuspark.errors import ClusterError, GpusparkError
from gpuspark.schedulers import EMBEDDED_MASTERS, Backend, ConnectBackend, backend_for
from gpuspark.schedulers.connect import is_connect_session, require_classic
from gpuspark.schedulers.standalone import AUTH_MARKERS
from gpuspark.spec import ClusterSpec, resolve_spec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpuspark.cluster.local import LocalCluster
    from gpuspark.spec import ClusterSpec

__all__ = [
    "EMBEDDED_MASTERS",
    "JobKind",
    "SessionPlan",
    "check_slots",
    "job_session",
    "local_defaults",
    "session",
    "session_plan",
]

log = logging.getLogger(__name__)


class JobKind(str, enum.Enum):
    """What a session is for: its Spark settings differ."""

    DATA = "data"
    """ETL: the spec's fractional task GPU amount and dynamic allocation."""
    TRAINING = "training"
    """Barrier stages: dynamic allocation off (SPARK-24942); whole GPUs per task."""


def _python_conf(executors: str) -> dict[str, str]:
    """The driver runs this Python; executors run ``executors``."""
    return {
        "spark.pyspark.python": executors,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": executors,
    }


def _executor_python(merged: dict[str, str], backend: Backend) -> str:
    """A ``spark.pyspark.python`` the spec sets is kept (Spark's venv-pack + ``spark.archives``
    pattern, containers with their own Python); else the backend's (the image's on
    Kubernetes); else the driver's, or tasks fail with ModuleNotFoundError."""
    return merged.get("spark.pyspark.python") or backend.executor_python() or sys.executable


def _embedded(cluster: LocalCluster | None, state_dir: Any) -> LocalCluster:
    from gpuspark.cluster.local import LocalCluster

    found = cluster if cluster is not None else LocalCluster.running(state_dir)
    if found is None or found.state is None:
        raise ClusterError(
            "the spec's master is the embedded cluster (local-cluster), which is not running",
            remedy="start it with `gpuspark cluster up`, or name a running master: --master "
            "spark://HOST:7077 (master= from Python)",
        )
    return found


def _embedded_at(master: str, state_dir: Any) -> LocalCluster | None:
    """The running embedded cluster if ``master`` is its URL (its shape then applies)."""
    from gpuspark.cluster.local import LocalCluster

    running = LocalCluster.running(state_dir)
    return running if running is not None and running.master_url == master else None


def _embedded_conf(spec: ClusterSpec, cluster: LocalCluster) -> dict[str, str]:
    """The spec's settings with the embedded cluster's executor shape (see :mod:`.shape`)."""
    conf = {k: v for k, v in spark_conf(spec).items() if not real_cluster_only(k)}
    conf["spark.eventLog.enabled"] = "false"
    shape = cluster.shape
    if shape is not None:
        conf.update(shape.executor_conf())
        if shape.executor_gpus == 0:
            conf = {k: v for k, v in conf.items() if ".resource.gpu." not in k}
        if "spark.dynamicAllocation.maxExecutors" in conf:
            executors = shape.workers * shape.executors_per_worker
            conf["spark.dynamicAllocation.maxExecutors"] = str(executors)
        conf.update(_wait_for_executors(shape.workers * shape.cores_per_worker))
    conf.update(netns.driver_conf(cluster.state.netns if cluster.state else None))
    return conf


def _embedded_security(spec: ClusterSpec, cluster: LocalCluster) -> dict[str, str]:
    """A secure embedded cluster (``cluster up --secure``): its secret, the spec's ACLs."""
    state = cluster.state
    if state is None or not state.secure:
        return {}
    secure = spec.model_copy(
        update={"security": spec.security.model_copy(update={"enabled": True})}
    )
    return security_conf(secure, read_secret(state.secret_file))


def _spec_security(spec: ClusterSpec, backend: Backend) -> dict[str, str]:
    """The spec's ``[security]`` with the secret read from its file (none for ``local[N]``:
    everything runs in the driver's JVM)."""
    if not spec.security.enabled or backend.in_process:
        return {}
    return security_conf(spec, read_secret(spec.security.secret_file))


def _wait_for_executors(cores: int) -> dict[str, str]:
    """Let Spark's own start-up wait until every executor of the embedded cluster registered
    (standalone counts against ``spark.cores.max``). Ignored under dynamic allocation, where
    executors come on demand; :func:`_kind_conf` removes it then."""
    return {
        "spark.cores.max": str(cores),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
    }


def _spec_conf(spec: ClusterSpec, backend: Backend) -> dict[str, str]:
    return backend.session_spec_conf(spark_conf(spec), spec)


def _kind_conf(conf: dict[str, str], kind: JobKind) -> dict[str, str]:
    if kind is JobKind.TRAINING:
        conf = {k: v for k, v in conf.items() if not k.startswith("spark.dynamicAllocation.")}
        conf["spark.dynamicAllocation.enabled"] = "false"
    if conf.get("spark.dynamicAllocation.enabled") == "true":
        conf.pop("spark.scheduler.minRegisteredResourcesRatio", None)
        conf.pop("spark.scheduler.maxRegisteredResourcesWaitingTime", None)
    return conf


def _route_driver_log(conf: dict[str, str]) -> None:
    """Driver log to a file, only errors on the console (see :mod:`.driver_log`)."""
    key = "spark.driver.extraJavaOptions"
    options = driver_java_options(conf.get(key))
    if options is not None:
        conf[key] = options


def session_plan(
    master: str | None = None,
    spec: ClusterSpec | str | os.PathLike[str] | None = None,
    *,
    kind: JobKind | str = JobKind.DATA,
    app_name: str = "gpuspark",
    cluster: LocalCluster | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    dataframe_only: bool = False,
    **conf: Any,
) -> SessionPlan:
    """Work out master, conf and environment for a session, without starting anything.

    Precedence (last wins): the driver's Prometheus servlet, local defaults (single-machine
    masters), the spec's Spark settings (shaped by the embedded cluster when the master is
    ``local-cluster``), the job kind, the current Python for driver and executors, ``conf``.
    Keyword names may use ``_`` for ``.`` (``spark_executor_cores=4``). Raises
    :class:`ClusterError` for a shape Spark would call wasteful. ``dataframe_only``: the data
    job uses only the DataFrame API, so it may run over Spark Connect (see the module's
    docstring); other data jobs are refused there.
    """
    spec_obj = resolve_spec(spec)
    target = master or spec_obj.spark.master
    merged: dict[str, str] = driver_metrics_conf()  # the spec's [spark.conf] may override
    backend = backend_for(target)
    asked = {_key(k): _value(v) for k, v in conf.items()}
    data = JobKind(kind) is JobKind.DATA
    classic_only = data and not dataframe_only
    if isinstance(backend, ConnectBackend):
        return connect_plan(target, spec_obj, app_name, asked, classic_only=classic_only)
    if cluster is None and backend.has_workers and not backend.is_embedded(target):
        cluster = _embedded_at(target, state_dir)
    master_ui = None
    embedded = backend.is_embedded(target) or cluster is not None
    if embedded:
        found = _embedded(cluster, state_dir)
        connect = through_connect(
            found.state, data, backend.is_embedded(target), dataframe_only=dataframe_only
        )
        if connect is not None:
            return connect_plan(connect, spec_obj, app_name, asked, embedded=True)
        resolved, master_ui = found.master_url, found.web_ui
        merged.update(local_defaults())
        merged.update(_embedded_conf(spec_obj, found))
        merged.update(_embedded_security(spec_obj, found))
    else:
        resolved = target
        if backend.is_local(resolved):
            merged.update(local_defaults())
        merged.update(_spec_conf(spec_obj, backend))
        merged.update(_spec_security(spec_obj, backend))
    backend = backend_for(resolved)
    if not backend.in_process and "spark.ui.enabled" not in spec_obj.spark.conf:
        # A cluster's driver UI serves the driver's and executors' Prometheus metrics
        # (published as targets, see .targets); only in-process local[*] runs without it.
        merged["spark.ui.enabled"] = "true"
    merged = _kind_conf(merged, JobKind(kind))
    merged.update(_python_conf(_executor_python(merged, backend)))
    merged.update(asked)
    _route_driver_log(merged)
    if embedded or backend.is_local(resolved):
        # The driver and executors start on this machine (see .jvm).
        training = JobKind(kind) is JobKind.TRAINING
        archive = embedded and not (found.state and found.state.netns)  # netns: own conf
        java_options(
            merged,
            driver_light=embedded,
            executor_light=embedded and training,
            executor_archive=archive,
        )
    given = {k: v for k, v in spec_obj.spark.conf.items() if k not in asked}
    notes = check_given(
        given, merged, training=JobKind(kind) is JobKind.TRAINING, embedded=embedded
    )
    backend.check_session(resolved, merged)
    check_slots(merged)
    env = {"PYSPARK_PYTHON": merged["spark.pyspark.python"]}
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if merged.get("spark.driver.bindAddress") == "127.0.0.1":
        # The driver's web UI binds to SPARK_LOCAL_IP, else to every interface.
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return SessionPlan(
        master=resolved,
        app_name=app_name,
        conf=merged,
        env=env,
        master_ui=master_ui,
        notes=notes,
    )


def session(
    master: str | None = None,
    spec: ClusterSpec | str | os.PathLike[str] | None = None,
    *,
    kind: JobKind | str = JobKind.DATA,
    app_name: str = "gpuspark",
    cluster: LocalCluster | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    dataframe_only: bool = False,
    **conf: Any,
) -> SparkSession:
    """Build (or reuse) a ``SparkSession`` with gpuspark's settings; the caller stops it.

    ``master`` may be ``local[*]``, ``spark://host:port``, ``yarn``, ``k8s://…``, or ``None``
    for the spec's master (``local-cluster``: the running embedded cluster). See
    :func:`session_plan`; :func:`job_session` also starts the embedded cluster when needed.
    Raises :class:`ClusterError`, before Spark starts, when a standalone master's workers
    (its ``/json/`` page, when readable) cannot hold even one executor of the shape asked for.
    """
    plan = session_plan(
        master,
        spec,
        kind=kind,
        app_name=app_name,
        cluster=cluster,
        state_dir=state_dir,
        dataframe_only=dataframe_only,
        **conf,
    )
    backend_for(plan.master).check_environment(plan.master)
    if plan.remote:
        return connect_session(plan, _running_state(state_dir))
    os.environ.update(plan.env)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is None:
        _check_secret(plan, state_dir)  # before Spark retries for a minute, then gives up
        check_fits(plan.master, plan.conf, plan.master_ui)  # before Spark waits in silence
    else:
        _check_reuse(active, plan.master)
    fresh = active is None
    for note in plan.notes:
        log.info("%s", note)
    log_file = write_log_config() if fresh else None
    if fresh:
        preload_pandas()  # while the driver JVM starts (see pyspark_waits)
    builder = SparkSession.builder.master(plan.master).appName(plan.app_name)
    for key, value in plan.conf.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # Spark's own words are in the driver log; see _refused_secret
        if log_file is not None and _refused_secret(log_file):
            raise _no_secret(plan.master, state_dir) from exc
        raise
    if fresh:
        _announce(spark, spec)
    level = envvars.SPARK_LOG_LEVEL.get()
    if level:
        spark.sparkContext.setLogLevel(level)
    if log_file is not None and log_file.exists():
        log.info("Spark driver log: %s", log_file)
    return spark


def _running_state(state_dir: Any) -> ClusterState | None:
    from gpuspark.cluster.local import LocalCluster

    running = LocalCluster.running(state_dir)
    return running.state if running is not None else None


def _check_secret(plan: SessionPlan, state_dir: Any) -> None:
    """Refuse a session without Spark's shared secret on a master that demands it (asked of
    the master itself, see :meth:`gpuspark.schedulers.Backend.requires_authentication`)."""
    if plan.conf.get("spark.authenticate") == "true":
        return
    if backend_for(plan.master).requires_authentication(plan.master):
        raise _no_secret(plan.master, state_dir)


def _refused_secret(log_file: Path) -> bool:
    """Whether the driver log says a master refused this driver for want of the secret (when
    the master could not be asked first: Spark then retries for a minute and gives up with
    "All masters are unresponsive")."""
    try:
        text = log_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(marker in text for marker in AUTH_MARKERS)


def _no_secret(master: str, state_dir: Any) -> ClusterError:
    from gpuspark.cluster.local import default_state_dir

    return missing_secret(master, state_dir or default_state_dir())


def _check_reuse(active: SparkSession, master: str) -> None:
    """``getOrCreate`` hands out the process's active session whatever master is asked for
    (one SparkContext per JVM): refuse instead of running the job on the other cluster."""
    current = str(active.sparkContext.master)
    if current != master:
        raise ClusterError(
            f"this process already has a Spark session on {current}; a second one on "
            f"{master} cannot start (one SparkContext per process)",
            remedy="stop the first (spark.stop()) before asking for another master, "
            "or run the job in its own process",
        )


@contextlib.contextmanager
def job_session(
    kind: JobKind | str = JobKind.DATA,
    *,
    spark: SparkSession | None = None,
    master: str | None = None,
    spec: ClusterSpec | str | os.PathLike[str] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    app_name: str = "gpuspark",
    reuse_active: bool | None = None,
    dataframe_only: bool = False,
    **conf: Any,
) -> Iterator[SparkSession]:
    """The session for one job, and the one ownership rule: stop only what was started here.

    ``spark`` as given; else the caller's active session (when no ``master``/``spec`` asks for
    another, or ``reuse_active``); else a new session on the spec's master. When that master
    is the embedded cluster and none runs, one is started from the spec for this job and
    stopped after it. ``dataframe_only``: a data job that uses only the DataFrame API, so a
    Spark Connect session serves it (see :func:`session_plan`).
    """
    if spark is not None:
        if JobKind(kind) is JobKind.DATA and not dataframe_only:
            require_classic(spark, f"this job ({app_name})")
        yield spark
        return
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    reuse = (master is None and spec is None) if reuse_active is None else reuse_active
    if active is not None and reuse:
        yield active
        return

    spec_obj = resolve_spec(spec)  # once: the file is read here, not again per step
    with _cluster_for(master, spec_obj, state_dir) as cluster:
        s = session(
            master,
            spec_obj,
            kind=kind,
            app_name=app_name,
            cluster=cluster,
            state_dir=state_dir,
            dataframe_only=dataframe_only,
            **conf,
        )
        try:
            yield s
        finally:
            if not is_connect_session(s):  # a Connect client's application is the server's
                withdraw_app(str(s.sparkContext.applicationId), spec_obj)
            stop_session(s)


def _announce(spark: SparkSession, spec: ClusterSpec | str | os.PathLike[str] | None) -> None:
    """Publish the new application's driver UI as a Prometheus target (see :mod:`.announce`)."""
    try:
        spec_obj = spec if isinstance(spec, ClusterSpec) else resolve_spec(spec)
    except GpusparkError:
        spec_obj = None
    announce_app(spark, spec_obj)


@contextlib.contextmanager
def _cluster_for(
    master: str | None, spec_obj: ClusterSpec, state_dir: Any
) -> Iterator[LocalCluster | None]:
    """The embedded cluster a job on ``master`` needs: the running one, or one started for it."""
    from gpuspark.cluster.local import LocalCluster

    target = master or spec_obj.spark.master
    if not backend_for(target).is_embedded(target):
        yield None
        return
    running = LocalCluster.running(state_dir)
    if running is not None:
        yield running
        return
    cluster = LocalCluster(spec=spec_obj, state_dir=state_dir)
    log.info("no embedded cluster running: starting one for this job (stopped after it)")
    with cluster:
        log.info("embedded cluster up at %s", cluster.master_url)
        yield cluster


def _key(name: str) -> str:
    return name if "." in name else name.replace("_", ".")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
