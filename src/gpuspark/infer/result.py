"""What a prediction job returns (:class:`PredictResult`), from the tasks' statistics and the
committed folder."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuspark.infer.output import QUARANTINE_DIR
from gpuspark.storage import Location

__all__ = ["PredictResult", "finish", "worker_fields"]


@dataclass
class PredictResult:
    """What :func:`~gpuspark.infer.predict` wrote and how it went."""

    output: str
    quarantine: str
    """The quarantine table (a Parquet folder inside ``output``, skipped by readers)."""
    model: str
    source: str
    rows: int
    """Rows scored (in the predictions): table rows, or DICOM series."""
    quarantined: int
    by_reason: dict[str, int]
    columns: list[str]
    seconds: float
    """The whole call, the session's start included."""
    predict_s: float
    """The scoring job."""
    rows_per_s: float
    """``rows`` / ``predict_s``."""
    batch_size: int
    tasks: int
    batches: int
    workers: int
    """Python workers that ran scoring tasks."""
    model_loads: int
    """Checkpoint loads in those workers (a reused worker from an earlier job may load none)."""
    max_loads_per_worker: int
    devices: dict[str, int] = field(default_factory=dict)
    """Rows scored per device (``cpu``, ``cuda:0``, ...)."""
    timings: dict[str, float] = field(default_factory=dict)
    task_seconds: dict[str, float] = field(default_factory=dict)
    """Tables: the scoring tasks' wall seconds per phase, and their CPU seconds
    (``<phase>_cpu``), summed over the tasks (see :class:`~gpuspark.infer.worker.TaskClock`)."""
    input: str = "table"
    """``table`` or ``dicom``."""
    inputs: int = 0
    """DICOM: the files found below the input folder (tables: 0)."""

    @property
    def loads_per_worker(self) -> float:
        """Mean checkpoint loads per Python worker."""
        return self.model_loads / self.workers if self.workers else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Plain-data view (for ``--json``)."""
        return {**asdict(self), "loads_per_worker": round(self.loads_per_worker, 3)}


def worker_fields(workers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The result's ``tasks``, ``batches``, ``workers``, ``model_loads``,
    ``max_loads_per_worker`` and ``devices`` from the tasks' statistics
    (:class:`~gpuspark.infer.worker.WorkerStatsParam`), and ``task_seconds`` (summed)."""
    devices: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for w in workers.values():
        devices[str(w.get("device"))] = devices.get(str(w.get("device")), 0) + int(w["rows"])
        for phase, value in (w.get("seconds") or {}).items():
            seconds[phase] = seconds.get(phase, 0.0) + value
    return {
        "tasks": sum(w["tasks"] for w in workers.values()),
        "batches": sum(w["batches"] for w in workers.values()),
        "workers": len(workers),
        "model_loads": sum(w["loads"] for w in workers.values()),
        "max_loads_per_worker": max((w["loads"] for w in workers.values()), default=0),
        "devices": devices,
        "task_seconds": {k: round(v, 3) for k, v in seconds.items() if v},
    }


def finish(result: PredictResult, root: Location, src: str, t0: float) -> PredictResult:
    """The result as the committed folder will show it."""
    result.output = str(root)
    result.quarantine = str(root / QUARANTINE_DIR)
    result.source = src
    result.seconds = round(time.monotonic() - t0, 3)
    result.rows_per_s = round(result.rows / result.predict_s, 1) if result.predict_s else 0.0
    return result
