"""MLflow tracking of a training run (``gpuspark train --mlflow``, ``fit(..., tracking=...)``).

:class:`Tracking` says where a run is tracked: a tracking URI (a local folder, i.e. MLflow's
file store, ``sqlite:///...`` or ``http(s)://...``), the experiment and the registered
model's name. It is plain data, sent to the ranks. :func:`prepare` checks it on the driver
before any rank starts (MLflow installed, a tracking server answering within seconds, the
store usable) and makes local paths absolute (ranks start in other working directories).
MLflow's HTTP client is bounded wherever it is used (:mod:`gpuspark.train.mlflow_store`): a
server that is gone costs seconds, not minutes of retries.

Rank 0, and only rank 0, opens a :class:`TrackedRun` (:func:`start`): it logs the run's
parameters, one set of metrics per epoch (:meth:`TrackedRun.log_epoch`, the numbers of the
epoch report: loss, validation scores, samples/s, bytes sent and saved, the step-time
breakdown), and at the end the final checkpoint and report as artifacts and ``best.pt`` as a
registered MLflow model (:meth:`TrackedRun.log_model`) whose ``python_function`` flavour is
:mod:`gpuspark.infer.pyfunc` (named by its module path: ``train`` does not import
``infer``), so ``gpuspark predict --model models:/NAME/VERSION`` scores with it.

A run that writes checkpoints records its MLflow run in the checkpoint directory
(:data:`RUN_FILE`); a resume of that run (``--resume``, or a restart that continues from the
newest checkpoint) reopens the same MLflow run instead of opening a new one, so its epochs go
on at their own steps in one run (:func:`start` with ``folder`` and ``resume``).

MLflow is imported inside the functions that use it: the ``[mlflow]`` extra is optional.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark._util.extras import require
from gpuspark.errors import GpusparkError
from gpuspark.train.checkpoint_dir import latest
from gpuspark.train.mlflow_record import RUN_FILE, earlier_run, record_run, recorded_run, resumes
from gpuspark.train.mlflow_store import bound_http_client, check_server

__all__ = [
    "DEFAULT_STORE",
    "EXPERIMENT",
    "FIT_PARAMS",
    "FLAVOR_MODULE",
    "MODEL_ARTIFACT",
    "RUN_FILE",
    "TrackedRun",
    "Tracking",
    "epoch_values",
    "finish_recipe_run",
    "fit_run",
    "flat_params",
    "import_mlflow",
    "prepare",
    "recorded_run",
    "start",
    "tracking_uri",
]

log = logging.getLogger(__name__)

DEFAULT_STORE = "./mlruns"
"""The tracking URI of ``--mlflow`` without a value when ``MLFLOW_TRACKING_URI`` is unset."""
EXPERIMENT = "gpuspark"
"""The experiment runs are logged to unless :attr:`Tracking.experiment` names another."""
FLAVOR_MODULE = "gpuspark.infer.pyfunc"
"""The ``loader_module`` of the logged model's ``python_function`` flavour."""
MODEL_ARTIFACT = "model"
"""The logged model's name in its run (``runs:/RUN_ID/model``)."""
_FILE_STORE_OPT_IN = "MLFLOW_ALLOW_FILE_STORE"
_NAMED_STORES = ("databricks", "databricks-uc", "uc", "sqlite")
_SERVER_REMEDY = (
    "start it (`mlflow server`), pass the --mlflow URI of one that runs, or drop --mlflow"
)
FIT_PARAMS = ("epochs", "accum_steps", "checkpoint_every", "scheduler_interval", "model_config")
"""The ``FitConfig`` fields a run of :func:`gpuspark.train.fit` logs as parameters."""


@dataclass(frozen=True)
class Tracking:
    """Where and under which names a training run is tracked in MLflow (plain data)."""

    uri: str | None = None
    """Tracking URI: a local folder (file store), ``file:``, ``sqlite:///``, ``http(s)://``;
    ``None``: ``MLFLOW_TRACKING_URI``, else :data:`DEFAULT_STORE`."""
    model_name: str | None = None
    """Registered model name (default: the recipe's name)."""
    experiment: str = EXPERIMENT
    """MLflow experiment of the run."""
    run_name: str | None = None
    """MLflow run name (default: MLflow's)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Parameters the driver adds (e.g. the spec's name)."""


