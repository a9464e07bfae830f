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
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuspark.errors import LaunchError
from gpuspark.quota.dirs import check_writes, remove_created, team_output_dir
from gpuspark.spec.teams import find_team

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec
    from gpuspark.spec.models import Team

__all__ = [
    "KUEUE_LABEL",
    "TEAM_CONF",
    "Caps",
    "TeamSubmit",
    "app_team",
    "check_team_gpus",
    "check_writes",
    "current_user",
    "find_team",
    "resolve_team",
    "standalone_caps",
    "submit_under",
    "team_app_name",
    "team_conf",
]

TEAM_CONF = "spark.gpuspark.team"
"""Spark property naming the application's team (every master)."""
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""Pod label Kueue reads to find the LocalQueue of a workload."""
_VOLCANO_STEP = "org.apache.spark.deploy.k8s.features.VolcanoFeatureStep"
_TAG = re.compile(r"\[team=([A-Za-z0-9_.-]+)\]\s*$")
_EMBEDDED = ("local-cluster", "embedded")


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


def team_app_name(app_name: str, team: str | None) -> str:
    """``app_name`` tagged ``[team=NAME]`` (the standalone master shows only names)."""
    if not team:
        return app_name
    base = _TAG.sub("", app_name).rstrip()
    return f"{base} [team={team}]"


def app_team(app_name: str) -> str | None:
    """The team an application name is tagged with (``"x [team=nlp]"`` -> ``"nlp"``)."""
    match = _TAG.search(app_name or "")
    return match.group(1) if match else None


@dataclass(frozen=True)
class Caps:
    """Per-application caps on Spark standalone for one team."""

    cores_max: int
    max_executors: int
    executor_gpus: int
    max_gpus: int

    def conf(self) -> dict[str, str]:
        """``spark.cores.max`` and ``spark.dynamicAllocation.maxExecutors``."""
        return {
            "spark.cores.max": str(self.cores_max),
            "spark.dynamicAllocation.maxExecutors": str(self.max_executors),
        }


def standalone_caps(
    spec: ClusterSpec,
    team: str,
    *,
    executor_gpus: int | None = None,
    executor_cores: int | None = None,
) -> Caps:
    """Caps for ``team`` with executors of ``executor_gpus`` GPUs and ``executor_cores`` cores
    (default: the spec's ``[spark]``): as many whole executors as fit in ``max_gpus``.

    Refuses a team whose ``max_gpus`` is smaller than one executor's GPUs.
    """
    found = find_team(spec, team)
    gpus = int(executor_gpus or spec.spark.executor_gpus)
    cores = int(executor_cores or spec.spark.executor_cores)
    executors = found.max_gpus // gpus if gpus else 0
    if executors < 1:
        raise LaunchError(
            f"team {team!r} may hold {found.max_gpus} GPUs, less than one executor's {gpus}",
            remedy="raise the team's max_gpus or lower [spark] executor_gpus",
        )
    return Caps(cores * executors, executors, gpus, found.max_gpus)


def _shared_caps(spec: ClusterSpec, team: str, shape: tuple[int, int] | None) -> dict[str, str]:
    """The caps from ``gpuspark.quota.standalone`` when present (spec shape), else ours."""
    if shape is None:
        try:
            import importlib

            shared = importlib.import_module("gpuspark.quota.standalone")  # lands in parallel
            return {str(k): str(v) for k, v in shared.team_caps(spec, team).conf().items()}
        except (ImportError, AttributeError):
            pass
    gpus, cores = shape if shape is not None else (None, None)
    return standalone_caps(spec, team, executor_gpus=gpus, executor_cores=cores).conf()


def _embedded_shape(master: str, state_dir: Any) -> tuple[int, int] | None:
    """Executor (GPUs, cores) of the running embedded cluster when ``master`` is it."""
    from gpuspark.cluster.local import LocalCluster

    running = LocalCluster.running(state_dir)
    if running is None or running.shape is None:
        return None
    if master not in _EMBEDDED and master != running.master_url:
        return None
    return running.shape.executor_gpus, running.shape.executor_cores


def _k8s_conf(spec: ClusterSpec, team: str) -> dict[str, str]:
    scheduler = spec.spark.conf.get("spark.kubernetes.scheduler.name", "")
    if scheduler == "volcano":
        template = _podgroup_template(team)
        return {
            "spark.kubernetes.scheduler.name": "volcano",
            "spark.kubernetes.driver.pod.featureSteps": _VOLCANO_STEP,
            "spark.kubernetes.executor.pod.featureSteps": _VOLCANO_STEP,
            "spark.kubernetes.scheduler.volcano.podGroupTemplateFile": str(template),
        }
    if scheduler == "yunikorn":
        # Spark's "Using Apache YuniKorn as Customized Scheduler" settings: the queue label
        # (root.<team>) and the app-id annotation that groups the driver and executor pods.
        return {
            "spark.kubernetes.scheduler.name": "yunikorn",
            "spark.kubernetes.driver.label.queue": f"root.{team}",
            "spark.kubernetes.executor.label.queue": f"root.{team}",
            "spark.kubernetes.driver.annotation.yunikorn.apache.org/app-id": "{{APP_ID}}",
            "spark.kubernetes.executor.annotation.yunikorn.apache.org/app-id": "{{APP_ID}}",
        }
    return {
        f"spark.kubernetes.driver.label.{KUEUE_LABEL}": team,
        f"spark.kubernetes.executor.label.{KUEUE_LABEL}": team,
    }


def _podgroup_template(team: str) -> Path:
    """A PodGroup template naming the team's Volcano queue (Spark fills in the rest)."""
    from gpuspark.storage import atomic_write_text

    root = os.environ.get("GPUSPARK_QUOTA_DIR") or str(Path.home() / ".gpuspark" / "quota")
    path = Path(root) / "volcano" / f"podgroup-{team}.yaml"
    text = f"apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nspec:\n  queue: {team}\n"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    return path


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
    the running embedded cluster's for its master, else the spec's.
    """
    if not team:
        return {}
    find_team(spec, team)
    target = master or spec.spark.master
    conf = {TEAM_CONF: team}
    if target == "yarn":
        conf["spark.yarn.queue"] = team
    elif target.startswith("k8s://"):
        conf.update(_k8s_conf(spec, team))
    elif target in _EMBEDDED or target.startswith("spark://"):
        found = shape or _embedded_shape(target, state_dir)
        conf.update(_shared_caps(spec, team, found))
    return conf


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
