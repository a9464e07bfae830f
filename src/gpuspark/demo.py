"""The flagship demo: DICOM -> Spark -> shards -> DDP 3D ResNet on the cluster -> report.

One call of :func:`run_demo`:

1. start an embedded Spark standalone cluster (2 workers, simulated GPU slots without GPUs);
2. write a synthetic CT cohort as DICOM (``datasets.synth_ct``; a lesion is a +60 HU sphere);
3. ``prep_dicom`` on Spark into volume shards balanced for 2 ranks (train/val/test split);
4. train the ``resnet3d`` recipe on 2 ranks in a Spark barrier stage with PowerSGD;
5. evaluate the best model on the held-out test split;
6. stop the cluster, write ``report.json`` and ``report.png`` (loss and AUC per epoch).

Sizes are chosen to finish within 10 minutes on 2 CPU cores (see :class:`DemoConfig`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["DemoConfig", "plot_history", "run_demo"]


@dataclass
class DemoConfig:
    """Demo sizes; the defaults are what ``gpuspark demo`` runs."""

    studies: int = 200
    epochs: int = 12
    out: str = "gpuspark-demo"
    seed: int = 0
    image_size: int = 64
    """In-plane pixels of the synthetic DICOM slices."""
    volume: int = 32
    """Prepared volumes are resampled to ``volume``^3 voxels."""
    depth: int = 10
    width: float = 0.25
    """MONAI ResNet ``widen_factor``: 0.25 gives 16/32/64/128 channels."""
    stem_stride: int = 2
    """Stride of the first convolution (MONAI ``conv1_t_stride``)."""
    window: tuple[float, float] = (100.0, 100.0)
    """Training window (level, width) in HU: lesions (+60 HU over 40 HU soft tissue) at 0.5,
    soft tissue and liver near 0."""
    batch_size: int = 8
    lr: float = 2e-3
    compression: str = "powersgd"
    powersgd_rank: int = 2
    powersgd_start_iter: int = 10
    threads: int = 1
    """torch threads per rank (2 ranks on 2 cores)."""
    spec: str | None = None
    """Cluster spec file whose shape the embedded cluster takes (default: the built-in one)."""
    workers: int | None = None
    """Override of the spec's Spark workers."""
    cores: int | None = None
    """Override of the cores each Spark worker offers (task slots follow)."""


