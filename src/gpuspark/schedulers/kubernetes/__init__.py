"""Spark on Kubernetes (``k8s://https://host:port``), with its queueing flavours: Kueue (the
default: a LocalQueue label on the pods), Volcano or YuniKorn (picked by the spec's
``spark.kubernetes.scheduler.name``). Kueue ClusterQueues and Volcano Queues are rendered from
the spec; usage and ``quota why`` come from Kueue's objects through the API server."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuspark import storage
from gpuspark._util import envvars
from gpuspark.errors import ClusterError
from gpuspark.schedulers.base import Backend, Embedded, Reason, Target, TeamUsage, queue_usage
from gpuspark.schedulers.kubernetes import kueue, volcano
from gpuspark.schedulers.kubernetes.api import (
    KueueQueue,
    classify_kueue,
    k8s_auth,
    kueue_cluster_queues,
    kueue_workload,
)
from gpuspark.schedulers.shares import yaml_documents

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["KubernetesBackend", "kueue_usage"]

_SCHEME = "k8s://"
_IMAGE = "spark.kubernetes.container.image"
_SCHEDULER = "spark.kubernetes.scheduler.name"


def kueue_usage(spec: ClusterSpec, queues: list[KueueQueue]) -> list[TeamUsage]:
    """Per team from the ClusterQueues (ClusterQueue named after the team)."""
    figures = {q.name: (q.used_gpus, q.admitted_workloads, q.pending_workloads) for q in queues}
    return queue_usage(spec, figures)


def _volcano_conf(spec: ClusterSpec, team: str) -> dict[str, str]:
    """Volcano's scheduler, its feature step, and the team's PodGroup template (written under
    ``$GPUSPARK_QUOTA_DIR``, as ``render volcano`` writes it)."""
    root = envvars.QUOTA_DIR.get() or str(Path.home() / ".gpuspark" / "quota")
    path = Path(root) / "volcano" / volcano.podgroup_file(team)
    text = yaml_documents(
        [f"PodGroup template for team '{team}' (Spark's Volcano feature step)."],
        [volcano.podgroup_template(spec, team)],
    )
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        storage.atomic_write_text(path, text)
    return {
        _SCHEDULER: "volcano",
        "spark.kubernetes.driver.pod.featureSteps": volcano.FEATURE_STEP,
        "spark.kubernetes.executor.pod.featureSteps": volcano.FEATURE_STEP,
        "spark.kubernetes.scheduler.volcano.podGroupTemplateFile": str(path),
    }


def _yunikorn_conf(team: str) -> dict[str, str]:
    # Spark's "Using Apache YuniKorn as Customized Scheduler" settings: the queue label
    # (root.<team>) and the app-id annotation that groups the driver and executor pods.
    return {
        _SCHEDULER: "yunikorn",
        "spark.kubernetes.driver.label.queue": f"root.{team}",
        "spark.kubernetes.executor.label.queue": f"root.{team}",
        "spark.kubernetes.driver.annotation.yunikorn.apache.org/app-id": "{{APP_ID}}",
        "spark.kubernetes.executor.annotation.yunikorn.apache.org/app-id": "{{APP_ID}}",
    }


def _kueue_conf(team: str) -> dict[str, str]:
    return {
        f"spark.kubernetes.driver.label.{kueue.QUEUE_LABEL}": team,
        f"spark.kubernetes.executor.label.{kueue.QUEUE_LABEL}": team,
    }


class KubernetesBackend(Backend):
    """``k8s://https://host:port``; the queueing flavour comes from the spec."""

    name = "kubernetes"
    example = "k8s://https://host:port"
    renderers = ("kueue", "volcano")

    def matches(self, master: str) -> bool:
        return master.startswith(_SCHEME)

    def spec_conf(self, conf: dict[str, str]) -> dict[str, str]:
        # Kubernetes requests GPUs through the device plugin's resource name.
        return {**conf, "spark.executor.resource.gpu.vendor": "nvidia.com"}

    def check_session(self, master: str, conf: dict[str, str]) -> None:
        if _IMAGE not in conf:
            raise ClusterError(
                f"master=k8s://… needs {_IMAGE}",
                remedy="pass it as conf or in the spec's [spark.conf] table",
            )

    def team_conf(
        self, spec: ClusterSpec, team: str, *, shape: tuple[int, int] | None = None
    ) -> dict[str, str]:
        flavour = spec.spark.conf.get(_SCHEDULER, "")
        if flavour == "volcano":
            return _volcano_conf(spec, team)
        if flavour == "yunikorn":
            return _yunikorn_conf(team)
        return _kueue_conf(team)

    def render(self, spec: ClusterSpec, renderer: str, **opts: Any) -> dict[str, str]:
        if renderer == "volcano":
            return volcano.render_volcano(spec, **opts)
        return kueue.render_kueue(spec, **opts)

    def notes(self, spec: ClusterSpec, renderer: str, **opts: Any) -> list[str]:
        if renderer == "volcano":
            return volcano.volcano_notes(spec)
        return kueue.kueue_notes(spec, api=opts.get("api", "v1beta2"))

    def target(
        self,
        spec: ClusterSpec,
        master: str,
        url: str | None = None,
        embedded: Embedded | None = None,
    ) -> Target:
        return Target("kueue", (url or master.removeprefix(_SCHEME)).rstrip("/"))

    def usage(self, spec: ClusterSpec, target: Target) -> list[TeamUsage]:
        return kueue_usage(spec, kueue_cluster_queues(k8s_auth(target.url)))

    def why(
        self, spec: ClusterSpec, target: Target, app: str, *, namespace: str = "default"
    ) -> Reason:
        return classify_kueue(kueue_workload(k8s_auth(target.url), namespace, app))
