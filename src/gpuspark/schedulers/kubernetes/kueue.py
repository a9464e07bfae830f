"""Team GPU quotas as Kueue objects: a ``ResourceFlavor`` per GPU model, a ``ClusterQueue`` per
team in one cohort (guaranteed GPUs as ``nominalQuota``, max - guaranteed as
``borrowingLimit``), a ``LocalQueue`` in each team's namespace, a ``WorkloadPriorityClass`` per
team, and the Spark settings that put a job's pods on the team's queue.

A spec without ``[[teams]]`` gets one working queue for everyone: the ClusterQueue
``gpuspark-shared`` with all the GPUs, its LocalQueue in the shared namespace (``[kubernetes]
namespace``) and ``spark-kueue.conf``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuspark.schedulers.kubernetes.api import GPU_RESOURCE
from gpuspark.schedulers.shares import (
    kube_name,
    largest_remainder,
    resource_share,
    spark_conf_text,
    unique_names,
    yaml_documents,
)
from gpuspark.spec.teams import find_team

if TYPE_CHECKING:
    from gpuspark.spec.models import ClusterSpec, NodeGroup, Team

__all__ = [
    "GPU_LABEL",
    "GPU_RESOURCE",
    "KUEUE_APIS",
    "KUEUE_FILE",
    "PRIORITY_LABEL",
    "QUEUE_LABEL",
    "SHARED_CONF_FILE",
    "SHARED_QUEUE",
    "Flavor",
    "flavors",
    "gpu_product_label",
    "kueue_notes",
    "kueue_objects",
    "kueue_spark_conf",
    "render_kueue",
]

KUEUE_FILE = "kueue.yaml"
KUEUE_APIS = ("v1beta1", "v1beta2")
GPU_LABEL = "nvidia.com/gpu.product"
"""The node label NVIDIA GPU feature discovery sets to the GPU model."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
SHARED_QUEUE = "gpuspark-shared"
"""ClusterQueue holding the GPUs no team is guaranteed: it only lends them to the cohort.
Without ``[[teams]]`` it holds all the GPUs and the shared namespace submits to it."""
SHARED_CONF_FILE = "spark-kueue.conf"
"""The Spark settings of every job when the spec has no ``[[teams]]``."""
_COVERED = (GPU_RESOURCE, "cpu", "memory")


@dataclass(frozen=True)
class Flavor:
    """One GPU model: its ResourceFlavor name and the node groups that have it."""

    name: str
    gpu_model: str
    groups: tuple[NodeGroup, ...]

    @property
    def gpus(self) -> int:
        """GPUs of this model in the cluster."""
        return sum(g.gpus for g in self.groups)

    def quota(self, gpus: int) -> tuple[int, int, str]:
        """(GPUs, cores, memory) for ``gpus`` of this flavor's GPUs, with their share of the
        nodes' cores and memory."""
        cores, ram_gib = resource_share(list(self.groups), gpus)
        return gpus, cores, f"{ram_gib}Gi"


def flavors(spec: ClusterSpec) -> list[Flavor]:
    """One flavor per GPU model, in the order the models first appear in ``[[nodes]]``."""
    by_model: dict[str, list[NodeGroup]] = {}
    for group in spec.nodes:
        by_model.setdefault(group.gpu_model, []).append(group)
    names = [kube_name(model) for model in by_model]
    return [
        Flavor(name if names.count(name) == 1 else f"{name}-{i}", model, tuple(groups))
        for i, (name, (model, groups)) in enumerate(zip(names, by_model.items(), strict=True))
    ]


def _split(gpus: int, found: list[Flavor]) -> list[int]:
    return largest_remainder([f.gpus for f in found], gpus)


def _resources(flavor: Flavor, nominal: int, borrow: int | None) -> list[dict[str, Any]]:
    mine = flavor.quota(nominal)
    ceiling = flavor.quota(nominal + borrow) if borrow is not None else None
    out = []
    for i, name in enumerate(_COVERED):
        entry: dict[str, Any] = {"name": name, "nominalQuota": mine[i]}
        if ceiling is not None:
            entry["borrowingLimit"] = _minus(ceiling[i], mine[i])
        out.append(entry)
    return out


def _minus(a: int | str, b: int | str) -> int | str:
    if isinstance(a, str) and isinstance(b, str):
        return f"{int(a[:-2]) - int(b[:-2])}Gi"
    assert isinstance(a, int) and isinstance(b, int)
    return a - b