def tracking_uri(value: str | None) -> str:
    """The tracking URI ``value`` names, usable from any working directory: ``None`` or
    ``""`` -> ``MLFLOW_TRACKING_URI``, else :data:`DEFAULT_STORE`; a local path or ``file:``
    URI -> an absolute path; ``sqlite:///relative.db`` -> ``sqlite:////abs/relative.db``;
    anything else (``http://``, ``https://``, ``databricks``, ...) as it is."""
    text = value or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_STORE
    if text.startswith("sqlite:///") and not text.startswith("sqlite:////"):
        return "sqlite:///" + os.path.abspath(text[len("sqlite:///") :])
    if text.startswith("file:"):
        text = text[len("file:") :].removeprefix("//")
    if "://" in text or storage.is_url(text) or text.split(":")[0] in _NAMED_STORES:
        return text
    return os.path.abspath(os.path.expanduser(text))


def is_file_store(uri: str) -> bool:
    """Whether ``uri`` (from :func:`tracking_uri`) is MLflow's file store (a local folder)."""
    return uri.startswith("/")


def import_mlflow(purpose: str = "MLflow tracking") -> Any:
    """The ``mlflow`` module, else the one-line error of ``purpose`` needing the
    ``[mlflow]`` extra (:func:`gpuspark._util.extras.require`)."""
    return require("mlflow", "mlflow", purpose)


def use_store(uri: str, purpose: str = "MLflow tracking") -> Any:
    """``mlflow`` with ``uri`` as its tracking and registry URI, its HTTP client bounded
    (:func:`~gpuspark.train.mlflow_store.bound_http_client`). MLflow 3 refuses its file
    store unless ``MLFLOW_ALLOW_FILE_STORE`` is set: a folder given as ``--mlflow`` is that
    explicit choice, so it is set here (this process and the ranks it starts)."""
    mlflow = import_mlflow(purpose)
    bound_http_client()
    if is_file_store(uri):
        os.environ.setdefault(_FILE_STORE_OPT_IN, "true")
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    return mlflow


def prepare(tracking: Tracking | str | None, *, model_name: str, **params: Any) -> Tracking:
    """``tracking`` checked on the driver before any rank starts: MLflow installed, the URI
    absolute (:func:`tracking_uri`), a tracking server answering within a few seconds
    (:func:`~gpuspark.train.mlflow_store.check_server`), the store usable (its experiment
    found or created), the model name defaulted to ``model_name``, ``params`` added. A
    string is a URI."""
    if not isinstance(tracking, Tracking):
        tracking = Tracking(uri=tracking)
    tracking = replace(
        tracking,
        uri=tracking_uri(tracking.uri),
        model_name=tracking.model_name or model_name,
        params={**tracking.params, **{k: v for k, v in params.items() if v is not None}},
    )
    check_server(str(tracking.uri), remedy=_SERVER_REMEDY)
    mlflow = use_store(str(tracking.uri), "train --mlflow")
    try:
        mlflow.set_experiment(tracking.experiment)
    except Exception as exc:  # MLflow raises many types for a store it cannot use
        raise GpusparkError(
            f"MLflow store {tracking.uri} cannot be used ({_first_line(exc)})",
            remedy="check --mlflow (a folder, sqlite:///FILE.db or http://HOST:PORT)",
        ) from None
    return tracking


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {text}"


# -- what is logged ----------------------------------------------------------------------------


