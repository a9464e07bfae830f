"""Spark on Kubernetes (``k8s://https://host:port``), with its queueing flavours: Kueue (the
default: a LocalQueue label on the pods), Volcano or YuniKorn (picked by the spec's
``spark.kubernetes.scheduler.name``, :mod:`.flavours`). Kueue ClusterQueues and Volcano Queues
are rendered from the spec (``render kueue``, ``render volcano``), and what else Spark on
Kubernetes needs by ``render k8s`` (:mod:`.render`: namespaces, RBAC, pod templates,
``spark-defaults.conf``, SparkApplications); usage and ``quota why`` come from Kueue's objects
through the API server. A session on ``k8s://`` (client mode) takes the spec's ``[kubernetes]``
settings and pod templates (:mod:`.session`) and puts a team's job in the team's namespace and
queue."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gpuspark.schedulers.base import Backend, Embedded, Reason, Target, TeamUsage, queue_usage
from gpuspark.schedulers.kubernetes import kueue, volcano
from gpuspark.schedulers.kubernetes.api import (
    KueueQueue,
    classify_kueue,
    kueue_cluster_queues,
    kueue_workload,
)
from gpuspark.schedulers.kubernetes.client import connect
from gpuspark.schedulers.kubernetes.flavours import flavour, team_settings
from gpuspark.schedulers.kubernetes.render import (
    K8S_RENDERER,
    k8s_notes,
    render_k8s,
    team_namespace,
)
from gpuspark.schedulers.kubernetes.session import (
    IMAGE_PYTHON,
    check_image,
    check_templates,
    session_conf,
    state_root,
    write_if_changed,
)
from gpuspark.schedulers.shares import yaml_documents
from gpuspark.schedulers.standalone.caps import team_caps

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["KubernetesBackend", "kueue_usage"]

_SCHEME = "k8s://"


def kueue_usage(spec: ClusterSpec, queues: list[KueueQueue]) -> list[TeamUsage]:
    """Per team from the ClusterQueues (ClusterQueue named after the team)."""
    figures = {q.name: (q.used_gpus, q.admitted_workloads, q.pending_workloads) for q in queues}
    return queue_usage(spec, figures)


def _volcano_conf(spec: ClusterSpec, team: str) -> dict[str, str]:
    """Volcano's scheduler, its feature step, and the team's PodGroup template. The session's
    driver runs here (client mode) and reads the template as it starts, so the template is
    written on this machine, under ``$GPUSPARK_QUOTA_DIR``, and named by its path here (the
    files ``render volcano`` and ``render k8s`` write name theirs relatively)."""
    path = state_root() / "volcano" / volcano.podgroup_file(team)
    text = yaml_documents(
        [f"PodGroup template for team '{team}' (Spark's Volcano feature step)."],
        [volcano.podgroup_template(spec, team)],
    )
    write_if_changed(path, text)
    return team_settings(spec, team, podgroup_template=str(path))


class KubernetesBackend(Backend):
    """``k8s://https://host:port``; the queueing flavour comes from the spec."""

    name = "kubernetes"
    example = "k8s://https://host:port"
    renderers = ("kueue", "volcano", K8S_RENDERER)

    def matches(self, master: str) -> bool:
        return master.startswith(_SCHEME)

    def spec_conf(self, conf: dict[str, str]) -> dict[str, str]:
        # Kubernetes requests GPUs through the device plugin's resource name.
        return {**conf, "spark.executor.resource.gpu.vendor": "nvidia.com"}

    def session_spec_conf(self, conf: dict[str, str], spec: ClusterSpec) -> dict[str, str]:
        return session_conf(spec, conf)

    def executor_python(self) -> str | None:
        return IMAGE_PYTHON

    def job_conf(self, spec: ClusterSpec, kind: str, gpus: float | None) -> dict[str, str]:
        # A training job is one barrier stage whose tasks must all run at once: ask for the
        # executors its GPUs fill (Spark's default is 2), unless the spec says how many.
        if kind != "training" or not gpus or "spark.executor.instances" in spec.spark.conf:
            return {}
        return {"spark.executor.instances": str(math.ceil(gpus / spec.spark.executor_gpus))}

    def check_session(self, master: str, conf: dict[str, str]) -> None:
        check_image(conf)
        check_templates(conf)

    def team_conf(
        self, spec: ClusterSpec, team: str, *, shape: tuple[int, int] | None = None
    ) -> dict[str, str]:
        """The team's namespace (as ``render k8s`` names it, without a prefix), its queue
        (:func:`.flavours.team_settings`) and, for dynamic allocation, the executors its
        ``max_gpus`` holds (as in ``render k8s``'s ``TEAM-data.conf``)."""
        if flavour(spec) == "volcano":
            queue = _volcano_conf(spec, team)
        else:
            queue = team_settings(spec, team, podgroup_template="")
        cap = team_caps(spec, team).max_executors
        return {
            "spark.kubernetes.namespace": team_namespace(team),
            "spark.dynamicAllocation.maxExecutors": str(cap),
            **queue,
        }

    def render(self, spec: ClusterSpec, renderer: str, **opts: Any) -> dict[str, str]:
        if renderer == K8S_RENDERER:
            return render_k8s(spec, **opts)
        if renderer == "volcano":
            return volcano.render_volcano(spec, **opts)
        return kueue.render_kueue(spec, **opts)

    def notes(self, spec: ClusterSpec, renderer: str, **opts: Any) -> list[str]:
        if renderer == K8S_RENDERER:
            return k8s_notes(spec, conf_dir=opts.get("conf_dir"))
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
        with connect(target.url) as client:
            return kueue_usage(spec, kueue_cluster_queues(client))

    def why(
        self, spec: ClusterSpec, target: Target, app: str, *, namespace: str = "default"
    ) -> Reason:
        with connect(target.url) as client:
            return classify_kueue(kueue_workload(client, namespace, app))
