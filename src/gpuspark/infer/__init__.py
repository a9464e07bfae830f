"""Batch prediction on Spark: tables and DICOM studies scored with a trained gpuspark model.

:func:`predict` scores a Parquet table (or a Spark DataFrame) with the ``best.pt`` of a
``tabular`` run, or a folder of new DICOM studies with the ``best.pt`` of a ``resnet3d`` run,
as a Spark data job (the spec's fractional task GPU amount): inputs are prepared exactly as
the training dataset's prep job prepared them (recorded in the checkpoint: no
training/serving skew), the network is loaded once per Python worker and fed bounded Arrow
batches on the task's GPU (or the CPU), rows and files that cannot be scored go to a
quarantine table with their reason, and the predictions are committed as one Parquet folder.

The modules behind this face: ``model`` (the checkpoint, its lineage, a ``tabular`` model and
its encoding), ``volume`` (a model trained on DICOM volumes and its preprocessing),
``export`` (a
``tabular`` model as a TorchScript or ``torch.export`` file), ``features`` (a table's columns
and the encoding expressions), ``worker`` (what runs in the
tasks: the model cache, the device, the table scoring function), ``table`` and ``dicom``
(the jobs), ``output`` (the staged, renamed folder), ``result`` and ``predict`` (the entry),
``mlflow_model`` (``models:/`` and ``runs:/`` URIs resolved to their checkpoint) and
``pyfunc`` (the MLflow ``python_function`` flavour of ``gpuspark train --mlflow``'s models).
Import from ``gpuspark.infer``; the layout behind it may change.
"""

from __future__ import annotations

from gpuspark.infer.dicom import DEFAULT_VOLUME_BATCH, predict_dicom
from gpuspark.infer.export import export_model
from gpuspark.infer.model import LoadedModel, TabularServing, load_model
from gpuspark.infer.output import MARKER, QUARANTINE_DIR
from gpuspark.infer.predict import KINDS, predict
from gpuspark.infer.result import PredictResult
from gpuspark.infer.table import DEFAULT_BATCH_SIZE, predict_table
from gpuspark.infer.volume import VolumeModel, load_volume_model

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_VOLUME_BATCH",
    "KINDS",
    "MARKER",
    "QUARANTINE_DIR",
    "LoadedModel",
    "PredictResult",
    "TabularServing",
    "VolumeModel",
    "export_model",
    "load_model",
    "load_volume_model",
    "predict",
    "predict_dicom",
    "predict_table",
]
