"""Clients of the schedulers' own APIs, as plain data: Spark standalone, YARN, Kueue.

- **Standalone**: the master's ``/json/`` (workers with ``cores``/``coresfree``,
  ``resources``/``resourcesfree``; ``activeapps`` with ``name``, ``cores``, ``state``,
  ``resourcesperexecutor``) and each worker's ``/json/`` (``executors`` with their ``appid`` and
  GPU ``addresses``: the GPUs an application holds).
- **YARN**: the ResourceManager's ``GET /ws/v1/cluster/scheduler`` (Capacity Scheduler queues)
  and ``GET /ws/v1/cluster/apps/{id}`` (``state``, ``diagnostics``).
- **Kueue**: ``ClusterQueue`` objects (``spec.resourceGroups`` quotas, ``status.flavorsUsage``)
  and ``Workload`` objects (``status.conditions``) through the Kubernetes REST API with a
  bearer token (argument, ``$GPUSPARK_K8S_TOKEN``, or the kubeconfig's current user).

Every ``parse_*`` takes the decoded JSON, so tests can feed recorded documents.
"""

from __future__ import annotations

import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuspark._util.net import http_get_json
from gpuspark.cluster.fit import gpu_count
from gpuspark.errors import ClusterError
from gpuspark.quota.team import app_team

__all__ = [
    "GPU_RESOURCE",
    "KUEUE_API",
    "YARN_GPU",
    "K8sAuth",
    "KueueQueue",
    "StandaloneApp",
    "StandaloneSnapshot",
    "StandaloneWorker",
    "YarnQueue",
    "http_json",
    "k8s_auth",
    "kueue_cluster_queues",
    "kueue_workload",
    "parse_cluster_queue",
    "parse_quantity",
    "parse_standalone",
    "parse_yarn_scheduler",
    "standalone_snapshot",
    "yarn_app",
    "yarn_queues",
]

GPU_RESOURCE = "nvidia.com/gpu"
"""The Kubernetes extended resource of NVIDIA GPUs."""
YARN_GPU = "yarn.io/gpu"
"""YARN's GPU resource type."""
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta1"


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


# -- Spark standalone -----------------------------------------------------------------------


@dataclass
class StandaloneWorker:
    """One worker of a standalone master."""

    id: str
    state: str
    cores: int
    cores_free: int
    memory_mb: int
    memory_free_mb: int
    gpus: int
    gpus_free: int
    web_url: str = ""


@dataclass
class StandaloneApp:
    """One application as the master shows it, with the GPUs its executors hold."""

    id: str
    name: str
    team: str | None
    user: str
    state: str
    cores: int
    """Cores its executors hold now."""
    gpus_per_executor: int
    memory_per_executor_mb: int
    gpus_held: int = 0
    executors: int = 0


@dataclass
class StandaloneSnapshot:
    """A standalone master's workers and active applications at one moment."""

    url: str
    workers: list[StandaloneWorker] = field(default_factory=list)
    apps: list[StandaloneApp] = field(default_factory=list)

    def app(self, key: str) -> StandaloneApp | None:
        """The application whose id or name (tag included or not) is ``key``."""
        for app in self.apps:
            if key in (app.id, app.name) or app.name.split(" [team=")[0] == key:
                return app
        return None


def _per_executor_gpus(app: dict[str, Any]) -> int:
    for entry in app.get("resourcesperexecutor") or []:
        if entry.get("name") == "gpu":
            return int(entry.get("amount", 0))
    return 0


def parse_standalone(
    master: dict[str, Any], workers: dict[str, dict[str, Any]] | None = None, url: str = ""
) -> StandaloneSnapshot:
    """A snapshot from the master's ``/json/`` and the workers' (keyed by web URL)."""
    snap = StandaloneSnapshot(url=url or str(master.get("url", "")))
    for w in master.get("workers") or []:
        snap.workers.append(
            StandaloneWorker(
                id=str(w.get("id", "")),
                state=str(w.get("state", "")),
                cores=int(w.get("cores", 0)),
                cores_free=int(w.get("coresfree", 0)),
                memory_mb=int(w.get("memory", 0)),
                memory_free_mb=int(w.get("memoryfree", 0)),
                gpus=gpu_count(w.get("resources")),
                gpus_free=gpu_count(w.get("resourcesfree")),
                web_url=str(w.get("webuiaddress", "")),
            )
        )
    held: dict[str, list[int]] = {}
    for doc in (workers or {}).values():
        for ex in doc.get("executors") or []:
            held.setdefault(str(ex.get("appid")), []).append(gpu_count(ex.get("resources")))
    for a in master.get("activeapps") or []:
        app_id = str(a.get("id", ""))
        name = str(a.get("name", ""))
        snap.apps.append(
            StandaloneApp(
                id=app_id,
                name=name,
                team=app_team(name),
                user=str(a.get("user", "")),
                state=str(a.get("state", "")),
                cores=int(a.get("cores", 0)),
                gpus_per_executor=_per_executor_gpus(a),
                memory_per_executor_mb=int(a.get("memoryperexecutor", 0)),
                gpus_held=sum(held.get(app_id, [])),
                executors=len(held.get(app_id, [])),
            )
        )
    return snap


