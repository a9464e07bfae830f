"""YARN with the Capacity Scheduler: a queue per team (``spark.yarn.queue``), rendered as
``capacity-scheduler.xml``; the ResourceManager's REST API for usage and ``quota why``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gpuspark._util import envvars
from gpuspark.errors import ClusterError
from gpuspark.schedulers.base import Backend, Embedded, Reason, Target, TeamUsage, queue_usage
from gpuspark.schedulers.yarn.api import (
    YarnQueueUsage,
    classify_yarn,
    read_yarn_queues,
    yarn_app,
)
from gpuspark.schedulers.yarn.render import render_yarn, yarn_notes

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["YarnBackend", "yarn_usage"]

_MASTER = "yarn"


def yarn_usage(spec: ClusterSpec, queues: list[YarnQueueUsage]) -> list[TeamUsage]:
    """Per team from the Capacity Scheduler's leaf queues (queue named after the team)."""
    figures = {q.name: (q.gpus_used, q.active_apps, q.pending_apps) for q in queues}
    return queue_usage(spec, figures)


class YarnBackend(Backend):
    """``yarn``: the cluster is named by the Hadoop configuration (``HADOOP_CONF_DIR``)."""

    name = "yarn"
    example = "yarn"
    renderers = ("yarn",)

    def matches(self, master: str) -> bool:
        return master == _MASTER

    def check_session(self, master: str, conf: dict[str, str]) -> None:
        conf.setdefault("spark.submit.deployMode", "client")

    def check_environment(self, master: str) -> None:
        if not (os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR")):
            raise ClusterError(
                "master=yarn needs the cluster's Hadoop configuration",
                remedy="set HADOOP_CONF_DIR (or YARN_CONF_DIR) to the directory with yarn-site.xml",
            )

    def team_conf(
        self, spec: ClusterSpec, team: str, *, shape: tuple[int, int] | None = None
    ) -> dict[str, str]:
        return {"spark.yarn.queue": team}

    def render(self, spec: ClusterSpec, renderer: str, **opts: Any) -> dict[str, str]:
        return render_yarn(spec, **opts)

    def notes(self, spec: ClusterSpec, renderer: str, **opts: Any) -> list[str]:
        return yarn_notes(spec, yarn_version=opts.get("yarn_version", "3.3"))

    def target(
        self,
        spec: ClusterSpec,
        master: str,
        url: str | None = None,
        embedded: Embedded | None = None,
    ) -> Target:
        rm = url or envvars.YARN_RM.get()
        if not rm:
            raise ClusterError(
                "master=yarn: no ResourceManager address",
                remedy=f"pass --url http://rm:8088 or set {envvars.YARN_RM.name}",
            )
        return Target(self.name, rm.rstrip("/"))

    def usage(self, spec: ClusterSpec, target: Target) -> list[TeamUsage]:
        return yarn_usage(spec, read_yarn_queues(target.url))

    def why(
        self, spec: ClusterSpec, target: Target, app: str, *, namespace: str = "default"
    ) -> Reason:
        return classify_yarn(yarn_app(target.url, app))
