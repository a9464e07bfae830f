"""Spark standalone, the embedded cluster included: FIFO scheduling, per-application caps as
the only quota lever, the master's ``/json/`` as its API and its log for ``quota why``."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlparse

from gpuspark.errors import ClusterError
from gpuspark.schedulers.base import (
    NO_TEAM,
    Backend,
    Embedded,
    Reason,
    Target,
    TeamUsage,
    usage_rows,
)
from gpuspark.schedulers.standalone.api import (
    StandaloneSnapshot,
    app_team,
    gpu_count,
    standalone_snapshot,
    team_app_name,
)
from gpuspark.schedulers.standalone.caps import TeamCaps, team_caps
from gpuspark.schedulers.standalone.rpc import AUTH_MARKERS, master_requires_auth
from gpuspark.schedulers.standalone.why import why_standalone

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = [
    "AUTH_MARKERS",
    "EMBEDDED_MASTERS",
    "MASTER_UI_PORT",
    "StandaloneBackend",
    "TeamCaps",
    "app_team",
    "gpu_count",
    "standalone_usage",
    "team_app_name",
    "team_caps",
]

EMBEDDED_MASTERS = ("local-cluster", "embedded")
"""Master names meaning the embedded standalone cluster of this machine."""
MASTER_UI_PORT = 8080
"""The standalone master's web UI port (``spark.master.ui.port``'s default)."""
_SCHEME = "spark://"
_LOOPBACK = ("spark://127.", "spark://localhost")


def standalone_usage(spec: ClusterSpec, snap: StandaloneSnapshot) -> list[TeamUsage]:
    """Per team from a standalone snapshot (applications tagged ``[team=NAME]``)."""
    rows = usage_rows(spec)
    for app in snap.apps:
        name = app.team if app.team in rows else NO_TEAM
        row = rows.setdefault(name, TeamUsage(NO_TEAM, 0, 0))
        row.gpus_in_use += app.gpus_held
        row.apps.append(app.id)
        if app.state == "WAITING" or not app.executors:
            row.pending_apps += 1
        else:
            row.running_apps += 1
    return list(rows.values())


class StandaloneBackend(Backend):
    """``spark://host:port`` (several hosts: high availability) and ``local-cluster``."""

    name = "standalone"
    example = "spark://host:port"
    has_workers = True

    def matches(self, master: str) -> bool:
        return master.startswith(_SCHEME) or master in EMBEDDED_MASTERS

    def is_embedded(self, master: str) -> bool:
        return master in EMBEDDED_MASTERS

    def is_local(self, master: str) -> bool:
        return master in EMBEDDED_MASTERS or master.startswith(_LOOPBACK)

    def team_conf(
        self, spec: ClusterSpec, team: str, *, shape: tuple[int, int] | None = None
    ) -> dict[str, str]:
        """``spark.cores.max`` and ``spark.dynamicAllocation.maxExecutors``: as many whole
        executors of ``shape`` (GPUs, cores; default the spec's) as fit in ``max_gpus``."""
        gpus, cores = shape if shape is not None else (None, None)
        return team_caps(spec, team, executor_gpus=gpus, executor_cores=cores).conf()

    def target(
        self,
        spec: ClusterSpec,
        master: str,
        url: str | None = None,
        embedded: Embedded | None = None,
    ) -> Target:
        if url:
            return Target(self.name, url.rstrip("/"))
        if embedded is not None and (self.is_embedded(master) or embedded.master_url == master):
            return Target(self.name, embedded.web_ui, embedded.master_log)
        if master.startswith(_SCHEME):
            return Target(self.name, f"http://{urlparse(master).hostname}:{MASTER_UI_PORT}")
        raise ClusterError(
            f"master={master!r}: no running standalone master to ask",
            remedy="start it (gpuspark cluster up) or pass --master/--url",
        )

    def usage(self, spec: ClusterSpec, target: Target) -> list[TeamUsage]:
        return standalone_usage(spec, standalone_snapshot(target.url))

    def why(
        self, spec: ClusterSpec, target: Target, app: str, *, namespace: str = "default"
    ) -> Reason:
        return why_standalone(standalone_snapshot(target.url), app, spec, target.master_log)

    def master_address(self, master: str) -> tuple[str, int] | None:
        """The first master's host and port (``spark://h:7077,h2:7077`` -> ``(h, 7077)``)."""
        if not master.startswith(_SCHEME):
            return None
        host, _, port = master[len(_SCHEME) :].split(",")[0].partition(":")
        return host, int(port) if port.isdigit() else 7077

    def requires_authentication(self, master: str) -> bool | None:
        """Asked of the (first) master itself in one RPC round trip (see :mod:`.rpc`)."""
        address = self.master_address(master)
        return master_requires_auth(*address) if address is not None else None

    def master_ui_hosts(self, master: str) -> list[str]:
        if not master.startswith(_SCHEME):
            return []
        return [part.rsplit(":", 1)[0] for part in master[len(_SCHEME) :].split(",") if part]
