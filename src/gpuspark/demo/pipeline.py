"""The flagship demo: DICOM -> Spark -> shards -> DDP 3D ResNet on the cluster -> report.

One call of :func:`run_demo`:

1. start an embedded Spark standalone cluster (2 workers, simulated GPU slots without GPUs);
2. write a synthetic CT cohort as DICOM (:func:`synth_ct`; a lesion is a +60 HU sphere);
3. ``prep_dicom`` on Spark into volume shards balanced for 2 ranks (train/val/test split);
4. train the ``resnet3d`` recipe on 2 ranks in a Spark barrier stage with PowerSGD;
5. evaluate the best model on the held-out test split;
6. close the loop: score the held-out studies' DICOM files with the trained ``best.pt``
   through ``predict dicom`` (:func:`gpuspark.infer.predict`, the training preprocessing
   read from the checkpoint) and compute their AUC, which must equal the test AUC of step 5;
7. stop the cluster, write ``report.json`` and ``report.png`` (loss and AUC per epoch).

Sizes are chosen to finish within 10 minutes on 2 CPU cores (see :class:`DemoConfig`).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuspark import storage
from gpuspark._util.extras import check_extras
from gpuspark.cluster.local import LocalCluster
from gpuspark.demo.config import DemoConfig
from gpuspark.demo.report import build_report, write_report
from gpuspark.demo.staging import check_output_dir
from gpuspark.demo.synth_ct import load_cohort, synth_ct
from gpuspark.spec import load_spec, resolve_spec

if TYPE_CHECKING:
    from gpuspark.train.recipes.summary import TrainSummary

__all__ = ["run_demo"]


def run_demo(cfg: DemoConfig, *, log: Any = print, spark: Any = None) -> dict[str, Any]:
    """Run the whole demo and return the report (also written to ``<out>/report.json``).

    With ``spark`` (a session on a cluster with 2 GPU slots per executor) the demo runs there
    and no cluster is started or stopped.
    """

    check_extras("the demo", ("pydicom", "dicom"), ("matplotlib", "plot"))
    out = Path(cfg.out).resolve()
    check_output_dir(Path(cfg.out), "output directory")
    if spark is None and cfg.spec is not None:  # a bad spec is refused before anything is written
        load_spec(cfg.spec)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t_all = time.perf_counter()
    if spark is not None:
        cohort, prep, summary, scored = _pipeline(cfg, out, spark, timings, log)
    else:
        cohort, prep, summary, scored = _on_embedded_cluster(cfg, out, timings, log)
    timings["total_s"] = time.perf_counter() - t_all
    report = build_report(cfg, cohort, prep, summary, timings, scored)
    write_report(report, out)
    return report


def _on_embedded_cluster(
    cfg: DemoConfig, out: Path, timings: dict[str, float], log: Any
) -> tuple[Any, Any, TrainSummary, dict[str, Any]]:

    t0 = time.perf_counter()
    spec = resolve_spec(cfg.spec)
    state = out / "cluster"
    cluster = LocalCluster(cfg.workers, cfg.worker_cores(), spec=spec, state_dir=state)
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
) -> tuple[Any, Any, TrainSummary, dict[str, Any]]:
    from gpuspark.data.prep import prep_dicom
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
        overwrite=True,  # the demo's own model folder: an earlier demo's run files are replaced
        test_split="test",
        window=cfg.window,
        stem_stride=cfg.stem_stride,
    )
    t0 = time.perf_counter()
    summary = recipes.run("resnet3d", rcfg, num_processes=2, spark=spark)
    timings["train_s"] = time.perf_counter() - t0
    log(f"train: {len(summary.history)} epochs in {timings['train_s']:.1f} s")
    t0 = time.perf_counter()
    scored = score_held_out(out, spark)
    timings["predict_s"] = time.perf_counter() - t0
    log(f"predict dicom: {_scored_line(scored)} in {timings['predict_s']:.1f} s")
    return cohort, prep, summary, scored


# -- closing the loop: the held-out studies through `predict dicom` ------------------------------


_SERIES_PER_TASK = 32
"""Held-out series per scoring task: the demo's 20 test volumes are one task's work (a few
seconds), while every extra task's Python worker would import torch and load the model."""


def score_held_out(out: Path, spark: Any) -> dict[str, Any]:
    """Score the DICOM files of the test split's series (``out/held-out``, linked from the
    cohort) with ``out/model/best.pt`` through :func:`gpuspark.infer.predict` (kind
    ``dicom``) into ``out/predictions``; their ROC AUC against the labels the shards hold."""
    from gpuspark.infer import predict
    from gpuspark.train import recipes

    labels = _test_labels(out / "shards")
    if not labels:
        return {"series": 0, "quarantined": 0, "unscored": [], "auc": None, "acc": None}
    studies = _link_series(out / "cohort", set(labels), out / "held-out")
    tasks = -(-len(labels) // _SERIES_PER_TASK)  # few tasks: each Python worker loads torch
    res = predict(
        studies, out / "model" / "best.pt", out / "predictions", kind="dicom",
        partitions=tasks, overwrite=True, spark=spark,
    )  # fmt: skip
    probs, predicted = _predictions(out / "predictions")
    ids = sorted(probs)
    auc = recipes.roc_auc([probs[i] for i in ids], [labels[i] == 1 for i in ids])
    hits = sum(predicted[i] == labels[i] for i in ids)
    return {
        "series": res.rows,
        "quarantined": res.quarantined,
        "unscored": sorted(set(labels) - set(probs)),
        "auc": auc,
        "acc": hits / len(ids) if ids else None,
        "rows_per_s": round(res.rows_per_s, 3),
        "output": str(out / "predictions"),
    }


def _test_labels(shards: Path) -> dict[str, int]:
    """Series id -> label of every record of the dataset's ``test`` split."""
    from gpuspark.data.load import ShardDataset, World

    ds = ShardDataset(
        shards, decode="raw", split="test", shuffle=False, drop_last=False, world=World()
    )
    return {str(s["id"]): int(s["label"]) for s in ds}


def _link_series(cohort: Path, series: set[str], dst: Path) -> Path:
    """A folder of the DICOM files of ``series`` (hard links, else copies, in the cohort's
    own layout), built beside ``dst`` and renamed into place (an earlier one replaced)."""
    tmp = storage.new_dir_beside(dst)
    for params in load_cohort(cohort):
        if params.series_uid not in series:
            continue
        for rel in params.files:
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(cohort / "dicom" / rel, target)
            except OSError:
                shutil.copy2(cohort / "dicom" / rel, target)
    storage.swap_into_place(tmp, dst)
    return dst


def _predictions(folder: Path) -> tuple[dict[str, float], dict[str, int]]:
    """Series id -> ``prob_1``, and -> ``prediction``, from the predictions' Parquet files."""
    import pyarrow.dataset as pads

    columns = ["id", "prob_1", "prediction"]
    table = pads.dataset(str(folder), format="parquet").to_table(columns=columns)
    ids = table["id"].to_pylist()
    probs = dict(zip(ids, table["prob_1"].to_pylist(), strict=True))
    return probs, dict(zip(ids, table["prediction"].to_pylist(), strict=True))


def _scored_line(scored: dict[str, Any]) -> str:
    auc = "-" if scored["auc"] is None else f"{scored['auc']:.3f}"
    return f"{scored['series']} held-out series, {scored['quarantined']} quarantined, AUC {auc}"


def _prep_line(prep: Any) -> str:
    return (
        f"{prep.rows} volumes from {prep.inputs} files, {prep.quarantined} quarantined, "
        f"{prep.shards} shards, splits {prep.splits}"
    )
