"""Team GPU quotas as Volcano objects: a ``Queue`` per team (``capability`` = max, ``guarantee``
= guaranteed, ``weight`` from priority) and the PodGroup template Spark's Volcano feature step
reads (``spark.kubernetes.scheduler.volcano.podGroupTemplateFile``)."""

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
    "VOLCANO_API",
    "VOLCANO_QUEUES_FILE",
    "podgroup_file",
    "podgroup_template",
    "render_volcano",
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


def podgroup_template(spec: ClusterSpec, team: str, *, min_executors: int = 1) -> dict[str, Any]:
    """The PodGroup template for ``team``: its queue, and ``minResources`` for the driver plus
    ``min_executors`` executors (at most the team's cap), which Volcano reserves before it
    starts the application."""
    found = find_team(spec, team)
    caps = team_caps(spec, found)
    executors = max(1, min(min_executors, caps.max_executors))
    s = spec.spark
    memory = DRIVER_MEMORY_MIB + executors * executor_memory_mib(
        s.executor_memory, s.conf.get("spark.executor.memoryOverhead")
    )
    return {
        "apiVersion": VOLCANO_API,
        "kind": "PodGroup",
        "spec": {
            "queue": kube_name(found.name),
            "minMember": 1,
            "minResources": {
                GPU_RESOURCE: executors * s.executor_gpus,
                "cpu": DRIVER_CORES + executors * s.executor_cores,
                "memory": f"{memory}Mi",
            },
        },
    }


def podgroup_file(team: str) -> str:
    """File name of ``team``'s PodGroup template."""
    return f"volcano-podgroup-{kube_name(team)}.yaml"


def volcano_spark_conf(
    spec: ClusterSpec, team: str, *, template_dir: str | None = None, namespace_prefix: str = ""
) -> dict[str, str]:
    """Spark properties that schedule ``team``'s application with Volcano in its queue;
    ``template_dir``: where the PodGroup template will be when ``spark-submit`` runs (default:
    its bare file name, relative to where ``spark-submit`` runs)."""
    found = find_team(spec, team)
    name = kube_name(found.name)
    template = podgroup_file(found.name)
    conf = {
        "spark.kubernetes.namespace": namespace_prefix + name,
        "spark.kubernetes.scheduler.name": "volcano",
        "spark.kubernetes.driver.pod.featureSteps": FEATURE_STEP,
        "spark.kubernetes.executor.pod.featureSteps": FEATURE_STEP,
        "spark.kubernetes.scheduler.volcano.podGroupTemplateFile": (
            f"{template_dir.rstrip('/')}/{template}" if template_dir else template
        ),
        "spark.executor.resource.gpu.vendor": "nvidia.com",
    }
    caps = team_caps(spec, found).conf()  # spark.cores.max means nothing on Kubernetes
    conf["spark.dynamicAllocation.maxExecutors"] = caps["spark.dynamicAllocation.maxExecutors"]
    return conf


def volcano_notes(spec: ClusterSpec) -> list[str]:
    """What the rendered Volcano objects mean and what they leave to the administrator."""
    return [
        "each team's Queue: capability = max_gpus, guarantee.resource = guaranteed_gpus"
        " (cpu and memory go with the GPUs' share of the nodes), weight = priority + 1 divides"
        " what is left; Volcano's own 'default' queue stays for everyone else",
        "the PodGroup template's minResources covers the driver and the first executor(s):"
        " Volcano starts the application only when they fit; executors beyond that are"
        " scheduled as they are asked for, within the queue's capability",
        "needs Spark >= 3.3 built with -Pvolcano and Volcano >= 1.5.1; spark-volcano-TEAM.conf"
        " names its PodGroup template relative to the folder it is in: run spark-submit there"
        " (Spark reads the template where it submits)",
        "spark.dynamicAllocation.maxExecutors keeps one application within max_gpus, as on"
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
    team."""
    unique_names(spec, kube_name, "Volcano", DEFAULT_QUEUE)
    notes = volcano_notes(spec)
    header = [
        f"Volcano queues for cluster '{spec.name}', rendered by gpuspark from its spec.",
        f"Apply with: kubectl apply -f {VOLCANO_QUEUES_FILE}",
        *(f"Note: {n}" for n in notes),
    ]
    files = {
        VOLCANO_QUEUES_FILE: yaml_documents(header, [volcano_queue(spec, t) for t in spec.teams])
    }
    for team in spec.teams:
        pg = podgroup_template(spec, team.name, min_executors=min_executors)
        files[podgroup_file(team.name)] = yaml_documents(
            [f"PodGroup template for team '{team.name}' (Spark's Volcano feature step)."], [pg]
        )
        conf = volcano_spark_conf(
            spec, team.name, template_dir=template_dir, namespace_prefix=namespace_prefix
        )
        files[f"spark-volcano-{kube_name(team.name)}.conf"] = spark_conf_text(
            f"Spark on Kubernetes + Volcano settings for team '{team.name}'.", conf
        )
    return files
