"""The driver side of a recipe: :func:`preflight` checks the recipe against its dataset and
run directories before any rank starts, and :func:`run` prepares the job (spec, team, what it
writes) and launches :func:`gpuspark.train.recipes.rank.train` on the ranks.

Nothing here depends on which recipe runs: the :class:`~.registry.Recipe` value supplies the
decoder, the class count and the model's shape options.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from gpuspark import launch, storage
from gpuspark._util.extras import check_extras
from gpuspark.cluster.session import JobKind
from gpuspark.cluster.submit import prepare_job
from gpuspark.data import format as fmt
from gpuspark.errors import RecipeError
from gpuspark.train.recipes.config import RecipeConfig
from gpuspark.train.recipes.rank import train
from gpuspark.train.recipes.registry import (
    Recipe,
    check_dataset,
    get_recipe,
    model_config,
)
from gpuspark.train.recipes.run_dirs import check_run_dirs, clear_earlier_run
from gpuspark.train.recipes.summary import TrainSummary
from gpuspark.train.tracking import Tracking, prepare

__all__ = ["check_recipe", "preflight", "resolve_paths", "run"]


def check_recipe(name: str) -> str:
    """Return ``name`` if it is a registered recipe, else raise with the choices."""
    return get_recipe(name).name


def preflight(name: str, cfg: RecipeConfig, *, num_processes: int | None = None) -> Recipe:
    """Check recipe ``name`` against ``cfg.dataset.data`` before any rank starts; return the recipe.

    Reads the dataset's manifest: every sample key the recipe needs must be in every record,
    the options must suit the data (e.g. a re-window needs uint8 volumes) and the class count
    must be known. The checkpoint directory must be usable and, with ``cfg.checkpoint.resume``, its
    newest checkpoint readable and written for the same model (and by ``num_processes``
    ranks, when given). Raises :class:`~gpuspark.errors.RecipeError`, ``CheckpointError``
    (or ``NotADatasetError``).
    """

    recipe = get_recipe(name)
    check_extras(f"the {name} recipe", *recipe.extras)
    manifest = fmt.load_manifest(cfg.dataset.data)
    check_dataset(recipe, manifest, fmt.dataset_root(cfg.dataset.data))
    _check_splits(cfg, manifest.splits)
    recipe.decoder(cfg, manifest)
    classes = recipe.num_classes(cfg, manifest)
    check_run_dirs(cfg, model_config(recipe, cfg, classes), num_processes)
    return recipe


def _check_splits(cfg: RecipeConfig, splits: dict[str, Any]) -> None:
    options = (
        ("train_split", cfg.dataset.train_split, "--train-split all (train on every record)"),
        ("val_split", cfg.dataset.val_split, "--val-split none (no validation)"),
        ("test_split", cfg.dataset.test_split, "no test split"),
    )
    for field_name, split, fallback in options:
        if split is None or split in splits:
            continue
        have = f"its splits: {', '.join(sorted(splits))}" if splits else "it has no splits"
        choices = [*sorted(splits), fallback] if splits else [fallback]
        flag = "--" + field_name.replace("_", "-")
        raise RecipeError(
            f"dataset {cfg.dataset.data} has no split '{split}' for {flag} ({field_name}); {have}",
            remedy="use " + " or ".join(choices),
        )


def resolve_paths(cfg: RecipeConfig) -> RecipeConfig:
    """``cfg`` with local paths made absolute on the driver: ranks start in other working
    directories (a Spark worker's), where a relative path names nothing. URLs stay as they are."""

    def absolute(path: str | None) -> str | None:
        if path is None or storage.is_url(path):
            return path
        return os.path.abspath(os.path.expanduser(storage.local_path(path)))

    ck = cfg.checkpoint
    return dataclasses.replace(
        cfg,
        dataset=dataclasses.replace(
            cfg.dataset, data=absolute(cfg.dataset.data) or cfg.dataset.data
        ),
        checkpoint=dataclasses.replace(
            ck, checkpoint_dir=absolute(ck.checkpoint_dir), out=absolute(ck.out)
        ),
    )


# -- launching -------------------------------------------------------------------------------


def run(
    name: str,
    cfg: RecipeConfig,
    *,
    num_processes: int = 2,
    gpus_per_process: float = 1,
    processes_per_task: int | None = None,
    spark: Any = None,
    master: str | None = None,
    spec: Any = None,
    local: bool = False,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    team: str | None = None,
    metrics_port: int | None = None,
    metrics_host: str | None = None,
    max_restarts: int = 0,
    max_attempts: int = 1,
    collective_timeout: float | None = None,
    min_ranks: int | None = None,
    tracking: Tracking | str | None = None,
) -> TrainSummary:
    """Launch :func:`~.rank.train` on ``num_processes`` ranks and return rank 0's summary.

    The dataset is checked against the recipe first (:func:`preflight`), on this process.
    Ranks run in a Spark barrier stage on ``spark``, else on ``master`` or the spec's master
    (the embedded cluster by default, started for the job when none runs; see
    :func:`gpuspark.cluster.session.job_session`); with ``local=True`` they are plain
    processes of this machine. ``processes_per_task``: ranks per Spark task, i.e. per node
    (default 1; ``LOCAL_WORLD_SIZE``, the shard group of ``strategy="hsdp"``).

    Every rank serves Prometheus metrics on ``metrics_port + local rank`` (default: the
    spec's ``[monitoring]``; 0: off), labelled with ``team`` (one of the spec's ``[[teams]]``).

    ``max_restarts``: the elastic agent restarts the ranks after a rank fails, this many
    times; ``max_attempts``: the whole barrier stage is retried (e.g. after a lost host). A
    restart or retry resumes from the newest checkpoint of ``cfg.checkpoint_dir`` (without
    one it starts over). ``collective_timeout``: seconds a rank waits in one collective for
    its peers (default: the spec's ``[training] collective_timeout_s``). ``min_ranks``:
    elastic, a retry after a lost host runs on the ranks the hosts left hold (at least this
    many), resuming the newest checkpoint with the epoch's rest dealt again to them.

    ``tracking`` (a :class:`~gpuspark.train.tracking.Tracking` or a tracking URI, ``""``:
    ``MLFLOW_TRACKING_URI`` else ``./mlruns``): rank 0 logs the run to MLflow and registers
    its ``best.pt`` as a model (default name: the recipe's); checked here before any rank.
    """

    # before the dataset, the cluster and any rank: the spec (read once), the team (default:
    # the user's) and its cap, what the run writes
    job = prepare_job(
        JobKind.TRAINING,
        spec=spec,
        master=master,
        team=team,
        app_name=f"gpuspark-train-{name}",
        gpus=None if local else num_processes * gpus_per_process,
        writes=(cfg.checkpoint.checkpoint_dir, cfg.checkpoint.out),
    )
    cfg = resolve_paths(cfg)
    recipe = preflight(name, cfg, num_processes=num_processes)
    if tracking is not None:  # MLflow installed and its store usable, before any rank
        tracking = prepare(tracking, model_name=recipe.name, spec=job.spec.name)
    clear_earlier_run(cfg)
    kwargs: dict[str, Any] = {
        "num_processes": num_processes,
        "gpus_per_process": gpus_per_process,
        "processes_per_task": processes_per_task,
        "timeout": timeout,
        "env": {**_store_credentials(cfg), **(env or {})},
        "metrics_port": metrics_port,
        "metrics_host": metrics_host,
        "max_restarts": max_restarts,
        "max_attempts": max_attempts,
        "collective_timeout": collective_timeout,
        "min_ranks": min_ranks,
        "job": job,
    }
    if local:
        return launch.run(train, recipe.name, cfg, tracking, local=True, **kwargs)
    with job.session(spark) as sp:
        return launch.run(train, recipe.name, cfg, tracking, spark=sp, **kwargs)


def _store_credentials(cfg: RecipeConfig) -> dict[str, str]:
    """The storage credential variables of this process, for ranks that read or write a URL
    (the dataset, checkpoints, ``--out``): a running cluster's executors were started with
    their own environment. Secret values are redacted wherever a launch is printed."""
    paths = (cfg.dataset.data, cfg.checkpoint.checkpoint_dir, cfg.checkpoint.out)
    return storage.credential_env() if any(p and storage.is_url(p) for p in paths) else {}
