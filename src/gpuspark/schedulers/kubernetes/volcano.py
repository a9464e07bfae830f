"""Team GPU quotas as Volcano objects: a ``Queue`` per team (``capability`` = max, ``guarantee``
= guaranteed, ``weight`` from priority) and the PodGroup template Spark's Volcano feature step
reads (``spark.kubernetes.scheduler.volcano.podGroupTemplateFile``).

A spec without ``[[teams]]`` gets one working queue for everyone: ``gpuspark-shared``, capped
at all the GPUs, with its PodGroup template and ``spark-volcano.conf`` (the shared namespace,
``[kubernetes] namespace``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuspark.schedulers.kubernetes.api import GPU_RESOURCE
from gpuspark.schedulers.shares import (
    DEFAULT_QUEUE,
    executor_memory_mib,
    kube_name,
    resource_share,
    spark_conf_text,
    unique_names,
    yaml_documents,
)
from gpuspark.schedulers.standalone.caps import team_caps
from gpuspark.spec.teams import find_team

if TYPE_CHECKING:
    from gpuspark.spec.models import ClusterSpec, Team

__all__ = [
    "DRIVER_CORES",
    "DRIVER_MEMORY_MIB",
    "FEATURE_STEP",
    "SHARED_CONF_FILE",
    "SHARED_QUEUE",
    "VOLCANO_API",
    "VOLCANO_QUEUES_FILE",
    "podgroup_file",
    "podgroup_template",
    "render_volcano",
    "shared_queue",
    "volcano_notes",
    "volcano_queue",
    "volcano_spark_conf",
]

VOLCANO_API = "scheduling.volcano.sh/v1beta1"
VOLCANO_QUEUES_FILE = "volcano-queues.yaml"
FEATURE_STEP = "org.apache.spark.deploy.k8s.features.VolcanoFeatureStep"
DRIVER_CORES = 1
DRIVER_MEMORY_MIB = 1024 + 384
"""Spark's default driver: 1 core, 1g heap plus the 384m minimum overhead."""
SHARED_QUEUE = "gpuspark-shared"
"""The one Queue of a spec without ``[[teams]]`` (Volcano's own ``default`` is left alone)."""
SHARED_CONF_FILE = "spark-volcano.conf"
"""The Spark settings of every job when the spec has no ``[[teams]]``."""


def _resources(spec: ClusterSpec, gpus: int) -> dict[str, Any]:
    cores, ram_gib = resource_share(list(spec.nodes), gpus)
    return {GPU_RESOURCE: gpus, "cpu": cores, "memory": f"{ram_gib}Gi"}


def volcano_queue(spec: ClusterSpec, team: Team) -> dict[str, Any]:
    """The team's Queue: capped at ``max_gpus``, guaranteed ``guaranteed_gpus``, weight
    ``priority + 1`` (Volcano weights start at 1)."""
    return {
        "apiVersion": VOLCANO_API,
        "kind": "Queue",
        "metadata": {"name": kube_name(team.name)},
        "spec": {
            "weight": team.priority + 1,
            "reclaimable": True,
            "capability": _resources(spec, team.max_gpus),
            "guarantee": {"resource": _resources(spec, team.guaranteed_gpus)},
        },
    }


def shared_queue(spec: ClusterSpec) -> dict[str, Any]:
    """The Queue every job shares when the spec has no teams: capped at all the GPUs."""
    return {
        "apiVersion": VOLCANO_API,
        "kind": "Queue",
        "metadata": {"name": SHARED_QUEUE},
        "spec": {"weight": 1, "reclaimable": True, "capability": _resources(spec, spec.total_gpus)},
    }


