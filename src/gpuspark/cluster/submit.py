"""The one submit path: a job's spec is read once, its team resolved and checked once, and
everything its session needs is one :class:`JobContext`.

:func:`prepare_job` reads the spec (a path, ``$GPUSPARK_SPEC`` or the built-in one), resolves
the team (``team``, else the current user's per ``members``), refuses before anything starts
a job above the team's ``max_gpus`` or one writing into another team's dataset root, and
gives the team's Spark settings from the master's scheduler backend. :meth:`JobContext.session`
then opens the job's session through :func:`gpuspark.cluster.session.job_session` with that
spec object: nothing reads the spec file again. Prep jobs, ``launch``, ``train`` and the demo
go through here; the CLI parses and prints and checks nothing the library checks.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuspark.cluster.local import LocalCluster
from gpuspark.cluster.session import JobKind, job_session
from gpuspark.cluster.team_dirs import check_writes, remove_created, team_output_dir
from gpuspark.schedulers import Backend, Embedded, backend_for
from gpuspark.schedulers.standalone.api import team_app_name
from gpuspark.spec import resolve_spec
from gpuspark.spec.teams import check_team_gpus, find_team, resolve_team

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpuspark.spec import ClusterSpec

__all__ = ["TEAM_CONF", "JobContext", "embedded", "prepare_job", "team_conf"]

TEAM_CONF = "spark.gpuspark.team"
"""Spark property naming the application's team (every master)."""


def embedded(state_dir: Any = None) -> Embedded | None:
    """The running embedded cluster of this machine as the backends see it, or ``None``."""

    running = LocalCluster.running(state_dir)
    if running is None or running.state is None:
        return None
    shape = running.shape
    return Embedded(
        master_url=running.master_url or "",
        web_ui=running.web_ui or "",
        master_log=running.state.master_log,
        executor_gpus=shape.executor_gpus if shape is not None else None,
        executor_cores=shape.executor_cores if shape is not None else None,
    )


def team_conf(
    spec: ClusterSpec,
    team: str | None,
    master: str | None = None,
    *,
    shape: tuple[int, int] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
) -> dict[str, str]:
    """The Spark settings that submit a job under ``team`` on ``master`` (default: the spec's).

    ``{}`` for no team. ``shape`` is the executors' (GPUs, cores) on standalone; by default
    the running embedded cluster's for its master, else the spec's. What the settings are is
    the master's backend's to say (:meth:`gpuspark.schedulers.Backend.team_conf`).
    """
    if not team:
        return {}
    find_team(spec, team)
    target = master or spec.spark.master
    backend = backend_for(target)
    found = shape or _running_shape(backend, target, state_dir)
    return {TEAM_CONF: team, **backend.team_conf(spec, team, shape=found)}


def _running_shape(backend: Backend, master: str, state_dir: Any) -> tuple[int, int] | None:
    """Executor (GPUs, cores) of the running embedded cluster when ``master`` is it."""
    if not backend.has_workers:
        return None
    found = embedded(state_dir)
    if found is None or found.executor_gpus is None or found.executor_cores is None:
        return None
    if not backend.is_embedded(master) and master != found.master_url:
        return None
    return found.executor_gpus, found.executor_cores


@dataclass(frozen=True)
class JobContext:
    """One job, ready to run: its spec (read once), kind, team, session settings, run id and
    the directories made for it."""

    spec: ClusterSpec
    kind: JobKind
    team: str | None
    app_name: str
    """The application name, tagged ``[team=NAME]`` (the standalone master shows only names)."""
    conf: dict[str, str]
    """The team's Spark settings (queue, labels or caps), for the session."""
    master: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    writes: tuple[str, ...] = ()
    created: tuple[str, ...] = ()
    """Output directories made for the job (a team with a ``group``)."""
    spec_given: bool = False
    """Whether the caller named a spec: then the job never runs on a session the caller
    happens to have active on another master."""

    def session_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`gpuspark.cluster.session.job_session`."""
        return {"app_name": self.app_name, **self.conf}

    def session_args(self) -> dict[str, Any]:
        """Every keyword argument of :func:`gpuspark.cluster.session.job_session` for this
        job but ``spark``: its kind, master, the spec object read here (not read again), and
        its app name and team settings."""
        return {
            "kind": self.kind,
            "master": self.master,
            "spec": self.spec,
            "reuse_active": self.master is None and not self.spec_given,
            **self.session_kwargs(),
        }

    @contextlib.contextmanager
    def session(
        self, spark: SparkSession | None = None, *, state_dir: Any = None
    ) -> Iterator[SparkSession]:
        """The job's session (``spark`` as given; see :func:`job_session`)."""
        with job_session(spark=spark, state_dir=state_dir, **self.session_args()) as session:
            yield session

    @contextlib.contextmanager
    def discard_on_error(self) -> Iterator[None]:
        """Around the job: if it fails, the directories made for it go again (while empty),
        so a failed job leaves its destination as it was."""
        try:
            yield
        except BaseException:
            remove_created(self.created)
            raise


def prepare_job(
    kind: JobKind | str = JobKind.DATA,
    *,
    spec: Any = None,
    master: str | None = None,
    team: str | None = None,
    app_name: str = "gpuspark",
    gpus: float | None = None,
    writes: Iterable[str | os.PathLike[str] | None] = (),
    state_dir: str | os.PathLike[str] | None = None,
) -> JobContext:
    """Read the spec once and check the job before anything starts (see the module's
    docstring). ``gpus``: what the job holds at most (``None``: not checked); ``writes``: the
    directories it writes (``None`` entries skipped); for a team with a ``group`` they are
    made now, group-owned, and listed in ``created``. ``spec``: a spec, a path or ``None``."""

    spec_obj = resolve_spec(spec)
    found = resolve_team(spec_obj, team)
    name = found.name if found is not None else None
    if gpus is not None:
        check_team_gpus(spec_obj, name, gpus)
    paths = [os.fspath(path) for path in writes if path is not None]
    check_writes(spec_obj, found, paths)
    conf = team_conf(spec_obj, name, master, state_dir=state_dir)
    backend = backend_for(master or spec_obj.spark.master)
    conf.update(backend.job_conf(spec_obj, JobKind(kind), gpus))
    created = _make_dirs(spec_obj, found, paths)
    return JobContext(
        spec=spec_obj,
        kind=JobKind(kind),
        team=name,
        app_name=team_app_name(app_name, name),
        conf=conf,
        master=master,
        writes=tuple(paths),
        created=tuple(created),
        spec_given=spec is not None,
    )


def _make_dirs(spec: ClusterSpec, found: Any, paths: list[str]) -> list[str]:
    created: list[str] = []
    if found is None or found.group is None:
        return created
    try:
        for path in paths:
            created += team_output_dir(spec, found, path)
    except BaseException:
        remove_created(created)
        raise
    return created
