""":func:`predict_dicom`: new DICOM studies scored with a checkpoint of a volume recipe
(``resnet3d``) as a Spark data job, the predictions committed as one Parquet folder.

Before any Spark job: the options, the checkpoint (:mod:`gpuspark.infer.volume`: the recipe,
the network's fit to its weights and to the recorded volume shape, the DICOM preprocessing
from the training dataset's manifest), the input folder and the destination. Then, through
the one submit path (:func:`gpuspark.cluster.submit.prepare_job`, a data session), two jobs
write into a folder beside the destination:

1. **headers**: tasks list the folder and read every file's header, as ``prep dicom`` does
   (:func:`~gpuspark.data.sources.plan_units`, :meth:`DicomSource.read_header`); the driver
   groups the files by series. A file that is not readable DICOM is quarantined. Both jobs
   are DataFrame jobs (``mapInArrow``): they share the executors' Python workers.
2. **predict**: the series (``id`` = its SeriesInstanceUID, as in the training shards) in id
   order, a broadcast list; ``spark.range`` deals contiguous index ranges to the tasks. Each
   task makes every volume with the prep job's own
   :func:`~gpuspark.data.sources.prep_series` and the recorded options, applies the recipe's
   decoder, and scores batches of at most ``batch_size`` volumes with the network cached in
   its Python worker (:mod:`gpuspark.infer.worker`). A series that cannot become a volume is
   quarantined with the reason ``prep dicom`` would give (the task adds its row to an
   accumulator). The part files hold the predictions in id order.

The quarantined files and series, one row each, are written by the driver
(``_quarantine/``), and the folder is renamed into place last (:mod:`gpuspark.infer.output`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark._util.extras import check_extras
from gpuspark.cluster.session import JobKind, job_session
from gpuspark.cluster.submit import prepare_job
from gpuspark.data.prep.common import cores
from gpuspark.data.prep.headers import HEADER_DDL, read_headers
from gpuspark.data.prep.progress import Progress, Watcher, announce
from gpuspark.data.sources import (
    DicomOptions,
    DicomSource,
    QuarantineError,
    deal,
    plan_units,
    prep_series,
)
from gpuspark.errors import GpusparkError
from gpuspark.infer.model import CheckpointFile
from gpuspark.infer.output import (
    QUARANTINE_DIR,
    check_destination,
    count_by_reason,
    count_rows,
    staged_output,
    write_marker,
    write_parquet,
    write_table,
)
from gpuspark.infer.result import PredictResult, finish, worker_fields
from gpuspark.infer.table import arrow_batches
from gpuspark.infer.volume import VolumeModel, build_volume_network, load_volume_model
from gpuspark.infer.worker import (
    ListParam,
    WorkerStatsParam,
    cached_network,
    report_task,
    task_setup,
)
from gpuspark.storage import Location
from gpuspark.train.recipes.registry import Decoder

__all__ = [
    "DEFAULT_VOLUME_BATCH",
    "SeriesTask",
    "predict_dicom",
    "series_function",
    "volume_input",
]

DEFAULT_VOLUME_BATCH = 8
"""Volumes per model call by default."""
_QUARANTINE_COLUMNS = ("id", "study_uid", "path", "reason", "stage")


def predict_dicom(
    studies: str | os.PathLike[str],
    model: str | os.PathLike[str] | CheckpointFile,
    dst: str | os.PathLike[str],
    *,
    batch_size: int = DEFAULT_VOLUME_BATCH,
    partitions: int | None = None,
    overwrite: bool = False,
    spark: Any = None,
    master: str | None = None,
    spec: Any = None,
    team: str | None = None,
    progress: Progress | None = None,
) -> PredictResult:
    """Score every DICOM series below the folder ``studies`` (any names, nested, mixed
    series) with the checkpoint ``model`` of a volume recipe (a ``best.pt``, or its run
    folder) and write the predictions to the folder ``dst``: ``id`` (the SeriesInstanceUID),
    ``study_uid``, ``prob_<class>`` per class and ``prediction`` (the class index), one row
    per series, in id order.

    Each series is made into a volume exactly as the training dataset's ``prep dicom`` job
    made it (its options recorded in the checkpoint, never retyped); a file that is not
    readable DICOM and a series that cannot become a volume go to the quarantine table with
    their reason. ``batch_size``: volumes per model call; ``partitions``: tasks (default:
    twice the cluster's task slots). An existing ``dst`` needs ``overwrite`` (and must be
    earlier predictions).
    """
    t0 = time.monotonic()
    _check_options(batch_size, partitions)
    check_extras("predict dicom", ("pydicom", "dicom"))
    loaded = load_volume_model(model)
    src = _studies(studies)
    root = check_destination(dst, overwrite, src)
    job = prepare_job(
        JobKind.DATA,
        spec=spec,
        master=master,
        team=team,
        app_name="gpuspark-predict",
        writes=[str(root)],
    )
    announce(progress)
    with (
        job.discard_on_error(),
        job_session(spark=spark, **job.session_args()) as session,
        staged_output(root, overwrite) as tmp,
    ):
        run = _DicomRun(session, loaded, tmp, batch_size, partitions, progress)
        result = finish(run.execute(src), root, src, t0)
        summary = {"model": loaded.path, "source": src, "rows": result.rows}
        write_marker(tmp, {**summary, "input": "dicom", "prep": loaded.prep})
    return result


def _check_options(batch_size: int, partitions: int | None) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise GpusparkError(f"batch_size must be a positive integer, got {batch_size!r}")
    if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
        raise GpusparkError(f"partitions must be a positive integer, got {partitions!r}")


def _studies(studies: Any) -> str:
    """The input folder as an absolute local path (or a URL), refused when it is missing,
    a file or not a path."""
    if not isinstance(studies, str | os.PathLike):
        raise GpusparkError(
            f"predict dicom reads a folder of DICOM studies, got {type(studies).__name__}",
            remedy="pass the folder's path",
        )
    text = os.fspath(studies)
    if not text:
        raise GpusparkError("the input path is empty", remedy="pass a folder of DICOM studies")
    if storage.is_url(text):
        return text
    p = Path(storage.local_path(text)).expanduser()
    if not p.exists():
        raise GpusparkError(f"input {text} does not exist", remedy="pass a folder of DICOM studies")
    if not p.is_dir():
        raise GpusparkError(
            f"input {text} is a file; predict dicom reads a folder of DICOM studies",
            remedy="pass the folder holding the studies' files",
        )
    return str(p.absolute())


# -------------------------------------------------------------------------------- the jobs


@dataclass(frozen=True)
class _Series:
    """The series found below the input folder, in id order, and the files quarantined."""

    rows: list[tuple[str, str, list[str]]]
    """``(id, study_uid, sorted files)`` per series, sorted by id."""
    bad_files: list[dict[str, Any]]
    """Quarantine rows of the files whose header could not be read."""
    files: int


class _DicomRun:
    """The two Spark jobs of one call, writing into the staging folder ``tmp``."""

    def __init__(
        self,
        spark: Any,
        loaded: VolumeModel,
        tmp: Location,
        batch_size: int,
        partitions: int | None,
        progress: Progress | None,
    ) -> None:
        self.spark, self.loaded, self.tmp = spark, loaded, tmp
        self.batch_size, self.partitions, self.progress = batch_size, partitions, progress

    def execute(self, src: str) -> PredictResult:
        sc = self.spark.sparkContext
        counters = {"rows": sc.accumulator(0), "quarantined": sc.accumulator(0)}
        counters["bad"] = sc.accumulator([], ListParam())
        stats = sc.accumulator({}, WorkerStatsParam())
        model_bytes = sc.broadcast(self.loaded.data)
        shared = [model_bytes]
        try:
            with Watcher(self.spark, self.progress, counters, phase="headers") as watch:
                series = _list_series(self.spark, src, self.loaded.options)
                counters["quarantined"].add(len(series.bad_files))
                watch.phase = "predict"
                t_predict = time.monotonic()
                rows = sc.broadcast(series.rows)
                shared.append(rows)
                fn = series_function(self._task(), model_bytes, rows, counters, stats)
                fn = storage.with_credentials(fn, src)  # the tasks read the studies
                scored = self._frame(series).mapInArrow(fn, self._schema())
                with arrow_batches(self.spark, self.batch_size):
                    write_parquet(scored, self.tmp)
                predict_s = time.monotonic() - t_predict
                _write_quarantine(
                    self.tmp / QUARANTINE_DIR, series.bad_files + counters["bad"].value
                )
        finally:
            for broadcast in shared:
                broadcast.destroy()
        by_reason = count_by_reason(self.tmp / QUARANTINE_DIR, _reason_key)
        return PredictResult(
            output=str(self.tmp),
            quarantine=str(self.tmp / QUARANTINE_DIR),
            model=self.loaded.path,
            source="",
            rows=count_rows(self.tmp),
            quarantined=sum(by_reason.values()),
            by_reason=by_reason,
            columns=list(self.columns),
            seconds=0.0,
            predict_s=round(predict_s, 3),
            rows_per_s=0.0,
            batch_size=self.batch_size,
            timings=dict(watch.timings),
            input="dicom",
            inputs=series.files,
            **worker_fields(dict(stats.value)),
        )

    @property
    def probs(self) -> tuple[str, ...]:
        return tuple(f"prob_{k}" for k in range(self.loaded.classes))

    @property
    def columns(self) -> tuple[str, ...]:
        return ("id", "study_uid", *self.probs, "prediction")

    def _task(self) -> SeriesTask:
        return SeriesTask(
            key=self.loaded.key,
            options=self.loaded.options,
            decode=self.loaded.decode,
            probs=self.probs,
            batch_size=self.batch_size,
        )

    def _schema(self) -> str:
        probs = ", ".join(f"{p} double" for p in self.probs)
        return f"id string, study_uid string, {probs}, prediction long"

    def _frame(self, series: _Series) -> Any:
        """One row per series (its index in ``series.rows``: ``spark.range`` deals contiguous
        ranges, so the tasks hold the series in id order); no Python worker makes the rows."""
        n = self.partitions or 2 * cores(self.spark)
        return self.spark.range(len(series.rows), numPartitions=max(1, min(n, len(series.rows))))


def _write_quarantine(folder: Location, rows: list[dict[str, Any]]) -> None:
    """The quarantine table: one row per unreadable file and per series that did not become
    a volume (``id``, ``study_uid``, ``path``, ``reason``, ``stage``)."""
    import pyarrow as pa

    schema = pa.schema([(name, pa.string()) for name in _QUARANTINE_COLUMNS])
    rows = sorted(rows, key=lambda r: (r["stage"], r["id"] or "", r["path"] or ""))
    write_table(folder, pa.Table.from_pylist(rows, schema=schema))


def _reason_key(reason: str) -> str:
    """A quarantine reason as counted: its first 120 characters."""
    return reason[:120]


def _list_series(spark: Any, src: str, options: DicomOptions) -> _Series:
    """The headers job: every file below ``src`` read as ``prep dicom`` reads it, grouped by
    series on the driver; a folder with no DICOM series is an error (nothing is written).
    A DataFrame job (``mapInArrow``), as the scoring job: both use the same Python workers,
    which start once."""
    n = cores(spark)
    units = plan_units(src, want=8 * n)
    if not units:
        raise GpusparkError(f"input {src} holds no files", remedy="pass a folder of DICOM studies")
    parts = deal(units, 2 * n)
    frame = spark.range(len(parts), numPartitions=len(parts))  # task i walks parts[i]
    fn = storage.with_credentials(partial(read_headers, DicomSource(src, options), parts), src)
    found = frame.mapInArrow(fn, HEADER_DDL).collect()
    files: dict[str, list[str]] = {}
    studies: dict[str, str] = {}
    bad: list[dict[str, Any]] = []
    for r in found:
        if r["reason"] is not None:
            bad.append({"id": None, "study_uid": None, "path": r["path"], "reason": r["reason"]})
            bad[-1]["stage"] = "header"
            continue
        files.setdefault(r["id"], []).append(r["path"])
        studies.setdefault(r["id"], r["study_uid"])
    if not files:
        first = f" (e.g. {bad[0]['path']}: {bad[0]['reason']})" if bad else ""
        raise GpusparkError(
            f"input {src} holds no readable DICOM series: {len(found)} files{first}",
            remedy="pass a folder of DICOM studies",
        )
    rows = [(k, studies[k], sorted(files[k])) for k in sorted(files)]
    return _Series(rows=rows, bad_files=bad, files=len(found))


# ------------------------------------------------------------------------------ the tasks


@dataclass(frozen=True)
class SeriesTask:
    """What every scoring task needs (pickled into the tasks)."""

    key: tuple[str, int]
    """The checkpoint's path and mtime_ns: the cache key."""
    options: DicomOptions
    """The prep job's options, as the training dataset's manifest recorded them."""
    decode: Decoder
    """The recipe's decoder (stored volume -> model input)."""
    probs: tuple[str, ...]
    batch_size: int


