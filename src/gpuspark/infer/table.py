""":func:`predict_table`: a table (Parquet, or a Spark DataFrame) scored with a ``tabular``
checkpoint as a Spark data job, the predictions committed as one Parquet folder.

Before any Spark job: the options, the checkpoint (recipe, network, preprocessing), the
input's columns against the model's (a local Parquet input's schema is read with pyarrow, a
DataFrame's is known) and the destination. Then, through the one submit path
(:func:`gpuspark.cluster.submit.prepare_job`, a data session: the spec's fractional task GPU
amount), the scoring job writes into a folder beside the destination: the rows encoded and
checked by Spark expressions, then ``mapInArrow`` (:mod:`gpuspark.infer.worker`) scores the
rows without a reason and counts the others. Only when it counted some does a second job
write those rows with their reason (``_quarantine/``, no model involved); clean input is read
once. The folder is renamed into place last (:mod:`gpuspark.infer.output`).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark.cluster.session import JobKind, job_session
from gpuspark.cluster.submit import prepare_job
from gpuspark.data.prep.progress import Progress, Watcher, announce
from gpuspark.errors import GpusparkError
from gpuspark.infer.features import (
    REASON_COL,
    InputPlan,
    arrow_kinds,
    column,
    encoded_frame,
    plan_input,
    spark_kinds,
)
from gpuspark.infer.file_types import FileTypes, check_file_types, file_types, mismatch_error
from gpuspark.infer.model import (
    CheckpointFile,
    LoadedModel,
    TabularServing,
    category_key,
    load_model,
)
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
from gpuspark.infer.worker import ScoreTask, WorkerStatsParam, score_function
from gpuspark.storage import Location

__all__ = ["DEFAULT_BATCH_SIZE", "arrow_batches", "predict_table", "prob_columns"]

DEFAULT_BATCH_SIZE = 4096
_ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
_SLUG = re.compile(r"[^A-Za-z0-9_-]+")


def predict_table(
    source: Any,
    model: str | os.PathLike[str] | CheckpointFile,
    dst: str | os.PathLike[str],
    *,
    id: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    partitions: int | None = None,
    overwrite: bool = False,
    spark: Any = None,
    master: str | None = None,
    spec: Any = None,
    team: str | None = None,
    progress: Progress | None = None,
) -> PredictResult:
    """Score ``source`` (a Parquet file or folder, any URL Spark reads, or a DataFrame) with
    the ``tabular`` checkpoint ``model`` (a ``best.pt``, or the run folder holding it) and
    write the predictions to the folder ``dst``: the kept columns (``id``, else every column
    that is not a feature), ``prob_<class>`` per class and ``prediction``.

    Rows are encoded as the training dataset's prep job encoded them (from the checkpoint);
    a row with a NaN, infinite or out-of-range number, or text that is not a number, goes to
    the quarantine table with its reason. ``batch_size``: rows per model call (and per Arrow
    batch); ``partitions``: repartition the input first (more tasks than files). An existing
    ``dst`` needs ``overwrite`` (and must be earlier predictions).
    """
    t0 = time.monotonic()
    _check_options(id, batch_size, partitions)
    loaded = load_model(model)
    frame, src = _source(source)
    read_as: dict[str, str] = {}
    if frame is not None:
        plan_input(spark_kinds(frame.schema), loaded.serving, loaded.path, src, id)
    elif not storage.is_url(src):
        schema, found = _parquet_schema(src)
        serving = loaded.serving
        read = _read_columns(schema.names, serving.features, id)
        check_file_types(found, read, src, serving.numeric, serving.categorical)
        plan_input(arrow_kinds(schema), serving, loaded.path, src, id)
        read_as = found.read_as
    root = check_destination(dst, overwrite, None if frame is not None else src)
    job = prepare_job(
        JobKind.DATA,
        spec=spec,
        master=master,
        team=team,
        app_name="gpuspark-predict",
        writes=[str(root)],
    )
    announce(progress)
    session_of = spark if spark is not None else getattr(frame, "sparkSession", None)
    with job.discard_on_error(), job_session(spark=session_of, **job.session_args()) as session:
        df = frame if frame is not None else _read(session, src, read_as)
        plan = plan_input(spark_kinds(df.schema), loaded.serving, loaded.path, src, id)
        with staged_output(root, overwrite) as tmp, _one_line_read_errors(src):
            run = _Run(session, loaded, plan, tmp, batch_size, progress)
            result = run.execute(df if not partitions else df.repartition(partitions))
            result = finish(result, root, src, t0)
            write_marker(tmp, {"model": loaded.path, "source": src, "rows": result.rows})
    return result


def _check_options(id: str | None, batch_size: int, partitions: int | None) -> None:
    if id is not None and (not isinstance(id, str) or not id):
        raise GpusparkError(f"id must be a column name, got {id!r}", remedy="pass --id COL")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise GpusparkError(f"batch_size must be a positive integer, got {batch_size!r}")
    if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
        raise GpusparkError(f"partitions must be a positive integer, got {partitions!r}")


def _source(source: Any) -> tuple[Any, str]:
    """``(DataFrame, description)`` for a DataFrame, ``(None, path)`` for a path."""
    if isinstance(source, str | os.PathLike):
        text = os.fspath(source)
        if not text:
            raise GpusparkError("the input path is empty", remedy="pass a Parquet file or folder")
        if storage.is_url(text):
            return None, text
        p = Path(storage.local_path(text)).expanduser()
        if not p.exists():
            raise GpusparkError(
                f"input {text} does not exist", remedy="pass a Parquet file or folder"
            )
        return None, str(p.absolute())
    if not hasattr(source, "schema") or not hasattr(source, "mapInArrow"):
        raise GpusparkError(
            f"the input must be a Parquet path or a Spark DataFrame, got {type(source).__name__}",
            remedy="pass a path or a DataFrame",
        )
    return source, "the DataFrame"


def _parquet_schema(path: str) -> tuple[Any, FileTypes]:
    """The schema Spark will read (pyarrow's view of the files; hive partition folders as
    columns; a column whose files hold types Spark reads as one wider type, as that type)
    and what every file's footer says (:mod:`gpuspark.infer.file_types`); a one-line error
    when the path holds no readable Parquet."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    remedy = "pass a Parquet file or a folder of Parquet files"
    try:
        found = ds.dataset(path, format="parquet", partitioning="hive")
        files = found.files
        schema = found.schema
        root = Path(path)
        footers = file_types(
            (os.path.relpath(f.path, root) if root.is_dir() else root.name, f.physical_schema)
            for f in found.get_fragments()
        )
    except (OSError, ValueError, pa.ArrowException) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise GpusparkError(
            f"input {path} cannot be read as Parquet: {first}", remedy=remedy
        ) from None
    if not files:
        raise GpusparkError(f"input {path} holds no Parquet files", remedy=remedy)
    for i, f in enumerate(schema):
        wider = footers.arrow_type(f.name)
        if wider is not None:
            schema = schema.set(i, f.with_type(pa.type_for_alias(wider)))
    return schema, footers


