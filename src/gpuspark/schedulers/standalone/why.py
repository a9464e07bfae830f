"""Why an application waits on a standalone master, from its ``/json/`` and its log: an
executor shape no worker can hold (GPUs or memory per executor above every worker's; the
master logs ``requires more resource than any of Workers could have``), the team at its
``max_gpus`` ceiling, or a full cluster."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpuspark.errors import ClusterError
from gpuspark.schedulers.base import Reason
from gpuspark.schedulers.standalone.api import StandaloneApp, StandaloneSnapshot

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["SHAPE_LOG", "why_standalone"]

SHAPE_LOG = "requires more resource than any of Workers could have"
"""What the standalone master logs for an application no worker can ever hold."""


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