def _cluster_queue(
    spec: ClusterSpec, team: Team, name: str, namespace: str, api: str, found: list[Flavor]
) -> dict[str, Any]:
    nominal = _split(team.guaranteed_gpus, found)
    borrow = _split(team.max_gpus - team.guaranteed_gpus, found)
    lowest = min(t.priority for t in spec.teams)
    return {
        "apiVersion": f"kueue.x-k8s.io/{api}",
        "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": {"gpuspark/team": name}},
        "spec": {
            _cohort_field(api): kube_name(spec.name),
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": list(_COVERED),
                    "flavors": [
                        {"name": f.name, "resources": _resources(f, n, b)}
                        for f, n, b in zip(found, nominal, borrow, strict=True)
                    ],
                }
            ],
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {
                    "policy": "LowerPriority" if team.priority > lowest else "Never"
                },
                "withinClusterQueue": "LowerPriority",
            },
        },
    }


def _cohort_field(api: str) -> str:
    if api not in KUEUE_APIS:
        raise ValueError(f"--kueue-api {api!r} is not one of {', '.join(KUEUE_APIS)}")
    return "cohortName" if api == "v1beta2" else "cohort"


def _shared_queue(spec: ClusterSpec, api: str, found: list[Flavor]) -> dict[str, Any] | None:
    """The unguaranteed GPUs (per flavor), lent to the cohort; no namespace may submit to it,
    except the shared namespace when the spec has no teams (then it holds every GPU)."""
    used = [0] * len(found)
    for team in spec.teams:
        used = [u + n for u, n in zip(used, _split(team.guaranteed_gpus, found), strict=True)]
    rest = [max(0, f.gpus - u) for f, u in zip(found, used, strict=True)]
    if not any(rest):
        return None
    admits = {}
    if not spec.teams:  # nil namespaceSelector admits nothing; this one the shared namespace
        admits = {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": spec.kubernetes.namespace}
            },
            "queueingStrategy": "BestEffortFIFO",
        }
    return {
        "apiVersion": f"kueue.x-k8s.io/{api}",
        "kind": "ClusterQueue",
        "metadata": {"name": SHARED_QUEUE},
        "spec": {
            _cohort_field(api): kube_name(spec.name),
            **admits,
            "resourceGroups": [
                {
                    "coveredResources": list(_COVERED),
                    "flavors": [
                        {"name": f.name, "resources": _resources(f, r, None)}
                        for f, r in zip(found, rest, strict=True)
                    ],
                }
            ],
        },
    }


def kueue_objects(
    spec: ClusterSpec, *, api: str = "v1beta2", namespace_prefix: str = ""
) -> list[dict[str, Any]]:
    """Every Kueue object, in the order ``kubectl apply`` needs them (without teams: the
    flavors, :data:`SHARED_QUEUE` and its LocalQueue in the shared namespace)."""
    _cohort_field(api)
    names = unique_names(spec, kube_name, "Kueue", SHARED_QUEUE)
    found = flavors(spec)
    group = f"kueue.x-k8s.io/{api}"
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": group,
            "kind": "ResourceFlavor",
            "metadata": {"name": f.name},
            "spec": {"nodeLabels": {GPU_LABEL: gpu_product_label(spec, f, len(found))}},
        }
        for f in found
    ]
    for team, name in zip(spec.teams, names, strict=True):
        docs.append(
            {
                "apiVersion": group,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": f"{name}-priority"},
                "value": team.priority,
                "description": f"Priority of team {team.name}'s workloads.",
            }
        )
    for team, name in zip(spec.teams, names, strict=True):
        docs.append(_cluster_queue(spec, team, name, namespace_prefix + name, api, found))
    shared = _shared_queue(spec, api, found)
    if shared is not None:
        docs.append(shared)
    for name in names:
        docs.append(
            {
                "apiVersion": group,
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": namespace_prefix + name},
                "spec": {"clusterQueue": name},
            }
        )
    if not spec.teams and shared is not None:
        namespace = spec.kubernetes.namespace
        docs.append(
            {
                "apiVersion": group,
                "kind": "LocalQueue",
                "metadata": {"name": SHARED_QUEUE, "namespace": namespace},
                "spec": {"clusterQueue": SHARED_QUEUE},
            }
        )
    return docs


def gpu_product_label(spec: ClusterSpec, flavor: Flavor, count: int) -> str:
    """The ``nvidia.com/gpu.product`` value of ``flavor``'s nodes, the same one the executor
    pod template selects: the spec's ``[kubernetes] gpu_product`` when it names the one GPU
    model of the cluster; else GPU feature discovery's form of the model (NVML's product name
    with ``-`` for spaces: ``A100-SXM4-80GB`` -> ``NVIDIA-A100-SXM4-80GB``)."""
    if spec.kubernetes.gpu_product and count == 1:
        return spec.kubernetes.gpu_product
    model = flavor.gpu_model.strip()
    if not model.upper().startswith(("NVIDIA", "TESLA", "QUADRO")):
        model = f"NVIDIA-{model}"
    return kube_label_value(model)