def standalone_snapshot(web_url: str, timeout: float = 5.0) -> StandaloneSnapshot:
    """Read a standalone master's ``/json/`` at ``web_url`` (its web UI) and its workers'."""
    base = web_url.rstrip("/")
    master = http_json(f"{base}/json/", timeout=timeout)
    workers: dict[str, dict[str, Any]] = {}
    for w in master.get("workers") or []:
        address = str(w.get("webuiaddress", ""))
        if address and w.get("state") == "ALIVE":
            try:
                workers[address] = http_json(f"{address.rstrip('/')}/json/", timeout=timeout)
            except ClusterError:
                continue  # that worker's executors count 0 GPUs; the master's figures stand
    return parse_standalone(master, workers, url=base)


# -- YARN ----------------------------------------------------------------------------------


@dataclass
class YarnQueue:
    """A Capacity Scheduler leaf queue (percentages as YARN reports them)."""

    name: str
    capacity: float
    used_capacity: float
    max_capacity: float
    absolute_capacity: float
    absolute_used_capacity: float
    absolute_max_capacity: float
    active_apps: int
    pending_apps: int
    gpus_used: int
    state: str = "RUNNING"


def _yarn_gpus(resources: Any) -> int:
    infos = ((resources or {}).get("resourceInformations") or {}).get("resourceInformation") or []
    for info in infos:
        if info.get("name") == YARN_GPU:
            return int(info.get("value", 0))
    return 0


def _children(queue: dict[str, Any]) -> list[dict[str, Any]]:
    queues = queue.get("queues") or {}
    child = queues.get("queue") if isinstance(queues, dict) else None
    if isinstance(child, dict):  # a single child comes as an object in some versions
        return [child]
    return list(child or [])


def parse_yarn_scheduler(doc: dict[str, Any]) -> list[YarnQueue]:
    """The leaf queues of a ``/ws/v1/cluster/scheduler`` document (Capacity Scheduler)."""
    info = (doc.get("scheduler") or {}).get("schedulerInfo") or {}
    if info.get("type") != "capacityScheduler":
        raise ClusterError(
            f"the ResourceManager runs the {info.get('type', 'unknown')!r} scheduler",
            remedy="gpuspark's YARN quotas are Capacity Scheduler queues (render yarn)",
        )
    leaves: list[YarnQueue] = []
    stack = _children(info)
    while stack:
        queue = stack.pop(0)
        kids = _children(queue)
        if kids:
            stack.extend(kids)
            continue
        leaves.append(
            YarnQueue(
                name=str(queue.get("queueName", "")),
                capacity=float(queue.get("capacity", 0)),
                used_capacity=float(queue.get("usedCapacity", 0)),
                max_capacity=float(queue.get("maxCapacity", 0)),
                absolute_capacity=float(queue.get("absoluteCapacity", 0)),
                absolute_used_capacity=float(queue.get("absoluteUsedCapacity", 0)),
                absolute_max_capacity=float(queue.get("absoluteMaxCapacity", 0)),
                active_apps=int(queue.get("numActiveApplications", 0)),
                pending_apps=int(queue.get("numPendingApplications", 0)),
                gpus_used=_yarn_gpus(queue.get("resourcesUsed")),
                state=str(queue.get("state", "RUNNING")),
            )
        )
    return leaves


def yarn_queues(rm_url: str, timeout: float = 5.0) -> list[YarnQueue]:
    """Leaf queues of the ResourceManager at ``rm_url`` (``http://rm:8088``)."""
    return parse_yarn_scheduler(
        http_json(f"{rm_url.rstrip('/')}/ws/v1/cluster/scheduler", timeout=timeout)
    )


def yarn_app(rm_url: str, app_id: str, timeout: float = 5.0) -> dict[str, Any]:
    """The ``app`` object of ``GET /ws/v1/cluster/apps/{app_id}``."""
    doc = http_json(f"{rm_url.rstrip('/')}/ws/v1/cluster/apps/{app_id}", timeout=timeout)
    return dict(doc.get("app") or {})


# -- Kueue -------------------------------------------------------------------------------


@dataclass
class K8sAuth:
    """Where the Kubernetes API is and how to call it."""

    server: str
    token: str | None = None
    ctx: Any = None


def k8s_auth(server: str | None = None, token: str | None = None) -> K8sAuth:
    """``server``/``token`` as given, else ``$GPUSPARK_K8S_TOKEN``, else the kubeconfig's
    (``$KUBECONFIG`` or ``~/.kube/config``) current context: server, token, CA data."""
    token = token or os.environ.get("GPUSPARK_K8S_TOKEN")
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
