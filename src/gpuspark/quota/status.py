"""Per team: GPUs guaranteed / max / in use now / pending applications, from the live scheduler;
optionally GPU-hours over a window from Prometheus, and a PNG bar chart.

Which scheduler: the master (``--master``, else the spec's): ``yarn`` reads the
ResourceManager (``--url``, else ``$GPUSPARK_YARN_RM``), ``k8s://…`` reads Kueue ClusterQueues
through that API server, anything else a Spark standalone master's web UI (``--url``, the
running embedded cluster for ``local-cluster`` or its ``spark://`` URL, else port 8080 of the
master's host). A team's queue (YARN) or ClusterQueue (Kueue) is named after the team.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlparse

from gpuspark.errors import ClusterError

if TYPE_CHECKING:
    from gpuspark.quota.sources import KueueQueue, StandaloneSnapshot, YarnQueue
    from gpuspark.spec import ClusterSpec

__all__ = [
    "NO_TEAM",
    "Target",
    "TeamUsage",
    "gpu_hours",
    "gpu_hours_query",
    "kueue_usage",
    "plot_usage",
    "quota_status",
    "standalone_usage",
    "target",
    "yarn_usage",
]

NO_TEAM = "-"
"""The row of applications that name no team."""


@dataclass
class Target:
    """The scheduler to ask: ``standalone``, ``yarn`` or ``kueue``, at ``url``."""

    kind: str
    url: str
    master_log: str | None = None


@dataclass
class TeamUsage:
    """One team's GPUs now (and over a window when Prometheus answers)."""

    team: str
    guaranteed_gpus: int
    max_gpus: int
    gpus_in_use: float = 0
    running_apps: int = 0
    pending_apps: int = 0
    apps: list[str] = field(default_factory=list)
    gpu_hours: float | None = None
    guaranteed_gpu_hours: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return asdict(self)


def _embedded_target(state_dir: Any, master_url: str | None = None) -> Target | None:
    from gpuspark.cluster.local import LocalCluster

    running = LocalCluster.running(state_dir)
    if running is None or running.state is None:
        return None
    if master_url is not None and running.master_url != master_url:
        return None
    return Target("standalone", running.web_ui or "", running.state.master_log)


def target(
    spec: ClusterSpec,
    master: str | None = None,
    url: str | None = None,
    state_dir: str | os.PathLike[str] | None = None,
) -> Target:
    """Which scheduler to ask, and where (see the module's docstring)."""
    where = master or spec.spark.master
    if where == "yarn":
        rm = url or os.environ.get("GPUSPARK_YARN_RM")
        if not rm:
            raise ClusterError(
                "master=yarn: no ResourceManager address",
                remedy="pass --url http://rm:8088 or set GPUSPARK_YARN_RM",
            )
        return Target("yarn", rm.rstrip("/"))
    if where.startswith("k8s://"):
        return Target("kueue", (url or where.removeprefix("k8s://")).rstrip("/"))
    if url:
        return Target("standalone", url.rstrip("/"))
    embedded = where in ("local-cluster", "embedded")
    if embedded or where.startswith("spark://"):
        found = _embedded_target(state_dir, None if embedded else where)
        if found is not None:
            return found
        if where.startswith("spark://"):
            return Target("standalone", f"http://{urlparse(where).hostname}:8080")
    raise ClusterError(
        f"master={where!r}: no running standalone master to ask",
        remedy="start it (gpuspark cluster up) or pass --master/--url",
    )


def _rows(spec: ClusterSpec) -> dict[str, TeamUsage]:
    return {t.name: TeamUsage(t.name, t.guaranteed_gpus, t.max_gpus) for t in spec.teams}


def standalone_usage(spec: ClusterSpec, snap: StandaloneSnapshot) -> list[TeamUsage]:
    """Per team from a standalone snapshot (applications tagged ``[team=NAME]``)."""
    rows = _rows(spec)
    for app in snap.apps:
        name = app.team if app.team in rows else NO_TEAM
        row = rows.setdefault(name, TeamUsage(NO_TEAM, 0, 0))
        row.gpus_in_use += app.gpus_held
        row.apps.append(app.id)
        if app.state == "WAITING" or not app.executors:
            row.pending_apps += 1
        else:
            row.running_apps += 1
    return list(rows.values())


def _queue_usage(
    spec: ClusterSpec, figures: Mapping[str, tuple[float, int, int]]
) -> list[TeamUsage]:
    """Rows per team from ``queue name -> (GPUs used, running, pending)``; a team's queue is
    named after the team."""
    rows = _rows(spec)
    for name, row in rows.items():
        if name in figures:
            row.gpus_in_use, row.running_apps, row.pending_apps = figures[name]
    return list(rows.values())


