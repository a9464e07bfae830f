"""Kueue through the Kubernetes API, as plain data: ``ClusterQueue`` objects
(``spec.resourceGroups`` quotas, ``status.flavorsUsage``) and ``Workload`` objects
(``status.conditions``), read in the Kueue API version the server prefers (API discovery of
``/apis/kueue.x-k8s.io``: ``v1beta1`` or ``v1beta2``), and why a workload waits from its
conditions (insufficient unused quota in a flavor, a missing LocalQueue, an inactive
ClusterQueue). The connection and its credentials are :mod:`.client`'s. Every ``parse_*`` and
:func:`classify_kueue` take the decoded JSON of either version, so tests can feed recorded
documents.

Between the two versions (Kueue's ``apis/kueue/v1beta{1,2}``): a ClusterQueue's cohort is
``spec.cohort`` in v1beta1 and ``spec.cohortName`` in v1beta2; a Workload's priority class is
``spec.priorityClassName`` in v1beta1 and ``spec.priorityClassRef.name`` in v1beta2. Quotas,
``status.flavorsUsage``, the workload counts and the conditions are the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpuspark.errors import ClusterError
from gpuspark.schedulers.base import Reason
from gpuspark.schedulers.kubernetes.client import Access, KubeClient

__all__ = [
    "GPU_RESOURCE",
    "KUEUE_GROUP",
    "KUEUE_VERSIONS",
    "KueueQueue",
    "KueueWorkload",
    "classify_kueue",
    "kueue_cluster_queues",
    "kueue_version",
    "kueue_workload",
    "parse_cluster_queue",
    "parse_quantity",
    "parse_workload",
    "pick_kueue_version",
]

GPU_RESOURCE = "nvidia.com/gpu"
"""The Kubernetes extended resource of NVIDIA GPUs."""
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
"""The Kueue API versions gpuspark reads, newest first."""


def pick_kueue_version(group: dict[str, Any]) -> str:
    """The version to read from an ``APIGroup`` discovery document: the server's preferred
    one when gpuspark reads it, else the newest served one it reads."""
    preferred = (group.get("preferredVersion") or {}).get("version")
    if preferred in KUEUE_VERSIONS:
        return str(preferred)
    served = [str(v.get("version")) for v in group.get("versions") or []]
    for version in KUEUE_VERSIONS:
        if version in served:
            return version
    raise ClusterError(
        f"this cluster's Kueue serves {', '.join(served) or 'no version'} of {KUEUE_GROUP}; "
        f"gpuspark reads {' or '.join(KUEUE_VERSIONS)}",
        remedy=f"use a Kueue release that still serves {' or '.join(KUEUE_VERSIONS)}",
    )


def kueue_version(client: KubeClient) -> str:
    """The Kueue API version to read on ``client``'s server (API discovery)."""
    group = client.get_json(
        f"/apis/{KUEUE_GROUP}",
        Access("get", f"/apis/{KUEUE_GROUP}"),  # a non-resource URL, as RBAC names it
        missing=(
            f"Kueue is not installed on {client.server}: it serves no API group {KUEUE_GROUP}",
            "install Kueue, or set spark.kubernetes.scheduler.name in the spec to the queueing "
            "system the cluster has (volcano, yunikorn)",
        ),
    )
    return pick_kueue_version(group)


def parse_quantity(text: Any) -> float:
    """A Kubernetes quantity as a number (``"4"``, ``"500m"``, ``"2Ki"``, ``"1G"``)."""
    value = str(text).strip()
    suffixes = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    binary = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for suffix, factor in binary.items():
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    if value and value[-1] in suffixes:
        return float(value[:-1]) * suffixes[value[-1]]
    return float(value or 0)


@dataclass
class KueueQueue:
    """A ClusterQueue's GPU quota and usage (summed over flavors)."""

    name: str
    nominal_gpus: float
    borrowing_limit_gpus: float | None
    used_gpus: float
    borrowed_gpus: float
    pending_workloads: int
    admitted_workloads: int
    cohort: str | None = None


