""":func:`predict`: the one entry of batch prediction. The checkpoint says what it scores (a
``tabular`` model: tables, :mod:`gpuspark.infer.table`; a model trained on DICOM volumes:
folders of DICOM studies, :mod:`gpuspark.infer.dicom`); ``kind`` asserts it."""

from __future__ import annotations

import os
from typing import Any

from gpuspark.data.prep.progress import Progress
from gpuspark.errors import GpusparkError
from gpuspark.infer.dicom import DEFAULT_VOLUME_BATCH, predict_dicom
from gpuspark.infer.mlflow_model import is_model_uri, read_model
from gpuspark.infer.model import SERVED_RECIPES, CheckpointFile, read_checkpoint, recipe_input
from gpuspark.infer.result import PredictResult
from gpuspark.infer.table import DEFAULT_BATCH_SIZE, predict_table

__all__ = ["KINDS", "predict"]

KINDS = ("table", "dicom")
"""What :func:`predict` scores: a table (Parquet, DataFrame) or a folder of DICOM studies."""


def predict(
    source: Any,
    model: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    kind: str | None = None,
    id: str | None = None,
    batch_size: int | None = None,
    partitions: int | None = None,
    overwrite: bool = False,
    spark: Any = None,
    master: str | None = None,
    spec: Any = None,
    team: str | None = None,
    progress: Progress | None = None,
    mlflow: str | None = None,
) -> PredictResult:
    """Score ``source`` with the gpuspark checkpoint ``model`` (a ``best.pt``, or the run
    folder holding it) and commit the predictions as the Parquet folder ``dst``.

    A ``tabular`` checkpoint scores a table (a Parquet file or folder, a URL Spark reads, or
    a Spark DataFrame; see :func:`~gpuspark.infer.table.predict_table`); a checkpoint of a
    recipe trained on ``gpuspark prep dicom`` volumes (``resnet3d``) scores a folder of
    DICOM studies (:func:`~gpuspark.infer.dicom.predict_dicom`). ``kind`` (``"table"`` or
    ``"dicom"``; default: the checkpoint's) makes another checkpoint a one-line error before
    any Spark job. ``batch_size``: rows (default 4,096) or volumes (default 8) per model
    call; ``id``: the column kept with a table's predictions (DICOM predictions are keyed by
    the series UID). The other options as in :func:`~gpuspark.infer.table.predict_table`.

    ``model`` may also be an MLflow model URI, ``models:/NAME/VERSION`` or
    ``runs:/RUN_ID/model``, of a model ``gpuspark train --mlflow`` registered: resolved in the
    MLflow store ``mlflow`` (default: ``MLFLOW_TRACKING_URI``, else ``./mlruns``) to its
    checkpoint, which is then served as a path would be
    (:mod:`gpuspark.infer.mlflow_model`).
    """
    _check_options(kind, batch_size, partitions)
    ckpt = _checkpoint(model, mlflow)
    kind = kind or ("dicom" if recipe_input(ckpt.recipe) == "volume" else "table")
    common: dict[str, Any] = {"partitions": partitions, "overwrite": overwrite, "spark": spark}
    common.update(master=master, spec=spec, team=team, progress=progress)
    if kind == "dicom":
        if id is not None:
            raise GpusparkError(
                f"--id {id} is for tables: DICOM predictions are keyed by the series UID (id)",
                remedy="leave out --id",
            )
        volumes = batch_size or DEFAULT_VOLUME_BATCH
        return predict_dicom(source, ckpt, dst, batch_size=volumes, **common)
    return predict_table(
        source, ckpt, dst, id=id, batch_size=batch_size or DEFAULT_BATCH_SIZE, **common
    )


def _checkpoint(model: str | os.PathLike[str], mlflow: str | None) -> CheckpointFile:
    """The checkpoint ``model`` names: an MLflow model URI resolved, else a path read."""
    if is_model_uri(model):
        return read_model(str(model), mlflow)
    return read_checkpoint(model)


def _check_options(kind: str | None, batch_size: int | None, partitions: int | None) -> None:
    if kind is not None and kind not in KINDS:
        raise GpusparkError(
            f"kind must be one of {', '.join(KINDS)}, got {kind!r}",
            remedy=f"{SERVED_RECIPES[0]} checkpoints score tables; resnet3d ones DICOM studies",
        )
    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise GpusparkError(f"batch_size must be a positive integer, got {batch_size!r}")
    if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
        raise GpusparkError(f"partitions must be a positive integer, got {partitions!r}")
