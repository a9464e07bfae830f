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
  group-owned (see :mod:`gpuspark.cluster.team_dirs`).

The rules live where every job path reaches them: the team rules in :mod:`gpuspark.spec.teams`,
the team conf and the one submit path in :mod:`gpuspark.cluster.submit`, what a scheduler
needs in its backend (:mod:`gpuspark.schedulers`). This module is the quota feature's face.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from gpuspark.cluster.submit import TEAM_CONF, JobContext, prepare_job, team_conf
from gpuspark.cluster.team_dirs import check_writes
from gpuspark.schedulers.standalone.api import app_team, team_app_name
from gpuspark.spec.teams import check_team_gpus, current_user, find_team, resolve_team

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

TeamSubmit = JobContext
"""A job's team (resolved) and what its session needs (see :class:`JobContext`)."""


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
    root (:func:`gpuspark.cluster.team_dirs.check_writes`), and give its session settings.
    For a team with a ``group``, the ``writes`` directories are made last, group-owned
    (listed in ``created``). ``spec``: a spec, a path or ``None``; it is read once
    (:func:`gpuspark.cluster.submit.prepare_job`)."""
    return prepare_job(
        spec=spec, master=master, team=team, app_name=app_name, gpus=gpus, writes=writes
    )
