"""The Parquet job: a table (Parquet file or folder, any URL Spark reads) to a *tabular* table
dataset: columns ``id``, ``label``, ``x`` (numeric features), ``c`` (categorical codes), with
feature statistics and vocabularies from the train split in ``manifest.extra["tabular"]``.

Rows with a null label or id, or a numeric value that is infinite (or not a number), go to the
quarantine table, counted, never dropped silently. Splits are by a stable hash of the id column
so that no entity is in two splits. Spark does every pass: labels and row counts, the
quarantined rows, the numeric statistics (one aggregation), the vocabularies (one job) and the
write (:func:`gpuspark.data.format.table.write_table`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark._util.spark_compat import sql_functions
from gpuspark.data.format.table import DEFAULT_BLOCK_ROWS, write_table
from gpuspark.data.prep.common import (
    PrepResult,
    WriteOptions,
    by_reason,
    check_split,
    check_world,
    quarantine_table,
)
from gpuspark.data.prep.job import PrepRun, Where, run_prep
from gpuspark.data.prep.parquet_stats import (
    REASON_COL,
    ROW_COL,
    SPLIT_COL,
    TabularColumns,
    category_stats,
    label_classes,
    numeric_stats,
    plan_columns,
    tabular_frame,
    tag_rows,
)
from gpuspark.data.prep.progress import Progress
from gpuspark.errors import PrepError

__all__ = ["prep_parquet"]


@dataclass(frozen=True)
class _Options:
    """The job's options once checked on the driver."""

    label: str
    id: str | None
    features: tuple[str, ...] | None
    categorical: tuple[str, ...] | None
    block_rows: int
    max_vocab: int


def prep_parquet(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    label: str,
    id: str | None = None,
    features: Sequence[str] | None = None,
    categorical: Sequence[str] | None = None,
    split: Sequence[float] | None = (0.8, 0.1, 0.1),
    world_size: int | None = None,
    num_shards: int | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    max_vocab: int = 1000,
    overwrite: bool = False,
    compression: str | None = None,
    spark: Any = None,
    master: str | None = None,
    spec: Any = None,
    progress: Progress | None = None,
    team: str | None = None,
) -> PrepResult:
    """A Parquet table to a tabular table dataset (see the module docstring).

    ``label``: the class column (at most 100 distinct values; regression is not supported).
    ``id``: the entity column the splits hash (without it, every column of the row).
    ``features``: default every column but label and id; ``categorical``: default the string
    and boolean features (pass it to add integer columns; a string feature left out of it is
    read as a number). Vocabularies keep the ``max_vocab`` most frequent values. ``split``:
    train/val[/test] fractions, None for no splits (statistics then use every row). Checks
    that need no Spark come first; unknown columns are refused before any full pass.
    """
    t0 = time.monotonic()
    opts = _check_options(label, id, features, categorical, block_rows, max_vocab)
    src_s = _check_parquet_source(src)
    check_world(world_size, num_shards)
    write = WriteOptions(check_split(split), world_size, num_shards, overwrite, compression)

    where = Where(spark, master, spec, team, progress, t0)
    return run_prep("parquet", src_s, dst, write, partial(_run, opts=opts), where)


def _check_options(
    label: str,
    id: str | None,
    features: Sequence[str] | None,
    categorical: Sequence[str] | None,
    block_rows: int,
    max_vocab: int,
) -> _Options:
    if not isinstance(label, str) or not label:
        raise PrepError(f"label must be a column name, got {label!r}", remedy="pass --label COL")
    if block_rows < 1:
        raise PrepError(f"block_rows must be at least 1, got {block_rows}")
    if max_vocab < 1:
        raise PrepError(f"max_vocab must be at least 1, got {max_vocab}")
    names: dict[str, tuple[str, ...] | None] = {}
    for what, given in (("features", features), ("categorical", categorical)):
        if isinstance(given, str):
            raise PrepError(
                f"{what} must be a list of column names, got text {given!r}",
                remedy=f"pass {what}=[{', '.join(repr(s) for s in given.split(','))}]",
            )
        names[what] = None if given is None else tuple(given)
        dup = _first_duplicate(names[what] or ())
        if dup is not None:
            raise PrepError(f"{what} names column {dup!r} twice")
    if features is not None and not features:
        raise PrepError("features is empty", remedy="name at least one column, or leave it out")
    return _Options(label, id, names["features"], names["categorical"], block_rows, max_vocab)


def _first_duplicate(names: Sequence[str]) -> str | None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            return n
        seen.add(n)
    return None


def _check_parquet_source(src: str | os.PathLike[str]) -> str:
    """A local Parquet file or folder as an absolute path (a remote URL as given)."""
    text = os.fspath(src)
    if storage.is_url(text):
        return text
    p = Path(storage.local_path(text)).expanduser()
    if not p.exists():
        raise PrepError(f"source {text} does not exist", remedy="pass a Parquet file or folder")
    if not os.access(p, os.R_OK):
        raise PrepError(f"source {text} is not readable", remedy="check its permissions")
    return str(p.resolve())


