"""Submit under a team: which team a job belongs to, and the Spark settings that put it there.

- **Which team**: the name given (``--team``, ``team=``), else the team of the spec's
  ``[[teams]]`` whose ``members`` list the current user (:func:`getpass.getuser`), else none.
  An unknown name is refused with a did-you-mean; a user not in a team's non-empty ``members``
  is refused too, both before anything starts.
- **Settings** (:func:`team_conf`): ``spark.yarn.queue`` on YARN; on Kubernetes the Kueue
  queue label on driver and executor pods, or the Volcano scheduler with a PodGroup template
  naming the team's queue (when the spec's ``[spark.conf]`` picks ``volcano``), or YuniKorn's
  ``queue=root.<team>`` label and app-id annotation (when it picks ``yunikorn``); on Spark
  standalone (and the embedded cluster) per-application caps (``spark.cores.max``,
  ``spark.dynamicAllocation.maxExecutors``) so that executors x GPUs per executor cannot exceed
  the team's ``max_gpus``. Every master also gets ``spark.gpuspark.team``.
- **Which team an application is** on standalone: the master's ``/json/`` shows only the
  application's name, so the name carries a ``[team=NAME]`` tag (:func:`team_app_name`,
  :func:`app_team`).
- **What a job writes** (``writes=`` of :func:`submit_under`): refused up front inside another
  team's dataset root; for a team with a ``group``, its output directories are made now,
  group-owned (see :mod:`gpuspark.quota.dirs`).
"""

from __future__ import annotations

import contextlib
import getpass
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuspark.errors import LaunchError
from gpuspark.quota.dirs import check_writes, remove_created, team_output_dir
from gpuspark.quota.status import embedded
from gpuspark.schedulers import Backend, backend_for
from gpuspark.schedulers.standalone.api import app_team, team_app_name
from gpuspark.spec.teams import find_team

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec
    from gpuspark.spec.models import Team

__all__ = [
    "TEAM_CONF",
    "TeamSubmit",
    "app_team",
    "check_team_gpus",
    "check_writes",
    "current_user",
    "find_team",
    "resolve_team",
    "submit_under",
    "team_app_name",
    "team_conf",
]

TEAM_CONF = "spark.gpuspark.team"
"""Spark property naming the application's team (every master)."""


def current_user() -> str:
    """The user a job runs as (``getpass.getuser()``; ``$USER`` style)."""
    return getpass.getuser()


def resolve_team(
    spec: ClusterSpec, team: str | None = None, *, user: str | None = None
) -> Team | None:
    """The team a job runs under: ``team`` (checked), else the first team listing ``user``
    (default: the current user) in its ``members``, else ``None``.

    Refuses (one line) an unknown team, and a user who is not in the named team's non-empty
    ``members``.
    """
    who = user or current_user()
    if team:
        found = find_team(spec, team)
        if found.members and who not in found.members:
            raise LaunchError(
                f"user {who!r} is not a member of team {found.name!r} "
                f"(members: {', '.join(found.members)})",
                remedy=f"submit under your own team, or ask to be added to {found.name!r}",
            )
        return found
    for candidate in spec.teams:
        if who in candidate.members:
            return candidate
    return None


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


def check_team_gpus(spec: ClusterSpec, team: str | None, gpus: float) -> None:
    """Refuse, with the numbers, a job asking more GPUs than ``team``'s ``max_gpus``."""
    if not team:
        return
    found = find_team(spec, team)
    if gpus > found.max_gpus:
        raise LaunchError(
            f"the job asks {math.ceil(gpus)} GPUs but team {team!r} may hold at most "
            f"{found.max_gpus} (guaranteed {found.guaranteed_gpus})",
            remedy=f"ask for at most {found.max_gpus} GPUs (fewer processes or GPUs each), "
            "or raise the team's max_gpus in the spec",
        )


@dataclass(frozen=True)
class TeamSubmit:
    """A job's team (resolved) and what its session needs: app name and Spark settings;
    ``created``: the output directories made for it (a team with a ``group``)."""

    team: str | None
    app_name: str
    conf: dict[str, str]
    created: tuple[str, ...] = ()

    def session_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`gpuspark.cluster.session.job_session`."""
        return {"app_name": self.app_name, **self.conf}

    @contextlib.contextmanager
    def discard_on_error(self) -> Iterator[None]:
        """Around the job: if it fails, the directories made for it go again (while empty),
        so a failed job leaves its destination as it was."""
        try:
            yield
        except BaseException:
            remove_created(self.created)
            raise


def submit_under(
    spec: Any,
    team: str | None,
    master: str | None = None,
    *,
    app_name: str = "gpuspark",
    gpus: float | None = None,
    writes: Iterable[str | os.PathLike[str] | None] = (),
) -> TeamSubmit:
    """Resolve the team of a job (``team``, else the current user's per ``members``), refuse
    it up front when ``gpus`` exceeds the team's ``max_gpus`` or when a path in ``writes``
    (the directories the job writes; ``None`` entries skipped) lies inside another team's
    root (:func:`gpuspark.quota.dirs.check_writes`), and give its session settings. For a
    team with a ``group``, the ``writes`` directories are made last, group-owned
    (:func:`gpuspark.quota.dirs.team_output_dir`; listed in ``created``).
    ``spec``: a spec, a path or ``None`` (see :func:`gpuspark.spec.resolve_spec`)."""
    from gpuspark.spec import resolve_spec

    spec_obj = resolve_spec(spec)
    found = resolve_team(spec_obj, team)
    name = found.name if found is not None else None
    if gpus is not None:
        check_team_gpus(spec_obj, name, gpus)
    paths = [path for path in writes if path is not None]
    check_writes(spec_obj, found, paths)
    conf = team_conf(spec_obj, name, master)
    created: list[str] = []
    if found is not None and found.group is not None:
        try:
            for path in paths:
                created += team_output_dir(spec_obj, found, path)
        except BaseException:
            remove_created(created)
            raise
    return TeamSubmit(name, team_app_name(app_name, name), conf, tuple(created))