def _read_columns(names: list[str], features: tuple[str, ...], id: str | None) -> list[str]:
    """The columns the job reads: the features, then ``id`` or every other column."""
    kept = [id] if id is not None else [c for c in names if c not in features]
    return [*features, *kept]


def _read(spark: Any, src: str, read_as: dict[str, str]) -> Any:
    """The input as a DataFrame; a column in ``read_as`` as the Spark type named there (its
    files hold narrower types, :func:`~gpuspark.infer.file_types.file_types`)."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import types as T

    named: dict[str, Any] = {"int": T.IntegerType, "bigint": T.LongType, "float": T.FloatType}
    named |= {"double": T.DoubleType, "string": T.StringType, "boolean": T.BooleanType}
    try:
        df = spark.read.parquet(src)
        if read_as:
            fields = [
                T.StructField(f.name, named[read_as[f.name]](), f.nullable)
                if f.name in read_as
                else f
                for f in df.schema.fields
            ]
            df = spark.read.schema(T.StructType(fields)).parquet(src)
        return df
    except AnalysisException as exc:
        first = str(exc).strip().splitlines()[0][:300]
        raise GpusparkError(
            f"input {src} cannot be read as Parquet: {first}",
            remedy="pass a Parquet file or a folder of Parquet files",
        ) from exc


@contextmanager
def _one_line_read_errors(src: str) -> Iterator[None]:
    """A job that fails on files of another column type than Spark expected (an input that
    could not be checked first: a URL, a DataFrame) fails in one line."""
    try:
        yield
    except Exception as exc:
        err = mismatch_error(exc, src)
        if err is None:
            raise
        raise err from exc


# -------------------------------------------------------------------------------- the jobs


class _Run:
    """The Spark jobs of one call, writing into the staging folder ``tmp``: the scoring job,
    and the quarantine job when rows were left out."""

    def __init__(
        self,
        spark: Any,
        loaded: LoadedModel,
        plan: InputPlan,
        tmp: Location,
        batch_size: int,
        progress: Progress | None,
    ) -> None:
        self.spark, self.loaded, self.plan, self.tmp = spark, loaded, plan, tmp
        self.batch_size, self.progress = batch_size, progress

    def execute(self, df: Any) -> PredictResult:
        sc = self.spark.sparkContext
        counters = {"rows": sc.accumulator(0), "quarantined": sc.accumulator(0)}
        stats = sc.accumulator({}, WorkerStatsParam())
        model_bytes = sc.broadcast(self.loaded.data)
        encoded = encoded_frame(df, self.loaded.serving, self.plan.keep)
        try:
            with Watcher(self.spark, self.progress, counters, phase="predict") as watch:
                t_predict = time.monotonic()
                scored = self._scored(encoded, model_bytes, counters, stats)
                with arrow_batches(self.spark, self.batch_size):
                    write_parquet(scored, self.tmp)
                predict_s = time.monotonic() - t_predict
                watch.phase = "quarantine"
                self._write_quarantine(encoded, counters["quarantined"].value)
                by_reason = count_by_reason(self.tmp / QUARANTINE_DIR, _reason_key)
        finally:
            model_bytes.destroy()
        workers = dict(stats.value)
        return PredictResult(
            output=str(self.tmp),
            quarantine=str(self.tmp / QUARANTINE_DIR),
            model=self.loaded.path,
            source="",
            rows=count_rows(self.tmp),
            quarantined=sum(by_reason.values()),
            by_reason=by_reason,
            columns=[*self.plan.keep, *self._probs(), "prediction"],
            seconds=0.0,
            predict_s=round(predict_s, 3),
            rows_per_s=0.0,
            batch_size=self.batch_size,
            timings=dict(watch.timings),
            **worker_fields(workers),
        )

    def _write_quarantine(self, encoded: Any, seen: int) -> None:
        """The rows with a reason, and the reason: a second Spark job over the input when
        the scoring tasks left rows out, else an empty table written here (no second pass
        over the input for clean data)."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_schema

        bad = encoded.select(
            *(column(c) for c in self.plan.keep), F.col(REASON_COL).alias("reason")
        )
        folder = self.tmp / QUARANTINE_DIR
        if seen:
            write_parquet(bad.filter(F.col("reason").isNotNull()), folder)
            return
        write_table(folder, to_arrow_schema(bad.schema).empty_table())

    def _scored(self, encoded: Any, model_bytes: Any, counters: dict[str, Any], stats: Any) -> Any:
        from pyspark.sql.types import DoubleType, StructField, StructType

        serving = self.loaded.serving
        probs = self._probs()
        ptype, values = _prediction_type(serving)
        fields = [encoded.schema[c] for c in self.plan.keep]
        fields += [StructField(p, DoubleType()) for p in probs]
        fields.append(StructField("prediction", _spark_type(ptype)))
        task = ScoreTask(
            key=(self.loaded.path, self.loaded.mtime_ns),
            keep=self.plan.keep,
            probs=probs,
            label_values=values,
            prediction_type=ptype,
            batch_size=self.batch_size,
            numeric=len(serving.numeric),
            categorical=len(serving.categorical),
        )
        fn = score_function(task, model_bytes, counters, stats)
        return encoded.mapInArrow(fn, StructType(fields))

    def _probs(self) -> tuple[str, ...]:
        return prob_columns(self.loaded.serving, self.plan.keep)


