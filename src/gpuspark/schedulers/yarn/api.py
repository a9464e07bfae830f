"""YARN's ResourceManager REST API, as plain data: ``GET /ws/v1/cluster/scheduler`` (Capacity
Scheduler queues) and ``GET /ws/v1/cluster/apps/{id}`` (``state``, ``diagnostics``), and why an
application waits from those diagnostics (AM resource limits, not yet activated, waiting for
AM resources, empty cluster). Every ``parse_*`` takes the decoded JSON, so tests can feed
recorded documents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuspark.errors import ClusterError
from gpuspark.schedulers.base import Reason, http_json

__all__ = [
    "YARN_GPU",
    "YARN_MESSAGES",
    "YarnQueueUsage",
    "classify_yarn",
    "parse_yarn_scheduler",
    "read_yarn_queues",
    "yarn_app",
]

YARN_GPU = "yarn.io/gpu"
"""YARN's GPU resource type."""


@dataclass
class YarnQueueUsage:
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


def parse_yarn_scheduler(doc: dict[str, Any]) -> list[YarnQueueUsage]:
    """The leaf queues of a ``/ws/v1/cluster/scheduler`` document (Capacity Scheduler)."""
    info = (doc.get("scheduler") or {}).get("schedulerInfo") or {}
    if info.get("type") != "capacityScheduler":
        raise ClusterError(
            f"the ResourceManager runs the {info.get('type', 'unknown')!r} scheduler",
            remedy="gpuspark's YARN quotas are Capacity Scheduler queues (render yarn)",
        )
    leaves: list[YarnQueueUsage] = []
    stack = _children(info)
    while stack:
        queue = stack.pop(0)
        kids = _children(queue)
        if kids:
            stack.extend(kids)
            continue
        leaves.append(
            YarnQueueUsage(
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


def read_yarn_queues(rm_url: str, timeout: float = 5.0) -> list[YarnQueueUsage]:
    """Leaf queues of the ResourceManager at ``rm_url`` (``http://rm:8088``)."""
    return parse_yarn_scheduler(
        http_json(f"{rm_url.rstrip('/')}/ws/v1/cluster/scheduler", timeout=timeout)
    )


def yarn_app(rm_url: str, app_id: str, timeout: float = 5.0) -> dict[str, Any]:
    """The ``app`` object of ``GET /ws/v1/cluster/apps/{app_id}``."""
    doc = http_json(f"{rm_url.rstrip('/')}/ws/v1/cluster/apps/{app_id}", timeout=timeout)
    return dict(doc.get("app") or {})


YARN_MESSAGES: tuple[tuple[str, str, str, str], ...] = (
    (
        "Queue's AM resource limit exceeded.",
        "queue-am-limit",
        "the queue's ApplicationMasters already use its AM share "
        "(maximum-am-resource-percent): the application waits to be activated",
        "wait for the queue's running applications, or raise the queue's "
        "maximum-am-resource-percent",
    ),
    (
        "User's AM resource limit exceeded.",
        "user-am-limit",
        "your ApplicationMasters already use your share of the queue's AM resources "
        "(user-limit-factor)",
        "wait for your other applications, or raise the queue's user-limit-factor",
    ),
    (
        "Skipping AM assignment as cluster resource is empty.",
        "cluster-empty",
        "the cluster has no resources at all: no NodeManager is registered",
        "start the NodeManagers (yarn node -list shows none RUNNING)",
    ),
    (
        "Application is Activated, waiting for resources to be assigned for AM.",
        "waiting-am",
        "the application is admitted to its queue but no node has room for its "
        "ApplicationMaster container now (queue or cluster full)",
        "wait for resources; check the queue's usedCapacity against maximum-capacity",
    ),
    (
        "Application is added to the scheduler and is not yet activated.",
        "not-activated",
        "the queue has not activated the application yet (its limits on running "
        "applications or AM resources are reached)",
        "wait for the queue's running applications to finish, or raise its limits",
    ),
)
"""(diagnostic text, cause, plain words, fix), most specific first."""


def classify_yarn(app: dict[str, Any]) -> Reason:
    """Why a YARN application (the ``app`` object of ``/ws/v1/cluster/apps/{id}``) waits."""
    app_id = str(app.get("id", "?"))
    state = str(app.get("state", ""))
    diagnostics = str(app.get("diagnostics") or "")
    queue = str(app.get("queue", ""))
    if state == "RUNNING":
        return Reason(app_id, state, "running", f"runs in queue {queue!r}", "nothing to do")
    if state in ("FINISHED", "FAILED", "KILLED"):
        return Reason(
            app_id,
            state,
            "finished",
            f"{state.lower()}: {diagnostics or 'no diagnostics'}",
            "nothing to wait for",
        )
    for text, cause, words, fix in YARN_MESSAGES:
        if text in diagnostics:
            return Reason(app_id, state, cause, f"queue {queue!r}: {words}", fix, [diagnostics])
    return Reason(
        app_id,
        state,
        "unknown",
        f"{state} in queue {queue!r}: {diagnostics or 'no diagnostics yet'}",
        "see the ResourceManager UI for the queue's limits",
        [diagnostics] if diagnostics else [],
    )
