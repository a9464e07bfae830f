"""Plans as text rows and as a scaling plot (matplotlib, Agg backend, written atomically)."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path

from gpuspark import storage
from gpuspark._util.extras import require
from gpuspark.plan.model import Plan

__all__ = ["breakdown_rows", "format_duration", "plot_scaling", "sweep_rows"]


def format_duration(seconds: float | None) -> str:
    """``93.5 s``, ``4.2 h``, ``3.1 days``; ``-`` for ``None``."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 72 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def breakdown_rows(plan: Plan) -> list[tuple[str, str]]:
    """``(figure, value)`` rows of one plan, per step unless said."""
    src = plan.sources
    return [
        ("GPUs (nodes)", f"{plan.gpus} ({plan.nodes})"),
        ("batch per GPU", f"{plan.per_gpu_batch:g}"),
        ("compute", f"{_ms(plan.compute_s)} [{src.get('compute', '')}]"),
        ("communication (all)", f"{_ms(plan.comm_s)} [{src.get('comm', '')}]"),
        ("communication (exposed)", _ms(plan.exposed_comm_s)),
        ("optimizer", _ms(plan.optimizer_s)),
        ("input wait", f"{_ms(plan.data_s)} (decode {_ms(plan.decode_s)}, "
         f"{src.get('decode', '')})"),
        ("step", _ms(plan.step_s)),
        ("comm share of step", f"{plan.comm_share:.1%}"),
        ("gradient bytes sent / raw", f"{plan.bytes_sent:,} / {plan.bytes_raw:,}"),
        ("samples/s", f"{plan.samples_per_s:,.0f}"),
        ("scaling efficiency", f"{plan.scaling_efficiency:.1%}"),
        ("time to train", format_duration(plan.time_to_train_s)),
        ("bottleneck", plan.bottleneck + (" (input-bound)" if plan.input_bound else "")),
    ]  # fmt: skip


def sweep_rows(plans: Sequence[Plan]) -> list[list[str]]:
    """One row per plan of a sweep: nodes, GPUs, step, comm share, samples/s, efficiency."""
    return [
        [
            str(p.nodes),
            str(p.gpus),
            f"{p.step_s * 1e3:.2f}",
            f"{p.comm_share:.1%}",
            f"{p.samples_per_s:,.0f}",
            f"{p.scaling_efficiency:.1%}",
            format_duration(p.time_to_train_s),
            p.bottleneck,
        ]
        for p in plans
    ]


def plot_scaling(plans: Sequence[Plan], path: str | os.PathLike[str], title: str = "") -> Path:
    """A PNG: samples/s (and the linear ideal) and exposed-communication share vs nodes."""
    matplotlib = require("matplotlib", "plot", "plotting a plan")
    matplotlib.use("Agg")
    plt = require("matplotlib.pyplot", "plot", "plotting a plan")

    nodes = [p.nodes for p in plans]
    ideal = [plans[0].samples_per_s / plans[0].nodes * n for n in nodes]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(nodes, [p.samples_per_s for p in plans], "o-", label="predicted")
    ax1.plot(nodes, ideal, "--", label="linear")
    ax1.set_xlabel("nodes")
    ax1.set_ylabel("samples/s")
    ax1.legend()
    ax2.plot(nodes, [100 * p.comm_share for p in plans], "o-", color="tab:red")
    ax2.set_xlabel("nodes")
    ax2.set_ylabel("exposed communication, % of step")
    fig.suptitle(title or f"{plans[0].model}: predicted scaling")
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png", dpi=100)
    finally:
        plt.close(fig)
    storage.atomic_write_bytes(target, png.getvalue())
    return target
