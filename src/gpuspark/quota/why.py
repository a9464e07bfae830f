"""Why an application waits, in plain words with the fix, from the scheduler's own diagnostics.

- **Standalone** (master ``/json/`` + its log): an executor shape no worker can hold (GPUs or
  memory per executor above every worker's; the master logs ``requires more resource than
  any of Workers could have``), the team at its ``max_gpus`` ceiling, or a full cluster.
- **YARN** (``/ws/v1/cluster/apps/{id}``): ``state`` and the Capacity Scheduler's
  ``diagnostics`` (AM resource limits, not yet activated, waiting for AM resources, empty
  cluster).
- **Kueue** (a Workload's ``status.conditions``): insufficient unused quota in a flavor, a
  missing LocalQueue, an inactive ClusterQueue.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuspark.errors import ClusterError

if TYPE_CHECKING:
    from gpuspark.quota.sources import StandaloneApp, StandaloneSnapshot
    from gpuspark.spec import ClusterSpec

__all__ = [
    "SHAPE_LOG",
    "YARN_MESSAGES",
    "Reason",
    "classify_kueue",
    "classify_yarn",
    "explain",
    "why_standalone",
]

SHAPE_LOG = "requires more resource than any of Workers could have"
"""What the standalone master logs for an application no worker can ever hold."""


@dataclass
class Reason:
    """Why one application waits (or that it does not)."""

    app: str
    state: str
    cause: str
    """``shape``, ``team-ceiling``, ``cluster-full``, ``queue-am-limit``, ``user-am-limit``,
    ``not-activated``, ``waiting-am``, ``cluster-empty``, ``quota``, ``no-local-queue``,
    ``inactive-queue``, ``running``, ``finished``, ``unknown``."""
    message: str
    remedy: str
    evidence: list[str] = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        """Whether the application waits for resources."""
        return self.cause not in ("running", "finished")

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {**asdict(self), "waiting": self.waiting}


# -- standalone ----------------------------------------------------------------------------


def _log_lines(master_log: str | Path | None, app_id: str) -> list[str]:
    if master_log is None or not Path(master_log).exists():
        return []
    text = Path(master_log).read_text(encoding="utf-8", errors="replace")
    return [line.strip() for line in text.splitlines() if app_id in line and SHAPE_LOG in line]


def _shape_reason(app: StandaloneApp, snap: StandaloneSnapshot, logged: list[str]) -> Reason | None:
    alive = [w for w in snap.workers if w.state == "ALIVE"]
    most_gpus = max((w.gpus for w in alive), default=0)
    most_mem = max((w.memory_mb for w in alive), default=0)
    if app.gpus_per_executor > most_gpus:
        what = f"{app.gpus_per_executor} GPUs per executor, but no worker has more than {most_gpus}"
        fix = f"ask for at most {most_gpus} GPUs per executor (spark.executor.resource.gpu.amount)"
    elif app.memory_per_executor_mb > most_mem:
        what = (
            f"{app.memory_per_executor_mb} MB per executor, but no worker has more than "
            f"{most_mem} MB"
        )
        fix = f"set spark.executor.memory to at most {most_mem}m"
    elif logged:
        what = "an executor shape (cores, memory or GPUs) that no worker can hold"
        fix = "lower spark.executor.cores / memory / GPUs to fit one worker"
    else:
        return None
    return Reason(
        app.id,
        app.state,
        "shape",
        f"{app.name} asks {what}: it can never start",
        fix,
        logged[-1:] or [f"master /json/: resourcesperexecutor gpu={app.gpus_per_executor}"],
    )


def _ceiling_reason(
    app: StandaloneApp, snap: StandaloneSnapshot, spec: ClusterSpec | None
) -> Reason | None:
    if spec is None or not app.team:
        return None
    team = next((t for t in spec.teams if t.name == app.team), None)
    if team is None:
        return None
    others = [a for a in snap.apps if a.team == app.team and a.id != app.id and a.gpus_held]
    held = sum(a.gpus_held for a in others)
    if held + max(app.gpus_per_executor, 1) <= team.max_gpus:
        return None
    names = ", ".join(f"{a.id} ({a.gpus_held})" for a in others)
    return Reason(
        app.id,
        app.state,
        "team-ceiling",
        f"team {team.name!r} is at its ceiling: it holds {held} of max_gpus {team.max_gpus} "
        f"GPUs ({names}); one more executor needs {app.gpus_per_executor}",
        f"wait for the team's other applications to finish, or raise {team.name!r}'s max_gpus",
        [f"{a.id} {a.name}: {a.gpus_held} GPUs" for a in others],
    )


def _full_reason(app: StandaloneApp, snap: StandaloneSnapshot) -> Reason | None:
    fits = [
        w
        for w in snap.workers
        if w.state == "ALIVE"
        and w.cores_free > 0
        and w.gpus_free >= app.gpus_per_executor
        and w.memory_free_mb >= app.memory_per_executor_mb
    ]
    if fits:
        return None
    holders = [a for a in snap.apps if a.gpus_held and a.id != app.id]
    return Reason(
        app.id,
        app.state,
        "cluster-full",
        f"no worker has {app.gpus_per_executor} free GPUs and a free core now: "
        + (", ".join(f"{a.name} holds {a.gpus_held}" for a in holders) or "all are taken"),
        "wait: standalone runs applications first come, first served",
        [f"{w.id}: {w.gpus_free} GPUs, {w.cores_free} cores free" for w in snap.workers],
    )


def why_standalone(
    snap: StandaloneSnapshot,
    key: str,
    spec: ClusterSpec | None = None,
    master_log: str | Path | None = None,
) -> Reason:
    """Why application ``key`` (id or name) waits on a standalone master."""
    app = snap.app(key)
    if app is None:
        listed = ", ".join(f"{a.id} ({a.name})" for a in snap.apps) or "none"
        raise ClusterError(
            f"no active application {key!r} on {snap.url} (active: {listed})",
            remedy="pass an application id or name from `gpuspark quota status`",
        )
    logged = _log_lines(master_log, app.id)
    shape = _shape_reason(app, snap, logged)
    if shape is not None:
        return shape
    if app.state == "RUNNING" and app.cores > 0:
        return Reason(
            app.id,
            app.state,
            "running",
            f"{app.name} runs: {app.executors} executors, {app.gpus_held} GPUs",
            "nothing to do",
        )
    for check in (_ceiling_reason(app, snap, spec), _full_reason(app, snap)):
        if check is not None:
            return check
    return Reason(
        app.id,
        app.state,
        "unknown",
        f"{app.name} is {app.state} with free workers: executors are probably starting",
        "look again in a few seconds; see the master log if it stays so",
    )


# -- YARN --------------------------------------------------------------------------------

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


# -- Kueue -------------------------------------------------------------------------------

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


def explain(
    spec: ClusterSpec,
    app: str,
    *,
    master: str | None = None,
    url: str | None = None,
    namespace: str = "default",
    state_dir: str | os.PathLike[str] | None = None,
) -> Reason:
    """Why ``app`` waits on the live scheduler of ``master`` (see
    :func:`gpuspark.quota.status.target`): a standalone application id or name, a YARN
    application id, or a Kueue Workload name in ``namespace``."""
    from gpuspark.quota import sources
    from gpuspark.quota.status import target

    where = target(spec, master, url, state_dir)
    if where.kind == "yarn":
        return classify_yarn(sources.yarn_app(where.url, app))
    if where.kind == "kueue":
        return classify_kueue(sources.kueue_workload(sources.k8s_auth(where.url), namespace, app))
    snap = sources.standalone_snapshot(where.url)
    return why_standalone(snap, app, spec, where.master_log)
