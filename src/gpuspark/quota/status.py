"""Per team: GPUs guaranteed / max / in use now / pending applications, from the live scheduler;
optionally GPU-hours over a window from Prometheus, and a PNG bar chart.

Which scheduler: the backend of the master (``--master``, else the spec's; see
:mod:`gpuspark.schedulers`): YARN reads the ResourceManager (``--url``, else
``$GPUSPARK_YARN_RM``), Kubernetes reads Kueue ClusterQueues through that API server,
standalone a master's web UI (``--url``, the running embedded cluster for ``local-cluster`` or
its ``spark://`` URL, else port 8080 of the master's host). A team's queue (YARN) or
ClusterQueue (Kueue) is named after the team.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from gpuspark import storage
from gpuspark._util.extras import require
from gpuspark.cluster.submit import embedded
from gpuspark.errors import ClusterError
from gpuspark.monitor.names import CUDA_ALLOCATED
from gpuspark.schedulers import NO_TEAM, Target, TeamUsage, backend_for, http_json
from gpuspark.schedulers.kubernetes import kueue_usage
from gpuspark.schedulers.standalone import standalone_usage
from gpuspark.schedulers.yarn import yarn_usage

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = [
    "NO_TEAM",
    "Target",
    "TeamUsage",
    "embedded",
    "gpu_hours",
    "gpu_hours_query",
    "kueue_usage",
    "plot_usage",
    "quota_status",
    "standalone_usage",
    "target",
    "yarn_usage",
]


def target(
    spec: ClusterSpec,
    master: str | None = None,
    url: str | None = None,
    state_dir: str | os.PathLike[str] | None = None,
) -> Target:
    """Which scheduler to ask, and where (see the module's docstring)."""
    where = master or spec.spark.master
    return backend_for(where).target(spec, where, url, embedded(state_dir))


def gpu_hours_query(window: str) -> str:
    """PromQL: GPU-hours per team over ``window``, one GPU per training rank reporting
    CUDA memory (sampled each minute)."""

    ranks = f'count by (team) ({CUDA_ALLOCATED}{{team!=""}})'
    return f"sum by (team) (sum_over_time(({ranks})[{window}:1m])) / 60"


def gpu_hours(prometheus: str, window: str = "24h", timeout: float = 10.0) -> dict[str, float]:
    """GPU-hours per team over ``window`` from the Prometheus at ``prometheus``."""
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
    where = target(spec, master, url, state_dir)
    rows = backend_for(master or spec.spark.master).usage(spec, where)
    if prometheus:
        hours = gpu_hours(prometheus, window)
        for row in rows:
            row.gpu_hours = round(hours.get(row.team, 0.0), 3)
            row.guaranteed_gpu_hours = round(row.guaranteed_gpus * _window_hours(window), 3)
    return where, rows


def plot_usage(rows: list[TeamUsage], path: str | os.PathLike[str], title: str = "") -> Path:
    """A PNG bar chart: per team, GPUs guaranteed / max / in use (and GPU-hours used vs
    guaranteed when known). Written atomically (temp file + rename)."""
    matplotlib = require("matplotlib", "plot", "plotting GPU usage")
    matplotlib.use("Agg")
    plt = require("matplotlib.pyplot", "plot", "plotting GPU usage")

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
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png")
    finally:
        plt.close(fig)
    out = Path(path)
    storage.atomic_write_bytes(out, png.getvalue())
    return out