def volume_input(options: DicomOptions, decode: Decoder, files: list[str]) -> tuple[Any, str]:
    """The model input of one series (its files) and its study UID: the volume
    :func:`~gpuspark.data.sources.prep_series` makes with the prep job's ``options``, through
    the recipe's ``decode`` (given a placeholder label: serving has none). Raises
    :class:`QuarantineError` when the series cannot become a volume."""
    import numpy as np

    row = prep_series(sorted(files), options)
    x, _ = decode({**row, "label": 0})
    return np.ascontiguousarray(x, dtype=np.float32), str(row["study_uid"])


def series_function(
    task: SeriesTask, model_bytes: Any, series: Any, counters: dict[str, Any], stats_acc: Any
) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function over indices (column ``id``) into ``series.value`` (a
    broadcast list of ``(id, study_uid, files)``): each series made into a volume (else its
    quarantine row, with the reason, added to ``counters["bad"]``), volumes scored in batches
    of at most ``task.batch_size`` (of one shape), rows yielded in index order."""

    def score(batches: Iterable[Any]) -> Iterator[Any]:
        device = task_setup()
        read = lambda: model_bytes.value  # noqa: E731
        net, loaded = cached_network(task.key, read, device, build_volume_network)
        pending: list[tuple[str, str, Any]] = []
        n_batches = n_rows = 0
        rows = series.value
        for i in (i for b in batches for i in b.column("id").to_pylist()):
            sid, study, files = rows[i]
            try:
                x, study = volume_input(task.options, task.decode, files)
            except Exception as exc:  # never fail the job on one series
                counters["quarantined"].add(1)
                counters["bad"].add([_quarantined(sid, study, exc)])
                continue
            if pending and (len(pending) >= task.batch_size or pending[0][2].shape != x.shape):
                yield _scored(task, net, device, pending)
                n_batches, n_rows = n_batches + 1, n_rows + len(pending)
                counters["rows"].add(len(pending))
                pending = []
            pending.append((sid, study, x))
        if pending:
            yield _scored(task, net, device, pending)
            n_batches, n_rows = n_batches + 1, n_rows + len(pending)
            counters["rows"].add(len(pending))
        report_task(stats_acc, loaded, n_batches, n_rows, device)

    return score


def _scored(task: SeriesTask, net: Any, device: Any, pending: list[tuple[str, str, Any]]) -> Any:
    """One batch of volumes: ``id``, ``study_uid``, ``prob_<k>``, ``prediction``."""
    import numpy as np
    import pyarrow as pa
    import torch

    x = torch.from_numpy(np.stack([p[2] for p in pending])).to(device)
    with torch.inference_mode():
        probs = net(x).float().softmax(1).cpu().numpy().astype(np.float64)
    columns: dict[str, Any] = {
        "id": pa.array([p[0] for p in pending], pa.string()),
        "study_uid": pa.array([p[1] for p in pending], pa.string()),
    }
    for k, name in enumerate(task.probs):
        columns[name] = pa.array(np.ascontiguousarray(probs[:, k]))
    columns["prediction"] = pa.array(probs.argmax(1).astype(np.int64))
    return pa.RecordBatch.from_pydict(columns)


def _quarantined(sid: str, study: str, exc: Exception) -> dict[str, Any]:
    """A quarantine row: the series, the reason and the file it names (if any)."""
    error = QuarantineError.wrap(exc, "series failed")
    return {
        "id": sid,
        "study_uid": study,
        "path": error.path,
        "reason": error.reason,
        "stage": "series",
    }