def _read(spark: Any, src: str) -> Any:
    """The source as a DataFrame; an unreadable or empty source is a one-line error."""
    from pyspark.errors import AnalysisException

    try:
        df = spark.read.parquet(src)
        df.schema  # noqa: B018  (Spark Connect analyses lazily: its error comes here)
        return df
    except AnalysisException as exc:
        first = str(exc).strip().splitlines()[0][:300]
        raise PrepError(
            f"source {src} cannot be read as Parquet: {first}",
            remedy="pass a Parquet file or a folder of Parquet files",
        ) from exc


def _quarantined(tagged: Any, src: str, cols: TabularColumns) -> list[dict[str, Any]]:
    """The quarantine table's rows (one Spark job)."""
    F = sql_functions(tagged)

    who = (
        F.col(ROW_COL)
        if cols.id is None
        else F.coalesce(F.col(cols.id).cast("string"), F.col(ROW_COL))
    )
    rows = tagged.filter(F.col(REASON_COL).isNotNull()).select(
        who.alias("series_uid"), F.col(REASON_COL).alias("reason")
    )
    return [
        {
            "path": src,
            "series_uid": r["series_uid"],
            "reason": r["reason"],
            "error_type": "BadValue",
            "stage": "parquet",
        }
        for r in rows.collect()
    ]


def _tabular_extra(
    cols: TabularColumns,
    label_values: list[Any],
    stats: dict[str, Any],
    label_counts: list[int],
    with_split: bool,
) -> dict[str, Any]:
    return {
        "label": cols.label,
        "id": cols.id,
        "task": "binary" if len(label_values) == 2 else "multiclass",
        "classes": len(label_values),
        "label_values": [_json_value(v) for v in label_values],
        "numeric": list(cols.numeric),
        "categorical": list(cols.categorical),
        "stats_split": "train" if with_split else "all",
        "stats": stats,
        "label_counts": label_counts,
    }


def _json_value(v: Any) -> Any:
    return v if isinstance(v, (bool, int, float, str)) else str(v)


def _extra(
    src: str,
    cols: TabularColumns,
    fractions: Any,
    tabular: dict[str, Any],
    inputs: int,
    q_rows: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "prep": {
            "kind": "parquet",
            "source": src,
            "split": list(fractions) if fractions else None,
            "split_by": f"hash of column {cols.id}" if cols.id else "hash of all columns",
        },
        "tabular": tabular,
        "quarantine": {
            "inputs": inputs,
            "rows": inputs - len(q_rows),
            "files": len(q_rows),
            "quarantined": len(q_rows),
            "by_reason": by_reason(q_rows),
        },
    }


def _run(run: PrepRun, spark: Any, opts: _Options) -> PrepResult:
    F = sql_functions(spark)
    src, write = run.src, run.write
    with run.watching(spark, phase="schema") as watch:
        df = _read(spark, src)
        cols = plan_columns(df.schema, opts.label, opts.id, opts.features, opts.categorical)
        tagged = tag_rows(df, cols, write.fractions)
        valid = tagged.filter(F.col(REASON_COL).isNull())
        watch.phase = "quarantine"
        q_rows = _quarantined(tagged, src, cols)
        run.counters["quarantined"].add(len(q_rows))
        watch.phase = "labels"
        label_values, n_valid = label_classes(valid, cols.label)
        inputs = n_valid + len(q_rows)
        run.check_outcome(inputs, n_valid, q_rows)
        watch.phase = "stats"
        stats_rows = valid.filter(F.col(SPLIT_COL) == "train") if write.fractions else valid
        numeric, label_counts = numeric_stats(stats_rows, cols, label_values)
        categories = category_stats(stats_rows, cols, opts.max_vocab)
        tabular = _tabular_extra(
            cols,
            label_values,
            {"numeric": numeric, "categorical": categories},
            label_counts,
            bool(write.fractions),
        )
        watch.phase = "write"
        manifest = write_table(
            tabular_frame(valid, cols, label_values, categories, bool(write.fractions)),
            run.root,
            **run.write_args(split_col=SPLIT_COL),
            block_rows=opts.block_rows,
            extra=_extra(src, cols, write.fractions, tabular, inputs, q_rows),
            files=quarantine_table(q_rows),
        )
        run.counters["rows"].add(n_valid)
    label_map = {str(i): str(v) for i, v in enumerate(label_values)}
    result = run.result(
        manifest, inputs=inputs, files_in_rows=n_valid, q_rows=q_rows, label_map=label_map
    )
    # a table dataset's records are blocks: its result counts rows
    return dataclasses.replace(result, rows=n_valid, splits=_split_rows(manifest))


def _split_rows(manifest: Any) -> dict[str, int]:
    """Rows (not blocks) per split of a committed table dataset."""
    shard_rows = manifest.extra["table"]["shard_rows"]
    return {
        name: sum(int(shard_rows.get(p, 0)) for p in paths)
        for name, paths in manifest.splits.items()
    }
