"""What a scheduler backend is: the protocol every backend implements, and the plain data it
returns (where to ask, usage per team, why an application waits).

A backend owns everything that differs between schedulers: whether it matches a master URL,
what it adds to a session's Spark conf, the conf that puts a job under a team, the files
``gpuspark render`` writes for its queues, its API client (usage per team, one application's
state) and its ``quota why``. Nothing outside :mod:`gpuspark.schedulers` branches on a master
scheme or a scheduler name.
"""

from __future__ import annotations

import urllib.error
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from gpuspark._util.net import http_get_json
from gpuspark.errors import ClusterError

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = [
    "NO_TEAM",
    "Backend",
    "Embedded",
    "Reason",
    "Target",
    "TeamUsage",
    "http_json",
    "queue_usage",
    "usage_rows",
]

NO_TEAM = "-"
"""The row of applications that name no team."""


@dataclass
class Target:
    """The scheduler to ask: ``kind`` (the backend's name, or its queueing flavour such as
    ``kueue``) at ``url``; ``master_log``: the standalone master's log when known."""

    kind: str
    url: str
    master_log: str | None = None


@dataclass(frozen=True)
class Embedded:
    """The running embedded cluster, as a backend needs to know it (found by the caller, so
    that backends do not depend on the cluster package)."""

    master_url: str
    web_ui: str
    master_log: str | None
    executor_gpus: int | None = None
    executor_cores: int | None = None


@dataclass
class TeamUsage:
    """One team's GPUs now (and over a window when Prometheus answers)."""

    team: str
    guaranteed_gpus: int
    max_gpus: int
    gpus_in_use: float = 0
    running_apps: int = 0
    pending_apps: int = 0
    apps: list[str] = field(default_factory=list)
    gpu_hours: float | None = None
    guaranteed_gpu_hours: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return asdict(self)


@dataclass
class Reason:
    """Why one application waits (or that it does not)."""

    app: str
    state: str
    cause: str
    """``shape``, ``team-ceiling``, ``cluster-full``, ``queue-am-limit``, ``user-am-limit``,
    ``not-activated``, ``waiting-am``, ``cluster-empty``, ``quota``, ``no-local-queue``,
    ``inactive-queue``, ``running``, ``finished``, ``unknown``."""
    message: str
    remedy: str
    evidence: list[str] = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        """Whether the application waits for resources."""
        return self.cause not in ("running", "finished")

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {**asdict(self), "waiting": self.waiting}


def usage_rows(spec: ClusterSpec) -> dict[str, TeamUsage]:
    """An empty row per team of the spec."""
    return {t.name: TeamUsage(t.name, t.guaranteed_gpus, t.max_gpus) for t in spec.teams}


def queue_usage(
    spec: ClusterSpec, figures: Mapping[str, tuple[float, int, int]]
) -> list[TeamUsage]:
    """Rows per team from ``queue name -> (GPUs used, running, pending)``; a team's queue is
    named after the team."""
    rows = usage_rows(spec)
    for name, row in rows.items():
        if name in figures:
            row.gpus_in_use, row.running_apps, row.pending_apps = figures[name]
    return list(rows.values())