def yarn_usage(spec: ClusterSpec, queues: list[YarnQueue]) -> list[TeamUsage]:
    """Per team from the Capacity Scheduler's leaf queues (queue named after the team)."""
    figures = {q.name: (q.gpus_used, q.active_apps, q.pending_apps) for q in queues}
    return _queue_usage(spec, figures)


def kueue_usage(spec: ClusterSpec, queues: list[KueueQueue]) -> list[TeamUsage]:
    """Per team from the ClusterQueues (ClusterQueue named after the team)."""
    figures = {q.name: (q.used_gpus, q.admitted_workloads, q.pending_workloads) for q in queues}
    return _queue_usage(spec, figures)


def gpu_hours_query(window: str) -> str:
    """PromQL: GPU-hours per team over ``window``, one GPU per training rank reporting
    CUDA memory (sampled each minute)."""
    from gpuspark.monitor.names import CUDA_ALLOCATED

    ranks = f'count by (team) ({CUDA_ALLOCATED}{{team!=""}})'
    return f"sum by (team) (sum_over_time(({ranks})[{window}:1m])) / 60"


def gpu_hours(prometheus: str, window: str = "24h", timeout: float = 10.0) -> dict[str, float]:
    """GPU-hours per team over ``window`` from the Prometheus at ``prometheus``."""
    from gpuspark.quota.sources import http_json

    url = f"{prometheus.rstrip('/')}/api/v1/query?query={quote(gpu_hours_query(window))}"
    doc = http_json(url, timeout=timeout)
    if doc.get("status") != "success":
        raise ClusterError(
            f"Prometheus refused the GPU-hours query: {doc.get('error', doc)}",
            remedy="check --prometheus and the window (e.g. 24h, 7d)",
        )
    return {str(r["metric"].get("team", "")): float(r["value"][1]) for r in doc["data"]["result"]}


def _window_hours(window: str) -> float:
    units = {"m": 1 / 60, "h": 1.0, "d": 24.0, "w": 168.0}
    if not window or window[-1] not in units or not window[:-1].isdigit():
        raise ClusterError(
            f"window {window!r} is not a duration", remedy="use e.g. 90m, 24h, 7d or 1w"
        )
    return int(window[:-1]) * units[window[-1]]


def quota_status(
    spec: ClusterSpec,
    *,
    master: str | None = None,
    url: str | None = None,
    prometheus: str | None = None,
    window: str = "24h",
    state_dir: str | os.PathLike[str] | None = None,
) -> tuple[Target, list[TeamUsage]]:
    """Per-team usage now from the live scheduler (and GPU-hours when ``prometheus``)."""
    from gpuspark.quota import sources

    where = target(spec, master, url, state_dir)
    if where.kind == "yarn":
        rows = yarn_usage(spec, sources.yarn_queues(where.url))
    elif where.kind == "kueue":
        rows = kueue_usage(spec, sources.kueue_cluster_queues(sources.k8s_auth(where.url)))
    else:
        rows = standalone_usage(spec, sources.standalone_snapshot(where.url))
    if prometheus:
        hours = gpu_hours(prometheus, window)
        for row in rows:
            row.gpu_hours = round(hours.get(row.team, 0.0), 3)
            row.guaranteed_gpu_hours = round(row.guaranteed_gpus * _window_hours(window), 3)
    return where, rows


def plot_usage(rows: list[TeamUsage], path: str | os.PathLike[str], title: str = "") -> Path:
    """A PNG bar chart: per team, GPUs guaranteed / max / in use (and GPU-hours used vs
    guaranteed when known). Written with temp+rename."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    teams = [r.team for r in rows]
    hours = any(r.gpu_hours is not None for r in rows)
    fig, axes = plt.subplots(1, 2 if hours else 1, figsize=(10 if hours else 6, 4), squeeze=False)
    xs = range(len(teams))
    ax = axes[0][0]
    for offset, label, values in (
        (-0.27, "guaranteed", [r.guaranteed_gpus for r in rows]),
        (0.0, "max", [r.max_gpus for r in rows]),
        (0.27, "in use", [r.gpus_in_use for r in rows]),
    ):
        ax.bar([x + offset for x in xs], values, width=0.27, label=label)
    ax.set_xticks(list(xs), teams)
    ax.set_ylabel("GPUs")
    ax.set_title(title or "GPUs per team now")
    ax.legend()
    if hours:
        ax2 = axes[0][1]
        ax2.bar([x - 0.2 for x in xs], [r.gpu_hours or 0 for r in rows], 0.4, label="used")
        ax2.bar(
            [x + 0.2 for x in xs],
            [r.guaranteed_gpu_hours or 0 for r in rows],
            0.4,
            label="guaranteed",
        )
        ax2.set_xticks(list(xs), teams)
        ax2.set_ylabel("GPU-hours")
        ax2.set_title("GPU-hours over the window")
        ax2.legend()
    fig.tight_layout()
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp")
    fig.savefig(tmp, format="png")
    plt.close(fig)
    os.replace(tmp, out)
    return out