def flat_params(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested ``values`` as MLflow parameters: ``{"optim": {"lr": 0.001}}`` ->
    ``{"optim.lr": "0.001"}``; ``None`` and empty groups left out; text cut to 6,000
    characters (MLflow's limit is 6,000)."""
    out: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_params(value, f"{name}."))
        elif value is not None:
            text = json.dumps(value) if isinstance(value, list | tuple) else str(value)
            out[name] = text[:6000]
    return out


def epoch_values(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of one epoch's report (:func:`gpuspark.train.metrics.epoch_metrics`) as
    MLflow metrics: every finite number but ``epoch`` (the step), the fractions as
    ``fraction_<part>``, the memory as ``memory_<part>``, and ``bytes_saved`` (raw minus
    sent gradient bytes: what compression saved)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if key == "epoch":
            continue
        if key in ("fractions", "memory") and isinstance(value, Mapping):
            prefix = "fraction" if key == "fractions" else key
            out.update({f"{prefix}_{k}": float(v) for k, v in value.items() if _number(v)})
        elif _number(value):
            out[key] = float(value)
    if "bytes_raw" in out and "bytes_sent" in out:
        out["bytes_saved"] = out["bytes_raw"] - out["bytes_sent"]
    return out


def _number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)


# -- rank 0's run ------------------------------------------------------------------------------


class TrackedRun:
    """An open MLflow run of rank 0; every call logs to it (see the module docstring)."""

    def __init__(self, tracking: Tracking, run_id: str, *, resumed: bool = False) -> None:
        self.tracking = tracking
        self.run_id = run_id
        self.resumed = resumed
        """Whether this run continues one an earlier start opened (a resume)."""
        self.model_uri: str | None = None
        self.model_version: str | None = None

    def _client(self) -> Any:
        """An ``MlflowClient`` of the run's store."""
        return use_store(str(self.tracking.uri)).MlflowClient()

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log nested ``params`` (:func:`flat_params`)."""
        param = require("mlflow.entities", "mlflow", "MLflow tracking").Param
        client = self._client()
        items = [param(k, v) for k, v in flat_params(params).items()]
        for i in range(0, len(items), 100):  # MLflow's batch limit: 100 parameters
            client.log_batch(self.run_id, params=items[i : i + 100])

    def log_resumed_params(self, params: Mapping[str, Any]) -> None:
        """Log nested ``params`` to a run that already has parameters (a resume): the new
        ones as parameters; one whose value changed (MLflow never changes a parameter) as the
        tag ``gpuspark.resumed.<name>`` holding the value the resume ran with."""
        client = self._client()
        before = client.get_run(self.run_id).data.params
        now = flat_params(params)
        self.log_params({k: v for k, v in now.items() if k not in before})
        changed = {k: v for k, v in now.items() if k in before and before[k] != v}
        for key, value in changed.items():
            client.set_tag(self.run_id, f"gpuspark.resumed.{key}", value[:5000])

    def log_epoch(self, metrics: Mapping[str, Any]) -> None:
        """One epoch's numbers (:func:`epoch_values`) at step ``metrics["epoch"]``."""
        self.log_metrics(epoch_values(metrics), step=int(metrics.get("epoch", 0)))

    def log_metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        """Log ``values`` (name -> number) at ``step``."""
        import time

        metric = require("mlflow.entities", "mlflow", "MLflow tracking").Metric
        client = self._client()
        now = int(time.time() * 1000)
        items = [metric(k, float(v), now, step or 0) for k, v in values.items() if _number(v)]
        for i in range(0, len(items), 1000):  # MLflow's batch limit: 1,000 metrics
            client.log_batch(self.run_id, metrics=items[i : i + 1000])

    def log_artifact(
        self, path: str | os.PathLike[str] | storage.RemotePath, artifact_path: str | None = None
    ) -> None:
        """Log the file or folder ``path`` (under ``artifact_path``), if it exists."""
        where = storage.as_path(path)
        if not (storage.is_dir(where) or storage.is_file(where)):
            return
        with storage.local_copy(where) as p:  # MLflow uploads local files only
            if p.is_dir():
                self._client().log_artifacts(self.run_id, str(p), artifact_path)
            else:
                self._client().log_artifact(self.run_id, str(p), artifact_path)

    def log_report(self, report: Mapping[str, Any], name: str = "report.json") -> None:
        """Log ``report`` (plain data) as the JSON artifact ``name``."""
        with tempfile.TemporaryDirectory(prefix="gpuspark-mlflow-") as tmp:
            file = Path(tmp) / name
            file.write_text(json.dumps(report, indent=2, default=str))
            self.log_artifact(file)

    def log_model(self, best: str | os.PathLike[str] | storage.RemotePath, step: int = 0) -> str:
        """Log ``best`` (a ``best.pt``) as the model :data:`MODEL_ARTIFACT` of this run with
        the gpuspark ``python_function`` flavour, registered as :attr:`Tracking.model_name`;
        returns ``models:/NAME/VERSION``. MLflow 3 links the run's metrics of ``step`` (the
        best epoch) to the logged model (the file store lists them once more in the run)."""
        from importlib.metadata import PackageNotFoundError, version

        mlflow = use_store(str(self.tracking.uri))
        try:
            requirements = [f"gpuspark=={version('gpuspark')}"]
        except PackageNotFoundError:
            requirements = ["gpuspark"]
        with mlflow.start_run(run_id=self.run_id), storage.local_copy(best) as local:
            info = mlflow.pyfunc.log_model(
                name=MODEL_ARTIFACT,
                loader_module=FLAVOR_MODULE,
                data_path=str(local),
                pip_requirements=requirements,
                registered_model_name=self.tracking.model_name,
                step=step,
            )
        self.model_version = str(info.registered_model_version)
        self.model_uri = f"models:/{self.tracking.model_name}/{self.model_version}"
        return self.model_uri

    def end(self, status: str = "FINISHED") -> None:
        """Close the run with ``status`` (``FINISHED``, ``FAILED``, ``KILLED``)."""
        self._client().set_terminated(self.run_id, status=status)

    def summary(self) -> dict[str, Any]:
        """Where the run is: tracking URI, experiment, run id, model URI and version."""
        return {
            "uri": self.tracking.uri,
            "experiment": self.tracking.experiment,
            "run_id": self.run_id,
            "resumed": self.resumed,
            "run_uri": f"runs:/{self.run_id}/{MODEL_ARTIFACT}",
            "model_uri": self.model_uri,
            "model_name": self.tracking.model_name,
            "model_version": self.model_version,
        }


def start(
    tracking: Tracking,
    params: Mapping[str, Any] | None = None,
    *,
    folder: str | os.PathLike[str] | None = None,
    resume: bool = False,
) -> TrackedRun:
    """Open a run of ``tracking`` (call it on rank 0 only) and log ``params`` with the
    driver's :attr:`Tracking.params`.

    ``folder`` (the run's checkpoint directory) records the MLflow run (:data:`RUN_FILE`).
    With ``resume``, the run recorded there (in this store and experiment) is reopened
    (status ``RUNNING`` again) instead: its metrics go on at the steps the resumed epochs
    log, new parameters are added and changed ones noted (:meth:`TrackedRun.log_resumed_params`).
    Nothing recorded, another store, or a run the store no longer has: a new run (said in
    the log). A tracking server that does not answer within seconds is a one-line error
    (:func:`~gpuspark.train.mlflow_store.check_server`; the driver checked it too, but rank 0
    may run on another host)."""
    uri = tracking_uri(tracking.uri)
    tracking = replace(tracking, uri=uri)
    check_server(uri, remedy="start it (`mlflow server`) where rank 0 reaches it, or drop tracking")
    mlflow = use_store(uri)
    experiment = mlflow.set_experiment(tracking.experiment)
    client = mlflow.MlflowClient()
    all_params = {**tracking.params, **(params or {})}
    earlier = earlier_run(client, uri, experiment.experiment_id, folder) if resume else None
    if earlier is not None:
        tracked = _reopen(client, tracking, earlier, all_params)
    else:
        run = client.create_run(
            experiment.experiment_id,
            run_name=tracking.run_name,
            tags={"gpuspark.model_name": str(tracking.model_name or "")},
        )
        tracked = TrackedRun(tracking, run.info.run_id)
        tracked.log_params(all_params)
    if folder:
        record_run(folder, uri, experiment.experiment_id, tracked.run_id)
    return tracked


def _reopen(client: Any, tracking: Tracking, run_id: str, params: Mapping[str, Any]) -> TrackedRun:
    """Run ``run_id`` running again, its resume counted (tag ``gpuspark.resumes``) and
    ``params`` logged (:meth:`TrackedRun.log_resumed_params`)."""
    client.update_run(run_id, status="RUNNING")
    client.set_tag(run_id, "gpuspark.resumes", str(resumes(client, run_id) + 1))
    tracked = TrackedRun(tracking, run_id, resumed=True)
    tracked.log_resumed_params(params)
    log.info("MLflow: resumed run %s in %s", run_id, tracking.uri)
    return tracked


@contextmanager
def fit_run(
    tracking: Tracking | TrackedRun | str | None,
    *,
    rank: int,
    config: Any,
    params: Mapping[str, Any],
) -> Iterator[TrackedRun | None]:
    """The run :func:`gpuspark.train.fit` logs its epochs to: ``None`` on ranks other than 0
    or without ``tracking``; an open :class:`TrackedRun` as it is (its owner closes it);
    else (a :class:`Tracking` or a tracking URI) a run of :func:`start`, recorded in
    ``config.checkpoint_dir``: the recorded one when the loop resumes (``config.resume`` and a
    checkpoint there), else a new one; its parameters the loop's options
    (``config``, a ``FitConfig``: :data:`FIT_PARAMS`) and ``params``: when the block ends the
    newest checkpoint of ``config.checkpoint_dir`` is logged under ``checkpoint/`` and the run
    closed ``FINISHED`` (``FAILED`` when the block raises)."""
    if tracking is None or rank != 0 or isinstance(tracking, TrackedRun):
        yield tracking if rank == 0 and isinstance(tracking, TrackedRun) else None
        return
    options = {name: getattr(config, name) for name in FIT_PARAMS}
    given = tracking if isinstance(tracking, Tracking) else Tracking(uri=tracking)
    checkpoint_dir = config.checkpoint_dir
    resume = bool(config.resume and checkpoint_dir and _has_checkpoint(checkpoint_dir))
    run = start(given, {**options, **params}, folder=checkpoint_dir, resume=resume)
    try:
        yield run
    except BaseException:
        run.end("FAILED")
        raise
    newest = latest(checkpoint_dir) if checkpoint_dir else None
    if newest is not None:
        run.log_artifact(newest, "checkpoint")
    run.end()


def _has_checkpoint(directory: str | os.PathLike[str]) -> bool:
    """Whether ``fit`` resumes from ``directory``: it holds a checkpoint (as in the loop)."""
    return latest(directory) is not None


def log_epoch_safely(run: TrackedRun | None, metrics: Mapping[str, Any]) -> None:
    """``run.log_epoch(metrics)``; a failure is logged, never stops training (as for the
    other exporters of :mod:`gpuspark.train.metrics`)."""
    if run is None:
        return
    try:
        run.log_epoch(metrics)
    except Exception as exc:  # tracking must never kill training
        log.warning("MLflow run %s: epoch metrics not logged: %s", run.run_id, exc)


def finish_recipe_run(
    run: TrackedRun,
    report: Mapping[str, Any],
    *,
    best: str | os.PathLike[str] | storage.RemotePath | None,
    checkpoint: str | os.PathLike[str] | storage.RemotePath | None,
) -> dict[str, Any]:
    """The end of a recipe run on rank 0: the test and best scores as metrics (``test_<k>``,
    ``best_<k>``: ``best_val_auc``, ...), ``report`` as ``report.json``, the newest training
    ``checkpoint`` under ``checkpoint/``, ``best`` as the registered model; the run closed
    (``FAILED`` when any of it fails). Returns :meth:`TrackedRun.summary`."""
    try:
        _log_outcome(run, report, best, checkpoint)
    except BaseException:
        run.end("FAILED")
        raise
    run.end()
    return run.summary()


def _log_outcome(
    run: TrackedRun,
    report: Mapping[str, Any],
    best: str | os.PathLike[str] | storage.RemotePath | None,
    checkpoint: str | os.PathLike[str] | storage.RemotePath | None,
) -> None:
    scores = {f"test_{k}": v for k, v in (report.get("test") or {}).items() if k != "epoch"}
    scores.update({f"best_{k}": v for k, v in (report.get("best") or {}).items()})
    run.log_metrics({k: v for k, v in scores.items() if _number(v)})
    run.log_report(report)
    if checkpoint is not None:
        run.log_artifact(checkpoint, "checkpoint")
    if best is not None and storage.is_file(storage.as_path(best)):
        run.log_model(best, step=int((report.get("best") or {}).get("epoch") or 0))
    else:
        log.warning(
            "MLflow run %s: no best.pt (no --checkpoint-dir or no validation split): "
            "no model registered",
            run.run_id,
        )