def http_json(url: str, *, token: str | None = None, timeout: float = 5.0, ctx: Any = None) -> Any:
    """GET ``url`` and decode its JSON; a one-line :class:`ClusterError` when unreachable."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        return http_get_json(url, timeout=timeout, headers=headers, context=ctx)
    except urllib.error.HTTPError as exc:
        raise ClusterError(
            f"{url} answered HTTP {exc.code} {exc.reason}",
            remedy="check the application/queue name and the credentials",
        ) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ClusterError(
            f"cannot read {url}: {getattr(exc, 'reason', exc)}",
            remedy="check the scheduler's address (--url or --master) and that it is up",
        ) from exc


class Backend(ABC):
    """One scheduler Spark can run on. Subclasses set :attr:`name` and implement
    :meth:`matches`; every other method has a default meaning "nothing to add" or "not
    supported here" (one line naming the backend)."""

    name: str = ""
    """Short name: ``standalone``, ``yarn``, ``kubernetes``, ``local``."""
    example: str = ""
    """A master URL of this backend, for messages (``spark://host:port``)."""
    in_process: bool = False
    """Whether tasks run inside the driver's JVM (``local[N]``: no executors, no web UI)."""
    has_workers: bool = False
    """Whether the cluster has Spark workers of its own (standalone: their GPU settings go
    into ``spark-defaults.conf``)."""
    renderers: tuple[str, ...] = ()
    """The names ``gpuspark render NAME`` writes queue files for (``yarn``; ``kueue``,
    ``volcano``)."""
    on_this_machine: bool = False
    """Whether its masters run here (single-machine defaults apply)."""

    @abstractmethod
    def matches(self, master: str) -> bool:
        """Whether ``master`` (a Spark master URL or name) is this backend's."""

    # -- sessions ----------------------------------------------------------------------------
    def is_embedded(self, master: str) -> bool:
        """Whether ``master`` names the embedded cluster of this machine."""
        return False

    def is_local(self, master: str) -> bool:
        """Whether ``master`` runs on this machine (single-machine defaults apply)."""
        return self.on_this_machine

    def spec_conf(self, conf: dict[str, str]) -> dict[str, str]:
        """What the spec's Spark settings need on this backend, before ``[spark.conf]``
        (Kubernetes: the GPU vendor of the device plugin)."""
        return conf

    def session_spec_conf(self, conf: dict[str, str], spec: ClusterSpec) -> dict[str, str]:
        """The spec's Spark settings (``conf``, ``[spark.conf]`` applied) as a session on
        this backend takes them, with what it needs from ``spec`` (``local[N]`` drops what
        needs executors; Kubernetes adds image, namespace, service account and pod
        templates). Used by every session on this backend, whatever the spec's own master."""
        return conf

    def check_session(self, master: str, conf: dict[str, str]) -> None:
        """Complete (``conf`` is changed in place) or refuse with :class:`ClusterError` the
        final conf of a session on ``master``."""
        return None

    def check_environment(self, master: str) -> None:
        """Refuse, before Spark starts, a process environment the master cannot work in."""
        return None

    def job_conf(self, spec: ClusterSpec, kind: str, gpus: float | None) -> dict[str, str]:
        """Settings of one job of ``kind`` holding ``gpus`` GPUs (``None``: not known), for
        backends that request executors per application (Kubernetes: how many)."""
        return {}

    def executor_python(self) -> str | None:
        """The Python executors run when the spec and the caller name none
        (``spark.pyspark.python``); ``None``: the driver's own interpreter (same machine or
        same install path), which is what every backend but containers wants."""
        return None

    def requires_authentication(self, master: str) -> bool | None:
        """Whether ``master`` refuses applications without Spark's shared secret
        (``spark.authenticate``); ``None``: this backend cannot tell."""
        return None

    # -- teams -------------------------------------------------------------------------------
    def team_conf(
        self, spec: ClusterSpec, team: str, *, shape: tuple[int, int] | None = None
    ) -> dict[str, str]:
        """The Spark settings that put a job of ``team`` under the team's quota here;
        ``shape``: the executors' (GPUs, cores) of the running cluster, when known."""
        return {}

    # -- render ------------------------------------------------------------------------------
    def render(self, spec: ClusterSpec, renderer: str, **opts: Any) -> dict[str, str]:
        """The files (name -> content) of ``renderer`` (one of :attr:`renderers`)."""
        raise ClusterError(f"the {self.name} backend renders no queue files")

    def notes(self, spec: ClusterSpec, renderer: str, **opts: Any) -> list[str]:
        """What the files of :meth:`render` mean and leave to the administrator."""
        return []

    # -- the live scheduler ------------------------------------------------------------------
    def target(
        self,
        spec: ClusterSpec,
        master: str,
        url: str | None = None,
        embedded: Embedded | None = None,
    ) -> Target:
        """Where to ask this scheduler about ``master``'s usage and applications."""
        raise ClusterError(
            f"master={master!r}: the {self.name} backend has no scheduler to ask",
            remedy="pass --master of a cluster (spark://…, yarn, k8s://…) or --url",
        )

    def usage(self, spec: ClusterSpec, target: Target) -> list[TeamUsage]:
        """GPUs per team now, from the scheduler's own API."""
        raise ClusterError(f"the {self.name} backend cannot report usage")

    def why(
        self, spec: ClusterSpec, target: Target, app: str, *, namespace: str = "default"
    ) -> Reason:
        """Why application ``app`` waits, from the scheduler's own diagnostics."""
        raise ClusterError(f"the {self.name} backend cannot explain applications")

    # -- monitoring --------------------------------------------------------------------------
    def master_address(self, master: str) -> tuple[str, int] | None:
        """``(host, port)`` a client connects to for ``master``, where it has one."""
        return None

    def master_ui_hosts(self, master: str) -> list[str]:
        """Hosts of ``master`` that serve a scheduler web UI with metrics (standalone)."""
        return []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
