"""The MLflow run a checkpoint directory records (:data:`RUN_FILE`), so a resume of a
training run continues the same MLflow run (:func:`gpuspark.train.tracking.start`).

No MLflow import here: the functions take the MLflow client their caller made.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from gpuspark import storage

__all__ = ["RUN_FILE", "earlier_run", "record_run", "recorded_run", "resumes"]

log = logging.getLogger("gpuspark.train.tracking")

RUN_FILE = "mlflow-run.json"
"""The file in a run's checkpoint directory naming its MLflow run (tracking URI,
experiment, run id): what a resume continues."""

_RECORD = ("uri", "experiment_id", "run_id")
"""The fields of :data:`RUN_FILE`."""


def recorded_run(folder: str | os.PathLike[str]) -> dict[str, str] | None:
    """The MLflow run recorded in ``folder`` (:data:`RUN_FILE`: ``uri``, ``experiment_id``,
    ``run_id``), or ``None`` when there is none or it cannot be read."""
    path = storage.join(folder, RUN_FILE)
    try:
        with storage.open_file(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in _RECORD):
        return None
    return {k: data[k] for k in _RECORD}


def record_run(folder: str | os.PathLike[str], uri: str, experiment_id: str, run_id: str) -> None:
    """Write :data:`RUN_FILE` (run ``run_id`` of experiment ``experiment_id`` in store ``uri``)
    into ``folder`` (created when missing), atomically."""
    text = os.fspath(folder)
    if not storage.is_url(text):
        Path(storage.local_path(text)).mkdir(parents=True, exist_ok=True)
    record = {"uri": uri, "experiment_id": experiment_id, "run_id": run_id}
    storage.atomic_write_text(storage.join(text, RUN_FILE), json.dumps(record, indent=2) + "\n")


def earlier_run(
    client: Any, uri: str, experiment_id: str, folder: str | os.PathLike[str] | None
) -> str | None:
    """The id of the run recorded in ``folder`` when the store still has it, active, in
    this store and experiment; else ``None`` (and why, in the log)."""
    record = recorded_run(folder) if folder else None
    if record is None:
        return None
    why = None
    if record["uri"] != uri or record["experiment_id"] != experiment_id:
        why = f"it is in {record['uri']} (experiment {record['experiment_id']})"
    else:
        try:
            found = client.get_run(record["run_id"])
        except Exception as exc:  # MLflow raises its own types for a run it does not have
            found, why = None, f"the store does not have it ({_first_line(exc)})"
        if found is not None and found.info.lifecycle_stage != "active":
            why = "it was deleted"
    if why is not None:
        log.warning("MLflow: not resuming run %s: %s; a new run", record["run_id"], why)
        return None
    return record["run_id"]


def resumes(client: Any, run_id: str) -> int:
    """How often run ``run_id`` was resumed (its ``gpuspark.resumes`` tag)."""
    value = client.get_run(run_id).data.tags.get("gpuspark.resumes", "0")
    return int(value) if value.isdigit() else 0


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {text}"
