"""The demo's report: ``report.json`` figures from the run, ``report.png`` from the history."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuspark import storage
from gpuspark._util.extras import require
from gpuspark.demo.config import DemoConfig

if TYPE_CHECKING:
    from gpuspark.train.recipes import TrainSummary

__all__ = ["AGREE_TOLERANCE", "build_report", "closed_loop", "plot_history", "write_report"]


def build_report(
    cfg: DemoConfig,
    cohort: Any,
    prep: Any,
    summary: TrainSummary,
    timings: dict[str, float],
    scored: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The figures of ``report.json`` from the run's parts; ``scored``: the held-out studies
    scored through ``predict dicom`` (:func:`gpuspark.demo.pipeline.score_held_out`), shown
    next to the in-training test scores (``closed_loop``)."""
    hist = summary.history
    last = hist[-1]
    seconds = sum(m["seconds"] for m in hist)
    parts = {
        k: sum(m[f"{k}_s"] for m in hist)
        for k in ("data_wait", "compute", "comm_exposed", "optimizer", "other")
    }
    comm = summary.comm
    after = summary.comm_after_start
    not_started = _not_started(cfg, comm, after)
    return {
        "config": asdict(cfg),
        "studies": cohort.studies,
        "dicom_files": cohort.files,
        "lesions": cohort.lesions,
        "prep": prep.as_dict(),
        "splits": summary.splits,
        "model": {
            "name": f"resnet{cfg.depth} of MONAI's layout (spatial_dims=3, "
            f"widen_factor={cfg.width}, "
            f"conv1_t_stride={cfg.stem_stride})",
            "window_hu": list(cfg.window),
            "parameters": summary.parameters,
            "input": [1, cfg.volume, cfg.volume, cfg.volume],
        },
        "world_size": summary.world_size,
        "backend": summary.backend,
        "samples_per_s": round(sum(m["samples"] for m in hist) / seconds, 3) if seconds else 0.0,
        "step_time_breakdown": {
            "seconds": {k: round(v, 3) for k, v in parts.items()},
            "fractions": {k: round(v / seconds, 4) if seconds else 0.0 for k, v in parts.items()},
        },
        "bytes": {
            "raw_total": comm["bytes_raw"],
            "sent_total": comm["bytes_sent"],
            "saved_fraction": round(1 - comm["bytes_sent"] / comm["bytes_raw"], 4)
            if comm["bytes_raw"]
            else 0.0,
            "raw_per_step": last["bytes_raw_per_step"],
            "started": not_started is None,
            "not_started_reason": not_started,
            "sent_per_step_after_start": None
            if not_started
            else after["bytes_sent"] // max(1, after["steps"]),
            "sent_over_raw_after_start": None if not_started else round(after["sent_over_raw"], 4),
            "compression": cfg.compression,
            "note": "raw = what the uncompressed all-reduce sends (the gradient buckets)",
        },
        "validation": {k: v for k, v in summary.best.items() if k != "score"},
        "final_val_auc": last.get("val_auc"),
        "test": summary.test,
        "closed_loop": closed_loop(summary.test, scored),
        "history": [
            {
                k: m.get(k)
                for k in ("epoch", "loss", "lr", "samples_per_s", "val_acc", "val_auc", "seconds")
            }
            for m in hist
        ],
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
    }


AGREE_TOLERANCE = 1e-6
"""How far the AUC of ``predict dicom`` on the held-out studies may be from the in-training
test AUC (the same volumes and network: equal up to float rounding in the ranking)."""


def closed_loop(test: dict[str, Any] | None, scored: dict[str, Any] | None) -> dict[str, Any]:
    """The held-out studies scored by ``predict dicom`` next to the in-training test split's
    scores, and whether they agree (AUC within :data:`AGREE_TOLERANCE`, accuracy equal)."""
    if scored is None:
        return {"predict": None, "agree": None}
    test = test or {}
    pairs = [(test.get(k), scored.get(k)) for k in ("auc", "acc")]
    agree = all(
        (a is None and b is None)
        or (a is not None and b is not None and abs(a - b) <= AGREE_TOLERANCE)
        for a, b in pairs
    )
    return {
        "test_auc_in_training": test.get("auc"),
        "predict_dicom_auc": scored.get("auc"),
        "test_acc_in_training": test.get("acc"),
        "predict_dicom_acc": scored.get("acc"),
        "agree": agree and not scored.get("unscored"),
        "predict": scored,
    }


def _not_started(cfg: DemoConfig, comm: dict[str, Any], after: dict[str, Any]) -> str | None:
    """Why PowerSGD never compressed a step (a run shorter than its start step), or ``None``.

    PowerSGD sends plain all-reduces for its first ``powersgd_start_iter`` steps; in a shorter
    run the figures "after start" describe no step at all.
    """
    if cfg.compression != "powersgd" or after.get("steps", 0) > 0:
        return None
    start = cfg.powersgd_start_iter
    run = int(comm.get("steps", start + after.get("steps", 0)))
    return f"powersgd did not start: {run} steps run, start step {start}"


def plot_history(history: list[dict[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write a PNG of training loss and validation AUC per epoch (matplotlib, Agg backend)."""
    matplotlib = require("matplotlib", "plot", "the demo's report")
    matplotlib.use("Agg")
    plt = require("matplotlib.pyplot", "plot", "the demo's report")

    epochs = [m["epoch"] + 1 for m in history]
    fig, ax1 = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax1.plot(epochs, [m["loss"] for m in history], "o-", color="tab:blue", label="train loss")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("train loss", color="tab:blue")
    ax2 = ax1.twinx()
    aucs = [m.get("val_auc") for m in history]
    ax2.plot(epochs, [a if a is not None else float("nan") for a in aucs], "s-", color="tab:red")
    ax2.set_ylabel("validation AUC", color="tab:red")
    ax2.set_ylim(0.0, 1.02)
    ax1.set_title("gpuspark demo: resnet3d on synthetic CT")
    fig.tight_layout()
    final = Path(path)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, final)
    return final


def write_report(report: dict[str, Any], out: Path) -> None:
    """Write ``out/report.json`` (atomically) and ``out/report.png`` (the history plot)."""
    storage.atomic_write_text(out / "report.json", json.dumps(report, indent=2, default=str))
    plot_history(report["history"], out / "report.png")