def kube_label_value(text: str) -> str:
    """``text`` as a label value (letters, digits, ``-_.``; 63 characters at most)."""
    import re

    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")[:63]
    return value.rstrip("-_.") or "unknown"


def kueue_spark_conf(
    spec: ClusterSpec, team: str | None, *, namespace_prefix: str = ""
) -> dict[str, str]:
    """Spark properties that put an application's driver and executor pods on ``team``'s
    LocalQueue (pod labels read by Kueue's pod integration); ``team`` None: on
    :data:`SHARED_QUEUE` in the shared namespace (a spec without teams)."""
    if team is None:
        conf = {"spark.kubernetes.namespace": spec.kubernetes.namespace}
        labels = {QUEUE_LABEL: SHARED_QUEUE}
    else:
        name = kube_name(find_team(spec, team).name)
        conf = {"spark.kubernetes.namespace": namespace_prefix + name}
        labels = {QUEUE_LABEL: name, PRIORITY_LABEL: f"{name}-priority"}
    for role in ("driver", "executor"):
        for label, value in labels.items():
            conf[f"spark.kubernetes.{role}.label.{label}"] = value
    conf["spark.executor.resource.gpu.vendor"] = "nvidia.com"
    conf["spark.dynamicAllocation.enabled"] = "false"
    return conf


def kueue_notes(spec: ClusterSpec, *, api: str = "v1beta2") -> list[str]:
    """What the rendered Kueue objects mean and what they leave to the administrator."""
    field = _cohort_field(api)
    notes = [
        _queues_note(spec),
        f"kueue.x-k8s.io/{api}: the cohort is spec.{field} ('{kube_name(spec.name)}');"
        " --kueue-api picks v1beta1 (cohort) or v1beta2 (cohortName)",
        f"ResourceFlavors select nodes by {GPU_LABEL} (set by NVIDIA GPU feature discovery):"
        " make the values match your nodes' labels",
        "Kueue's SparkApplication integration rejects dynamic allocation: the Spark settings"
        " set spark.dynamicAllocation.enabled=false",
        "plain spark-submit pods are not admitted atomically: Kueue's pod integration (enable"
        " 'pod' in its Configuration) admits the driver and each executor pod on its own, so a"
        " driver can start while its executors wait; use SparkApplication for all-or-nothing",
    ]
    if spec.teams:
        notes.append(
            "create the teams' namespaces before applying kueue.yaml (LocalQueues live in them)"
        )
    return notes


def _queues_note(spec: ClusterSpec) -> str:
    if not spec.teams:
        return (
            f"the spec has no [[teams]]: every job shares one queue, ClusterQueue"
            f" '{SHARED_QUEUE}' with all {spec.total_gpus} GPUs, through its LocalQueue in"
            f" namespace '{spec.kubernetes.namespace}' ([kubernetes] namespace: create it"
            f" first); submit with {SHARED_CONF_FILE}"
        )
    return (
        "nominalQuota = guaranteed GPUs, borrowingLimit = max_gpus - guaranteed; cpu and memory"
        f" go with the GPUs' share of the nodes; '{SHARED_QUEUE}' holds the unguaranteed GPUs"
        " and only lends them"
    )


def render_kueue(
    spec: ClusterSpec, *, api: str = "v1beta2", namespace_prefix: str = ""
) -> dict[str, str]:
    """``kueue.yaml`` (all objects) and one ``spark-kueue-TEAM.conf`` per team (without
    teams: one :data:`SHARED_CONF_FILE` for every job)."""
    notes = kueue_notes(spec, api=api)
    header = [
        f"Kueue quotas for cluster '{spec.name}', rendered by gpuspark from its spec.",
        "Apply with: kubectl apply -f kueue.yaml",
        *(f"Note: {n}" for n in notes),
    ]
    objects = kueue_objects(spec, api=api, namespace_prefix=namespace_prefix)
    files = {KUEUE_FILE: yaml_documents(header, objects)}
    for team in spec.teams:
        conf = kueue_spark_conf(spec, team.name, namespace_prefix=namespace_prefix)
        files[f"spark-kueue-{kube_name(team.name)}.conf"] = spark_conf_text(
            f"Spark on Kubernetes + Kueue settings for team '{team.name}'.", conf
        )
    if not spec.teams:
        files[SHARED_CONF_FILE] = spark_conf_text(
            f"Spark on Kubernetes + Kueue settings for every job (queue '{SHARED_QUEUE}').",
            kueue_spark_conf(spec, None),
        )
    return files
