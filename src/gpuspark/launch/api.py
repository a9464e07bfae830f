"""Run a function or a script on N ranks: request -> preflight -> attempts (Spark or local).

On Spark the stage is a classic barrier RDD stage (:mod:`.spark`), or for a Spark Connect
session a barrier ``mapInArrow`` stage (:mod:`.connect`); the attempts, results and errors
around it are the same."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from gpuspark.cluster.monitor_dirs import targets_dir
from gpuspark.cluster.session import JobKind
from gpuspark.cluster.submit import JobContext, prepare_job
from gpuspark.errors import HostLostError, LaunchError
from gpuspark.launch._internal.logs import RankOutput
from gpuspark.launch.cluster_total import check_cluster_total
from gpuspark.launch.connect import connect_preflight, run_connect
from gpuspark.launch.local import run_local
from gpuspark.launch.preflight import preflight
from gpuspark.launch.request import OPTIONS, LaunchRequest, build_request
from gpuspark.launch.results import rank0_value, result_error, timeout_error
from gpuspark.launch.run_targets import RunTargets
from gpuspark.launch.spark import exclude_host, run_barrier
from gpuspark.schedulers import is_connect_session
from gpuspark.spec.network import hosts_network_env

__all__ = ["prepare", "run", "run_request"]

_FN_KWARGS_FIRST = frozenset({"module", "log_dir", "tee"})
"""Request options that :func:`run` leaves to the function (added after its signature)."""


def run_request(
    req: LaunchRequest, spark: Any = None, *, spec: Any = None, job: JobContext | None = None
) -> Any:
    """Run a prepared :class:`LaunchRequest`; return rank 0's return value.

    The job is prepared once (:func:`prepare`: the spec read, the team resolved and checked),
    unless the caller prepared it (``job``, e.g. a training recipe).
    On Spark: ``spark`` as given (a session or context, classic or Spark Connect), else a
    training session on ``req.master`` or the spec's master (the embedded cluster is started
    for the run when none is running, and stopped after; when it runs a Spark Connect server,
    through that server).

    While it runs, the ranks' ``/metrics`` endpoints are listed in the Prometheus target file
    ``<targets dir>/runs/<run_id>.json`` (:func:`gpuspark.monitor.targets_dir` of the spec),
    removed when the run ends, however it ends.
    """
    job = prepare(req, spec) if job is None else _adopt(req, job)
    if req.local:
        return _attempts(req, None, job)
    if spark is not None:
        return _attempts(req, _stage_target(spark), job)
    check_cluster_total(req, job.master)  # before a session: only the master's page is read
    with job.session() as session:
        return _attempts(req, _stage_target(session), job)


def _stage_target(spark: Any) -> Any:
    """What the stage runs on: a classic session's SparkContext, a Connect session itself."""
    if is_connect_session(spark) or not hasattr(spark, "sparkContext"):
        return spark
    return spark.sparkContext


def prepare(req: LaunchRequest, spec: Any = None) -> JobContext:
    """The launch's job (:func:`gpuspark.cluster.submit.prepare_job`): the spec read once,
    ``req.team`` resolved (default: the user's team per ``members``), a job above its
    ``max_gpus`` refused; ``req``'s metrics port and host filled from the spec. A dry run
    calls it too, so it fails where the run would."""
    gpus = None if req.local else req.num_processes * req.gpus_per_process
    job = prepare_job(
        JobKind.TRAINING,
        spec=spec,
        master=req.master,
        team=req.team,
        app_name="gpuspark-launch",
        gpus=gpus,
    )
    return _adopt(req, job)


def _adopt(req: LaunchRequest, job: JobContext) -> JobContext:
    """``req`` takes the job's team, the spec's metrics defaults and its collective timeout
    (``[training] collective_timeout_s``) unless ``req`` sets its own."""
    req.team = job.team
    if req.metrics_port is None:
        req.metrics_port = int(job.spec.monitoring.metrics_port)
    req.metrics_host = req.metrics_host or str(job.spec.monitoring.metrics_host)
    req.host_env = req.host_env or hosts_network_env(job.spec)
    if req.collective_timeout is None:
        req.collective_timeout = float(job.spec.training.collective_timeout_s)
    return job


def _attempts(req: LaunchRequest, sc: Any, job: JobContext) -> Any:
    try:
        return _attempts_on(req, sc, job)
    except LaunchError as exc:
        _to_driver_log(sc, exc)
        raise


def _to_driver_log(sc: Any, exc: LaunchError) -> None:
    """A failed launch on Spark also goes to the driver log (WARN: the console shows only
    ERROR, and the caller gets the error itself), where ``gpuspark doctor logs`` reads it:
    the driver log otherwise holds Spark's view only, in which the barrier stage succeeded."""
    if sc is None or is_connect_session(sc):  # a Connect client has no JVM to log through
        return
    try:
        sc._jvm.org.apache.logging.log4j.LogManager.getLogger("gpuspark").warn(str(exc))
    except Exception:  # a log line never hides the launch's own error
        pass


