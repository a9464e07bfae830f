"""Batch prediction on Spark: a table scored with a trained gpuspark model.

:func:`predict` scores a Parquet table (or a Spark DataFrame) with the ``best.pt`` of a
``tabular`` run as a Spark data job (the spec's fractional task GPU amount): rows are encoded
as the training dataset's prep job encoded them (recorded in the checkpoint: no
training/serving skew), the network is loaded once per Python worker and fed bounded Arrow
batches on the task's GPU (or the CPU), rows that cannot be scored go to a quarantine table
with their reason, and the predictions are committed as one Parquet folder.

The modules behind this face: ``model`` (the checkpoint and its preprocessing), ``features``
(the input's columns and the encoding expressions), ``worker`` (what runs in the tasks: the
model cache, the device, the scoring function), ``output`` (the staged, renamed folder) and
``table`` (the job). Import from ``gpuspark.infer``; the layout behind it may change.
"""

from __future__ import annotations

from gpuspark.infer.model import LoadedModel, TabularServing, load_model
from gpuspark.infer.output import MARKER, QUARANTINE_DIR
from gpuspark.infer.table import DEFAULT_BATCH_SIZE, PredictResult, predict

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "MARKER",
    "QUARANTINE_DIR",
    "LoadedModel",
    "PredictResult",
    "TabularServing",
    "load_model",
    "predict",
]