def prob_columns(serving: TabularServing, keep: tuple[str, ...]) -> tuple[str, ...]:
    """``prob_<class>`` per label value (``prob_<index>`` when the values do not make
    distinct names); a clash with a kept column is a one-line error."""
    names = tuple(f"prob_{_SLUG.sub('_', category_key(v))}" for v in serving.label_values)
    if len(set(names)) < len(names):
        names = tuple(f"prob_{k}" for k in range(len(names)))
    clash = [n for n in (*names, "prediction") if n in keep]
    if clash:
        raise GpusparkError(
            f"the input has a column {clash[0]!r}, which the predictions add",
            remedy="rename it, or keep only an id column with --id COL",
        )
    return names


def _prediction_type(serving: TabularServing) -> tuple[str, tuple[Any, ...]]:
    """The pyarrow type of ``prediction`` and the label values in it."""
    values = serving.label_values
    if all(isinstance(v, bool) for v in values):
        return "bool", tuple(values)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int64", tuple(values)
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return "float64", tuple(float(v) for v in values)
    return "string", tuple(category_key(v) for v in values)


def _spark_type(name: str) -> Any:
    """The Spark type of the pyarrow type ``name`` of :func:`_prediction_type`."""
    from pyspark.sql import types as T

    kinds = {"bool": T.BooleanType, "int64": T.LongType, "float64": T.DoubleType}
    return kinds.get(name, T.StringType)()


@contextmanager
def arrow_batches(spark: Any, rows: int) -> Iterator[None]:
    """Arrow batches of at most ``rows`` rows into the tasks, for this job only."""
    old = spark.conf.get(_ARROW_BATCH)
    spark.conf.set(_ARROW_BATCH, str(rows))
    try:
        yield
    finally:
        spark.conf.set(_ARROW_BATCH, old)


def _reason_key(reason: str) -> str:
    """A row's reason without the value (``column NAME: what``)."""
    return ": ".join(reason.split(": ")[:2])