def _attempts_on(req: LaunchRequest, sc: Any, job: JobContext) -> Any:
    run_id = job.run_id
    if sc is not None:
        req.master = req.master or _master_of(sc)
        _preflight(req, sc)
    with (
        RunTargets(targets_dir(job.spec), run_id, req.num_processes) as targets,
        RankOutput(req.log_dir, req.tee, req.num_processes) as output,
    ):
        if req.log_dir is not None:
            _note(req.logs_line())
        last: list[dict[str, Any]] = []
        why = ""
        for attempt in range(req.max_attempts):
            if attempt:
                _note(f"retry {attempt} of {req.max_attempts - 1} after: {why}")
            try:
                last = (
                    run_local(req, run_id, attempt, targets.add, output)
                    if sc is None
                    else _stage(sc)(req, sc, run_id, attempt, targets.add, output)
                )
            except HostLostError as lost:
                if attempt + 1 == req.max_attempts:
                    raise
                _refit_after(lost, req, sc)
                why = lost.message
                continue
            if all(r.get("ok") for r in last):
                return rank0_value(last)
            if any(r.get("stopped") == "timeout" for r in last):
                raise timeout_error(req)
            why = str(result_error(last, 1))
        raise result_error(last, req.max_attempts)


def _master_of(sc: Any) -> str:
    if is_connect_session(sc):
        return f"sc://{sc.client.host}"
    return str(sc.master)


def _preflight(req: LaunchRequest, sc: Any) -> None:
    """The checks before the stage; over Connect those the server's settings allow."""
    if is_connect_session(sc):
        connect_preflight(req, sc)
    else:
        preflight(req, sc)


def _stage(sc: Any) -> Callable[..., list[dict[str, Any]]]:
    """The barrier stage for ``sc``: classic RDD, or ``mapInArrow`` over Spark Connect."""
    if is_connect_session(sc):
        return run_connect
    return run_barrier


def _refit_after(lost: HostLostError, req: LaunchRequest, sc: Any) -> None:
    """Before retrying after a lost host: Spark stops using that host's executors (classic
    sessions: :func:`~gpuspark.launch.spark.exclude_host`; over Connect the server's Spark
    drops them when its timeouts do), and the stage must fit what is left, or one line says
    which host was lost and what the rest cannot hold."""
    if sc is not None and not is_connect_session(sc):
        try:
            excluded = exclude_host(sc, lost.host)
        except Exception as exc:  # the retry still runs; Spark's timeouts drop the host
            _note(f"could not take host {lost.host}'s executors out of service: {exc}")
            excluded = []
        if excluded:
            _note(f"executor(s) {', '.join(excluded)} on host {lost.host} taken out of service")
    try:
        _preflight(req, sc)
    except LaunchError as unfit:
        if not _shrink(req, sc, lost):
            raise LaunchError(
                f"host {lost.host} was lost and the rest of the cluster cannot run the retry: "
                f"{unfit.message}",
                remedy=unfit.remedy,
            ) from None


def _shrink(req: LaunchRequest, sc: Any, lost: HostLostError) -> bool:
    """Elastic (``req.min_ranks``): the largest world, whole tasks fewer and at least
    ``min_ranks``, that the hosts left can run becomes ``req.num_processes`` (said on the
    console); ``False`` when none can, or the launch is not elastic."""
    if req.min_ranks is None:
        return False
    before = req.num_processes
    for n in range(before - req.per_task, req.min_ranks - 1, -req.per_task):
        req.num_processes = n
        try:
            _preflight(req, sc)
        except LaunchError:
            continue
        _note(
            f"world size {before} -> {n}: host {lost.host} was lost; the retry runs on the "
            f"hosts that remain (--min-ranks {req.min_ranks})"
        )
        return True
    req.num_processes = before
    return False


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
    team: str | None = None,
    metrics_port: int | None = None,
    metrics_host: str | None = None,
    job: JobContext | None = None,
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
    ``max_attempts`` reruns the whole stage (after a lost host, on the hosts that remain).
    ``collective_timeout=S`` (a launch option, like ``log_dir``) is the default timeout of
    ``init_process_group`` in every rank (unset: the spec's ``[training]
    collective_timeout_s``). ``team`` (one of the spec's ``[[teams]]``),
    ``metrics_port`` (base port, rank's port = base + local rank; 0: off) and
    ``metrics_host`` reach the ranks as ``GPUSPARK_TEAM`` / ``GPUSPARK_METRICS_PORT`` /
    ``GPUSPARK_METRICS_HOST`` for :func:`gpuspark.monitor.exporter.serve` (unset: the spec's
    ``[monitoring]``). ``job``: a job the caller prepared
    (:func:`gpuspark.cluster.submit.prepare_job`), whose spec and team are used as they are.
    Raises :class:`LaunchError` before anything starts
    when the cluster cannot run the job, and naming the failing rank and host when one fails.

    The options of torchrun parity (``module``, ``log_dir``, ``tee``) are set through
    :func:`~gpuspark.launch.make_request` and :func:`run_request`: here those names stay
    ``fn``'s keyword arguments, as they were before the options existed.
    """
    opts = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTIONS - _FN_KWARGS_FIRST}
    req = build_request(
        fn,
        args,
        kwargs,
        num_processes=num_processes,
        gpus_per_process=gpus_per_process,
        processes_per_task=processes_per_task,
        local=local,
        backend=backend,
        max_restarts=max_restarts,
        max_attempts=max_attempts,
        timeout=timeout,
        env=env,
        team=team,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        **opts,
    )
    return run_request(req, spark, spec=spec, job=job)