def run_demo(cfg: DemoConfig, *, log: Any = print, spark: Any = None) -> dict[str, Any]:
    """Run the whole demo and return the report (also written to ``<out>/report.json``).

    With ``spark`` (a session on a cluster with 2 GPU slots per executor) the demo runs there
    and no cluster is started or stopped.
    """
    out = Path(cfg.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t_all = time.perf_counter()
    if spark is not None:
        cohort, prep, summary = _pipeline(cfg, out, spark, timings, log)
    else:
        cohort, prep, summary = _on_embedded_cluster(cfg, out, timings, log)
    timings["total_s"] = time.perf_counter() - t_all
    report = _report(cfg, cohort, prep, summary, timings)
    _write_json(out / "report.json", report)
    plot_history(summary["history"], out / "report.png")
    return report


def _on_embedded_cluster(
    cfg: DemoConfig, out: Path, timings: dict[str, float], log: Any
) -> tuple[Any, Any, dict[str, Any]]:
    from gpuspark.cluster.local import LocalCluster
    from gpuspark.spec import resolve_spec

    t0 = time.perf_counter()
    spec = resolve_spec(cfg.spec)
    state = out / "cluster"
    cluster = LocalCluster(cfg.workers, cfg.cores, spec=spec, state_dir=state)
    with cluster:
        # One application prepares the data and trains: the training kind of session (dynamic
        # allocation off) still gives data tasks the spec's fractional GPU amount.
        spark = cluster.session(kind="training", app_name="gpuspark-demo")
        timings["cluster_up_s"] = time.perf_counter() - t0
        sim = " (simulated GPU slots)" if cluster.gpus_simulated else ""
        log(f"cluster up at {cluster.master_url}{sim} in {timings['cluster_up_s']:.1f} s")
        try:
            result = _pipeline(cfg, out, spark, timings, log)
        finally:
            spark.stop()
        t0 = time.perf_counter()
    timings["cluster_down_s"] = time.perf_counter() - t0
    log(f"cluster down in {timings['cluster_down_s']:.1f} s")
    return result


def _pipeline(
    cfg: DemoConfig, out: Path, spark: Any, timings: dict[str, float], log: Any
) -> tuple[Any, Any, dict[str, Any]]:
    from gpuspark.data.prep import prep_dicom
    from gpuspark.datasets import synth_ct
    from gpuspark.train import recipes

    t0 = time.perf_counter()
    cohort = synth_ct(
        out / "cohort", studies=cfg.studies, seed=cfg.seed, size=cfg.image_size, overwrite=True
    )
    timings["synth_ct_s"] = time.perf_counter() - t0
    took = timings["synth_ct_s"]
    log(f"synth-ct: {cohort.studies} studies, {cohort.files} DICOM files in {took:.1f} s")
    t0 = time.perf_counter()
    prep = prep_dicom(
        out / "cohort" / "dicom",
        out / "shards",
        labels=out / "cohort" / "labels.csv",
        shape=(cfg.volume,) * 3,
        world_size=2,
        overwrite=True,
        spark=spark,
    )
    timings["prep_s"] = time.perf_counter() - t0
    log(f"prep dicom: {_prep_line(prep)} in {timings['prep_s']:.1f} s")
    rcfg = recipes.RecipeConfig(
        data=str(out / "shards"),
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        compression=cfg.compression,
        powersgd_rank=cfg.powersgd_rank,
        powersgd_start_iter=cfg.powersgd_start_iter,
        depth=cfg.depth,
        width=cfg.width,
        threads=cfg.threads,
        seed=cfg.seed,
        out=str(out / "model"),
        test_split="test",
        window=cfg.window,
        stem_stride=cfg.stem_stride,
    )
    t0 = time.perf_counter()
    summary = recipes.run("resnet3d", rcfg, num_processes=2, spark=spark)
    timings["train_s"] = time.perf_counter() - t0
    log(f"train: {len(summary['history'])} epochs in {timings['train_s']:.1f} s")
    return cohort, prep, summary


def _prep_line(prep: Any) -> str:
    return (
        f"{prep.rows} volumes from {prep.inputs} files, {prep.quarantined} quarantined, "
        f"{prep.shards} shards, splits {prep.splits}"
    )


def _report(
    cfg: DemoConfig, cohort: Any, prep: Any, summary: dict[str, Any], timings: dict[str, float]
) -> dict[str, Any]:
    hist = summary["history"]
    last = hist[-1]
    seconds = sum(m["seconds"] for m in hist)
    parts = {
        k: sum(m[f"{k}_s"] for m in hist)
        for k in ("data_wait", "compute", "comm_exposed", "optimizer", "other")
    }
    comm = summary["comm"]
    after = summary["comm_after_start"]
    return {
        "config": asdict(cfg),
        "studies": cohort.studies,
        "dicom_files": cohort.files,
        "lesions": cohort.lesions,
        "prep": prep.as_dict(),
        "splits": summary["splits"],
        "model": {
            "name": f"MONAI resnet{cfg.depth} (spatial_dims=3, widen_factor={cfg.width}, "
            f"conv1_t_stride={cfg.stem_stride})",
            "window_hu": list(cfg.window),
            "parameters": summary["parameters"],
            "input": [1, cfg.volume, cfg.volume, cfg.volume],
        },
        "world_size": summary["world_size"],
        "backend": summary["backend"],
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
            "sent_per_step_after_start": after["bytes_sent"] // max(1, after["steps"]),
            "sent_over_raw_after_start": round(after["sent_over_raw"], 4),
            "compression": cfg.compression,
            "note": "raw = what the uncompressed all-reduce sends (the gradient buckets)",
        },
        "validation": {k: v for k, v in summary["best"].items() if k != "score"},
        "final_val_auc": last.get("val_auc"),
        "test": summary.get("test"),
        "history": [
            {
                k: m.get(k)
                for k in ("epoch", "loss", "lr", "samples_per_s", "val_acc", "val_auc", "seconds")
            }
            for m in hist
        ],
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
    }


def plot_history(history: list[dict[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write a PNG of training loss and validation AUC per epoch (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    os.replace(tmp, path)