def parse_cluster_queue(obj: dict[str, Any]) -> KueueQueue:
    """GPU figures of one ClusterQueue object (``nvidia.com/gpu`` over all flavors)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    nominal, limit, limited = 0.0, 0.0, False
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                if res.get("name") == GPU_RESOURCE:
                    nominal += parse_quantity(res.get("nominalQuota", 0))
                    if "borrowingLimit" in res:
                        limited = True
                        limit += parse_quantity(res["borrowingLimit"])
    used = borrowed = 0.0
    for flavor in status.get("flavorsUsage") or []:
        for res in flavor.get("resources") or []:
            if res.get("name") == GPU_RESOURCE:
                used += parse_quantity(res.get("total", 0))
                borrowed += parse_quantity(res.get("borrowed", 0))
    return KueueQueue(
        name=str((obj.get("metadata") or {}).get("name", "")),
        nominal_gpus=nominal,
        borrowing_limit_gpus=limit if limited else None,
        used_gpus=used,
        borrowed_gpus=borrowed,
        pending_workloads=int(status.get("pendingWorkloads", 0)),
        admitted_workloads=int(status.get("admittedWorkloads", 0)),
        cohort=spec.get("cohortName") or spec.get("cohort"),
    )


def kueue_cluster_queues(client: KubeClient, version: str | None = None) -> list[KueueQueue]:
    """Every ClusterQueue of the cluster, in ``version`` (default: the server's choice)."""
    version = version or kueue_version(client)
    doc = client.get_json(
        f"/apis/{KUEUE_GROUP}/{version}/clusterqueues",
        Access("list", f"clusterqueues.{KUEUE_GROUP}"),
    )
    return [parse_cluster_queue(item) for item in doc.get("items") or []]


@dataclass
class KueueWorkload:
    """What a Workload says about where it queues, in either API version."""

    name: str
    namespace: str
    queue: str | None
    """Its LocalQueue (``spec.queueName``)."""
    cluster_queue: str | None
    """The ClusterQueue that reserved its quota (``status.admission.clusterQueue``)."""
    priority_class: str | None
    """v1beta1 ``spec.priorityClassName``, v1beta2 ``spec.priorityClassRef.name``."""
    conditions: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        """One line: the workload and its queues."""
        return (
            f"Workload {self.namespace}/{self.name}: LocalQueue {self.queue or '-'}, "
            f"ClusterQueue {self.cluster_queue or '-'}, priority class {self.priority_class or '-'}"
        )


def parse_workload(obj: dict[str, Any]) -> KueueWorkload:
    """The queueing facts of one Workload object (v1beta1 or v1beta2)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    priority = (spec.get("priorityClassRef") or {}).get("name") or spec.get("priorityClassName")
    return KueueWorkload(
        name=str(meta.get("name", "?")),
        namespace=str(meta.get("namespace", "")),
        queue=spec.get("queueName"),
        cluster_queue=(status.get("admission") or {}).get("clusterQueue"),
        priority_class=priority,
        conditions=list(status.get("conditions") or []),
    )


def kueue_workload(
    client: KubeClient, namespace: str, name: str, version: str | None = None
) -> dict[str, Any]:
    """One Workload object (``status.conditions`` say why it waits)."""
    version = version or kueue_version(client)
    path = f"/apis/{KUEUE_GROUP}/{version}/namespaces/{namespace}/workloads/{name}"
    found = client.get_json(
        path,
        Access("get", f"workloads.{KUEUE_GROUP}", namespace),
        missing=(
            f"no Workload {name} in namespace {namespace} on {client.server}",
            f"list them with: kubectl get workloads.{KUEUE_GROUP} -n {namespace} (a pod's "
            "Workload is named pod-<pod name>-<hash>); pass --namespace of the job",
        ),
    )
    return dict(found)


_KUEUE = (
    (
        re.compile(r"insufficient unused quota for (\S+) in flavor (\S+?),? (\d+\S*) more needed"),
        "quota",
    ),
    (re.compile(r"insufficient quota for (\S+) in flavor (\S+?)[, ]"), "shape"),
    (re.compile(r"LocalQueue (\S+) doesn't exist"), "no-local-queue"),
    (re.compile(r"ClusterQueue (\S+) is inactive"), "inactive-queue"),
)


def _kueue_words(cause: str, groups: tuple[str, ...]) -> tuple[str, str]:
    if cause == "quota":
        return (
            f"the team's ClusterQueue (and its cohort) has no unused {groups[0]} quota in "
            f"flavor {groups[1]}: {groups[2]} more needed",
            "wait for admitted workloads to finish, or lend the cohort more quota",
        )
    if cause == "shape":
        return (
            f"the workload asks more {groups[0]} than flavor {groups[1]} can ever give "
            "(nominal quota + borrowing limit)",
            "ask for fewer GPUs, or raise the ClusterQueue's nominalQuota/borrowingLimit",
        )
    if cause == "no-local-queue":
        return (
            f"the pods name LocalQueue {groups[0]}, which does not exist in their namespace",
            "create it (gpuspark render kueue writes one per team) or fix the queue label",
        )
    return (
        f"ClusterQueue {groups[0]} is inactive (a ResourceFlavor or AdmissionCheck it names "
        "is missing)",
        "create the missing ResourceFlavor (kubectl describe clusterqueue)",
    )


def classify_kueue(workload: dict[str, Any]) -> Reason:
    """Why a Kueue Workload (v1beta1 or v1beta2) waits, from its ``status.conditions``."""
    found = parse_workload(workload)
    name, conditions = found.name, found.conditions
    by_type = {str(c.get("type")): c for c in conditions}
    if by_type.get("Finished", {}).get("status") == "True":
        return Reason(name, "Finished", "finished", "the workload finished", "nothing to do")
    if by_type.get("Admitted", {}).get("status") == "True":
        return Reason(name, "Admitted", "running", "admitted: its pods run", "nothing to do")
    messages = [str(c.get("message", "")) for c in conditions if c.get("status") != "True"]
    for message in messages:
        for pattern, cause in _KUEUE:
            match = pattern.search(message)
            if match:
                words, fix = _kueue_words(cause, match.groups())
                return Reason(name, "Pending", cause, words, fix, [message, found.summary()])
    return Reason(
        name,
        "Pending",
        "unknown",
        "; ".join(m for m in messages if m) or "pending, with no condition yet",
        "kubectl describe workload for Kueue's events",
        [*messages, found.summary()],
    )
