"""The Kubernetes API for Kueue, as plain data: ``ClusterQueue`` objects
(``spec.resourceGroups`` quotas, ``status.flavorsUsage``) and ``Workload`` objects
(``status.conditions``) through the REST API with a bearer token (argument,
``$GPUSPARK_K8S_TOKEN``, or the kubeconfig's current user), and why a workload waits from its
conditions (insufficient unused quota in a flavor, a missing LocalQueue, an inactive
ClusterQueue). Every ``parse_*`` takes the decoded JSON, so tests can feed recorded
documents."""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuspark._util import envvars
from gpuspark.errors import ClusterError
from gpuspark.schedulers.base import Reason, http_json

__all__ = [
    "GPU_RESOURCE",
    "KUEUE_API",
    "K8sAuth",
    "KueueQueue",
    "classify_kueue",
    "k8s_auth",
    "kueue_cluster_queues",
    "kueue_workload",
    "parse_cluster_queue",
    "parse_quantity",
]

GPU_RESOURCE = "nvidia.com/gpu"
"""The Kubernetes extended resource of NVIDIA GPUs."""
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta1"


@dataclass
class K8sAuth:
    """Where the Kubernetes API is and how to call it."""

    server: str
    token: str | None = None
    ctx: Any = None


def k8s_auth(server: str | None = None, token: str | None = None) -> K8sAuth:
    """``server``/``token`` as given, else ``$GPUSPARK_K8S_TOKEN``, else the kubeconfig's
    (``$KUBECONFIG`` or ``~/.kube/config``) current context: server, token, CA data."""
    token = token or envvars.K8S_TOKEN.get()
    if server and token:
        return K8sAuth(server.rstrip("/"), token)
    cluster, user = _kubeconfig()
    ctx = None
    if cluster.get("certificate-authority-data"):
        import base64

        ctx = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode("ascii")
        )
    found = server or cluster.get("server")
    if not found:
        raise ClusterError(
            "no Kubernetes API server: none given and no kubeconfig context",
            remedy="pass --master https://host:6443 (or k8s://https://…) and set "
            "GPUSPARK_K8S_TOKEN, or set KUBECONFIG",
        )
    return K8sAuth(str(found).removeprefix("k8s://").rstrip("/"), token or user.get("token"), ctx)


def _kubeconfig() -> tuple[dict[str, Any], dict[str, Any]]:
    path = Path(os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config")
    if not path.exists():
        return {}, {}
    import yaml

    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    current = doc.get("current-context")
    context = _named(doc.get("contexts"), current, "context")
    cluster = _named(doc.get("clusters"), context.get("cluster"), "cluster")
    user = _named(doc.get("users"), context.get("user"), "user")
    return dict(cluster), dict(user or {})


def _named(entries: Any, name: Any, key: str) -> dict[str, Any]:
    """The ``key`` object of the kubeconfig list entry called ``name`` (``{}`` if none)."""
    for entry in entries or []:
        if entry.get("name") == name:
            return dict(entry.get(key) or {})
    return {}


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


def kueue_cluster_queues(auth: K8sAuth, timeout: float = 5.0) -> list[KueueQueue]:
    """Every ClusterQueue of the cluster."""
    doc = http_json(
        f"{auth.server}{KUEUE_API}/clusterqueues", token=auth.token, timeout=timeout, ctx=auth.ctx
    )
    return [parse_cluster_queue(item) for item in doc.get("items") or []]


def kueue_workload(
    auth: K8sAuth, namespace: str, name: str, timeout: float = 5.0
) -> dict[str, Any]:
    """One Workload object (``status.conditions`` say why it waits)."""
    url = f"{auth.server}{KUEUE_API}/namespaces/{namespace}/workloads/{name}"
    return dict(http_json(url, token=auth.token, timeout=timeout, ctx=auth.ctx))


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
    """Why a Kueue Workload waits, from its ``status.conditions``."""
    name = str((workload.get("metadata") or {}).get("name", "?"))
    conditions = (workload.get("status") or {}).get("conditions") or []
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
                return Reason(name, "Pending", cause, words, fix, [message])
    return Reason(
        name,
        "Pending",
        "unknown",
        "; ".join(m for m in messages if m) or "pending, with no condition yet",
        "kubectl describe workload for Kueue's events",
        messages,
    )
