"""gpuspark models in MLflow: ``models:/NAME/VERSION`` and ``runs:/RUN_ID/model`` as
``--model``.

``gpuspark train --mlflow`` logs a run's ``best.pt`` as an MLflow model whose
``python_function`` flavour names :mod:`gpuspark.infer.pyfunc` as its ``loader_module`` and
the checkpoint as its ``data`` (:mod:`gpuspark.train.tracking`). :func:`read_model` resolves
a model URI with MLflow (the tracking/registry URI: ``tracking``, else
``MLFLOW_TRACKING_URI``, else ``./mlruns``), downloads the model, checks that it is such a
gpuspark model, and reads its checkpoint: from there batch prediction goes on exactly as for
a ``best.pt`` path.

Resolving a model only reads: a local store (folder, ``sqlite:`` file) that does not exist
is a one-line error, never created (MLflow would create ``./mlruns`` in the working
directory), and a tracking server that does not answer within seconds is a one-line error
(:mod:`gpuspark.train.mlflow_store`).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

from gpuspark.errors import CheckpointError
from gpuspark.infer.model import CheckpointFile, read_checkpoint
from gpuspark.train.mlflow_store import check_server, local_store
from gpuspark.train.tracking import FLAVOR_MODULE, tracking_uri, use_store

__all__ = ["MODEL_SCHEMES", "check_store", "is_model_uri", "model_checkpoint", "read_model"]

MODEL_SCHEMES = ("models:/", "runs:/")
"""The MLflow model URIs ``--model`` takes."""
_REMEDY = "pass the models:/NAME/VERSION that `gpuspark train --mlflow` registered"
_STORE_REMEDY = "pass --mlflow URI or set MLFLOW_TRACKING_URI: the store `train --mlflow` used"


def is_model_uri(model: Any) -> bool:
    """Whether ``model`` is an MLflow model URI (:data:`MODEL_SCHEMES`)."""
    return isinstance(model, str) and model.startswith(MODEL_SCHEMES)


def model_checkpoint(model_dir: str | os.PathLike[str], uri: str) -> Path:
    """The ``best.pt`` of a downloaded MLflow model folder (its ``MLmodel`` file names it as
    the data of the gpuspark ``python_function`` flavour); a one-line error for another
    model."""
    import yaml

    root = Path(model_dir)
    spec_file = root / "MLmodel"
    if not spec_file.is_file():
        raise CheckpointError(
            f"model {uri} is not an MLflow model (no MLmodel file)", remedy=_REMEDY
        )
    flavor = (yaml.safe_load(spec_file.read_text()) or {}).get("flavors", {})
    pyfunc = flavor.get("python_function") or {}
    if pyfunc.get("loader_module") != FLAVOR_MODULE or not pyfunc.get("data"):
        flavors = ", ".join(sorted(flavor)) or "none"
        raise CheckpointError(
            f"model {uri} is not a gpuspark model (flavours: {flavors})", remedy=_REMEDY
        )
    return root / str(pyfunc["data"])


def check_store(store: str, uri: str) -> None:
    """Raise a one-line :class:`~gpuspark.errors.CheckpointError` when the local store
    ``store`` (a :func:`~gpuspark.train.tracking.tracking_uri`) does not exist, so that
    MLflow does not create an empty one only to find no model ``uri`` in it; a
    :class:`~gpuspark.errors.GpusparkError` when its tracking server does not answer."""
    local = local_store(store)
    if local is not None and not local.exists():
        raise CheckpointError(
            f"model {uri} cannot be found: MLflow store {store} does not exist",
            remedy=_STORE_REMEDY,
        )
    check_server(
        store, remedy="start it (`mlflow server`) or pass the --mlflow URI of one that runs"
    )


def read_model(uri: str, tracking: str | None = None) -> CheckpointFile:
    """The checkpoint of the gpuspark MLflow model ``uri``, read as
    :func:`~gpuspark.infer.model.read_checkpoint` reads a path; its ``path`` is ``uri``
    (messages, the predictions' marker and the per-worker cache name the model by it).
    The store is checked first (:func:`check_store`)."""
    store = tracking_uri(tracking)
    check_store(store, uri)
    mlflow = use_store(store, f"--model {uri}")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # predict's own bar
    with tempfile.TemporaryDirectory(prefix="gpuspark-mlflow-") as tmp:
        try:
            local = mlflow.artifacts.download_artifacts(
                artifact_uri=uri, dst_path=tmp, tracking_uri=store
            )
        except Exception as exc:  # MLflow raises many types for a URI it cannot resolve
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise CheckpointError(
                f"model {uri} cannot be found in MLflow store {store} ({first})",
                remedy="check the name and version (`mlflow models` or the MLflow UI), and "
                "--mlflow / MLFLOW_TRACKING_URI",
            ) from None
        ckpt = read_checkpoint(model_checkpoint(local, uri))
    return dataclasses.replace(ckpt, path=Path(uri))
