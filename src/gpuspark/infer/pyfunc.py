"""The ``python_function`` flavour of the models ``gpuspark train --mlflow`` registers: this
module is their ``loader_module`` (:data:`gpuspark.train.tracking.FLAVOR_MODULE`).

:func:`_load_pyfunc` is MLflow's entry (``mlflow.pyfunc.load_model(URI)``): the returned
object's ``predict`` scores a pandas DataFrame (or a Parquet path, or for a model trained on
DICOM volumes a folder of studies) through :func:`gpuspark.infer.predict`, i.e. as a Spark
job (this process's active session, else the one session path), and returns the predictions
as a pandas DataFrame.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from gpuspark.infer.predict import predict

__all__ = ["GpusparkPyfunc"]


class GpusparkPyfunc:
    """What ``mlflow.pyfunc.load_model`` returns for a gpuspark model: its ``best.pt``."""

    def __init__(self, checkpoint: str | os.PathLike[str]) -> None:
        self.checkpoint = str(checkpoint)

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> Any:
        """Score ``model_input`` (a pandas DataFrame, or the path of a Parquet table or of
        a folder of DICOM studies) with :func:`gpuspark.infer.predict`; the predictions as
        a pandas DataFrame (rows in the order the job wrote them: sort by your id).
        ``params`` are :func:`~gpuspark.infer.predict`'s options (``id``, ``batch_size``,
        ``partitions``)."""
        import pyarrow.dataset as ds

        options = dict(params or {})
        spark = _active_spark()
        with tempfile.TemporaryDirectory(prefix="gpuspark-pyfunc-") as tmp:
            source = _source(model_input, spark, Path(tmp))
            out = Path(tmp) / "predictions"
            predict(source, self.checkpoint, out, spark=spark, **options)
            return ds.dataset(str(out), format="parquet").to_table().to_pandas()


def _source(model_input: Any, spark: Any, tmp: Path) -> Any:
    """What :func:`~gpuspark.infer.predict` reads: a path as it is; a pandas DataFrame as a
    Spark DataFrame of the active session, else as a Parquet file in ``tmp`` (read by the
    session ``predict`` opens)."""
    if isinstance(model_input, str | os.PathLike):
        return model_input
    if spark is not None:
        return spark.createDataFrame(model_input)
    path = str(tmp / "input.parquet")
    model_input.to_parquet(path, index=False)
    return path


def _active_spark() -> Any:
    """This process's active Spark session, if any (else ``predict`` opens its own)."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def _load_pyfunc(data_path: str) -> GpusparkPyfunc:
    """MLflow's ``loader_module`` entry: ``data_path`` is the model's ``best.pt``."""
    return GpusparkPyfunc(data_path)
