"""The flagship demo: DICOM -> Spark -> shards -> DDP 3D ResNet on the cluster -> report.

One call of :func:`run_demo`:

1. start an embedded Spark standalone cluster (2 workers, simulated GPU slots without GPUs);
2. write a synthetic CT cohort as DICOM (:func:`synth_ct`; a lesion is a +60 HU sphere);
3. ``prep_dicom`` on Spark into volume shards balanced for 2 ranks (train/val/test split);
4. train the ``resnet3d`` recipe on 2 ranks in a Spark barrier stage with PowerSGD;
5. evaluate the best model on the held-out test split;
6. stop the cluster, write ``report.json`` and ``report.png`` (loss and AUC per epoch).

Sizes are chosen to finish within 10 minutes on 2 CPU cores (see :class:`DemoConfig`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuspark.cluster.local import LocalCluster
from gpuspark.demo.config import DemoConfig
from gpuspark.demo.report import build_report, write_report
from gpuspark.demo.staging import check_output_dir
from gpuspark.demo.synth_ct import synth_ct
from gpuspark.spec import load_spec, resolve_spec

if TYPE_CHECKING:
    from gpuspark.train.recipes.summary import TrainSummary

__all__ = ["run_demo"]


def run_demo(cfg: DemoConfig, *, log: Any = print, spark: Any = None) -> dict[str, Any]:
    """Run the whole demo and return the report (also written to ``<out>/report.json``).

    With ``spark`` (a session on a cluster with 2 GPU slots per executor) the demo runs there
    and no cluster is started or stopped.
    """

    out = Path(cfg.out).resolve()
    check_output_dir(Path(cfg.out), "output directory")
    if spark is None and cfg.spec is not None:  # a bad spec is refused before anything is written
        load_spec(cfg.spec)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t_all = time.perf_counter()
    if spark is not None:
        cohort, prep, summary = _pipeline(cfg, out, spark, timings, log)
    else:
        cohort, prep, summary = _on_embedded_cluster(cfg, out, timings, log)
    timings["total_s"] = time.perf_counter() - t_all
    report = build_report(cfg, cohort, prep, summary, timings)
    write_report(report, out)
    return report


def _on_embedded_cluster(
    cfg: DemoConfig, out: Path, timings: dict[str, float], log: Any
) -> tuple[Any, Any, TrainSummary]:

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
) -> tuple[Any, Any, TrainSummary]:
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
    return cohort, prep, summary


def _prep_line(prep: Any) -> str:
    return (
        f"{prep.rows} volumes from {prep.inputs} files, {prep.quarantined} quarantined, "
        f"{prep.shards} shards, splits {prep.splits}"
    )