def _queue_and_cap(spec: ClusterSpec, team: str | None) -> tuple[str, int]:
    """(queue name, most executors of one application) of ``team``; ``None``: the shared
    queue of a spec without teams, whose applications may hold every GPU."""
    if team is None:
        return SHARED_QUEUE, max(1, spec.total_gpus // spec.spark.executor_gpus)
    found = find_team(spec, team)
    return kube_name(found.name), team_caps(spec, found).max_executors


def podgroup_template(
    spec: ClusterSpec, team: str | None, *, min_executors: int = 1
) -> dict[str, Any]:
    """The PodGroup template for ``team`` (``None``: the shared queue): its queue, and
    ``minResources`` for the driver plus ``min_executors`` executors (at most the team's
    cap), which Volcano reserves before it starts the application."""
    queue, cap = _queue_and_cap(spec, team)
    executors = max(1, min(min_executors, cap))
    s = spec.spark
    memory = DRIVER_MEMORY_MIB + executors * executor_memory_mib(
        s.executor_memory, s.conf.get("spark.executor.memoryOverhead")
    )
    return {
        "apiVersion": VOLCANO_API,
        "kind": "PodGroup",
        "spec": {
            "queue": queue,
            "minMember": 1,
            "minResources": {
                GPU_RESOURCE: executors * s.executor_gpus,
                "cpu": DRIVER_CORES + executors * s.executor_cores,
                "memory": f"{memory}Mi",
            },
        },
    }


def podgroup_file(team: str | None) -> str:
    """File name of ``team``'s PodGroup template (``None``: the shared queue's)."""
    return f"volcano-podgroup-{kube_name(team)}.yaml" if team else "volcano-podgroup.yaml"


def volcano_spark_conf(
    spec: ClusterSpec,
    team: str | None,
    *,
    template_dir: str | None = None,
    namespace_prefix: str = "",
) -> dict[str, str]:
    """Spark properties that schedule ``team``'s application with Volcano in its queue
    (``None``: the shared queue, in the shared namespace); ``template_dir``: where the PodGroup
    template will be when ``spark-submit`` runs (default: its bare file name, relative to
    where ``spark-submit`` runs)."""
    queue, cap = _queue_and_cap(spec, team)
    namespace = namespace_prefix + queue if team else spec.kubernetes.namespace
    template = podgroup_file(team)
    conf = {
        "spark.kubernetes.namespace": namespace,
        "spark.kubernetes.scheduler.name": "volcano",
        "spark.kubernetes.driver.pod.featureSteps": FEATURE_STEP,
        "spark.kubernetes.executor.pod.featureSteps": FEATURE_STEP,
        "spark.kubernetes.scheduler.volcano.podGroupTemplateFile": (
            f"{template_dir.rstrip('/')}/{template}" if template_dir else template
        ),
        "spark.executor.resource.gpu.vendor": "nvidia.com",
        # spark.cores.max means nothing on Kubernetes: the executors are the cap
        "spark.dynamicAllocation.maxExecutors": str(cap),
    }
    return conf


def volcano_notes(spec: ClusterSpec) -> list[str]:
    """What the rendered Volcano objects mean and what they leave to the administrator."""
    if spec.teams:
        queues = (
            "each team's Queue: capability = max_gpus, guarantee.resource = guaranteed_gpus"
            " (cpu and memory go with the GPUs' share of the nodes), weight = priority + 1"
            " divides what is left; Volcano's own 'default' queue stays for everyone else"
        )
        conf, cap = "spark-volcano-TEAM.conf", "max_gpus"
    else:
        queues = (
            f"the spec has no [[teams]]: every job shares one queue, '{SHARED_QUEUE}', capped at"
            f" all {spec.total_gpus} GPUs, in namespace '{spec.kubernetes.namespace}'"
            f" ([kubernetes] namespace: create it first); submit with {SHARED_CONF_FILE}"
        )
        conf, cap = SHARED_CONF_FILE, "the cluster's GPUs"
    return [
        queues,
        "the PodGroup template's minResources covers the driver and the first executor(s):"
        " Volcano starts the application only when they fit; executors beyond that are"
        " scheduled as they are asked for, within the queue's capability",
        f"needs Spark >= 3.3 built with -Pvolcano and Volcano >= 1.5.1; {conf}"
        " names its PodGroup template relative to the folder it is in: run spark-submit there"
        " (Spark reads the template where it submits)",
        f"spark.dynamicAllocation.maxExecutors keeps one application within {cap}, as on"
        " standalone",
    ]


def render_volcano(
    spec: ClusterSpec,
    *,
    template_dir: str | None = None,
    namespace_prefix: str = "",
    min_executors: int = 1,
) -> dict[str, str]:
    """``volcano-queues.yaml``, one PodGroup template and one ``spark-volcano-TEAM.conf`` per
    team (without teams: the shared queue, its template and :data:`SHARED_CONF_FILE`)."""
    unique_names(spec, kube_name, "Volcano", DEFAULT_QUEUE)
    notes = volcano_notes(spec)
    header = [
        f"Volcano queues for cluster '{spec.name}', rendered by gpuspark from its spec.",
        f"Apply with: kubectl apply -f {VOLCANO_QUEUES_FILE}",
        *(f"Note: {n}" for n in notes),
    ]
    queues = [volcano_queue(spec, t) for t in spec.teams] or [shared_queue(spec)]
    files = {VOLCANO_QUEUES_FILE: yaml_documents(header, queues)}
    names: list[str | None] = [t.name for t in spec.teams] or [None]
    for team in names:
        whose = f"team '{team}'" if team else f"every job (queue '{SHARED_QUEUE}')"
        pg = podgroup_template(spec, team, min_executors=min_executors)
        files[podgroup_file(team)] = yaml_documents(
            [f"PodGroup template for {whose} (Spark's Volcano feature step)."], [pg]
        )
        conf = volcano_spark_conf(
            spec, team, template_dir=template_dir, namespace_prefix=namespace_prefix
        )
        name = f"spark-volcano-{kube_name(team)}.conf" if team else SHARED_CONF_FILE
        files[name] = spark_conf_text(f"Spark on Kubernetes + Volcano settings for {whose}.", conf)
    return files
