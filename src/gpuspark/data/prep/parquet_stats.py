"""The DataFrame side of ``prep parquet``: which columns are numeric or categorical, the
quarantine reason and split of each row, the label classes, and the feature statistics.

Everything here builds Spark column expressions or runs one aggregation; the job itself
(session, quarantine table, write) is :mod:`gpuspark.data.prep.parquet`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuspark._util.spark_compat import sql_functions, sql_window
from gpuspark.data.sources import SPLIT_NAMES
from gpuspark.errors import PrepError, did_you_mean

__all__ = [
    "MAX_CLASSES",
    "REASON_COL",
    "ROW_COL",
    "SPLIT_COL",
    "TabularColumns",
    "category_stats",
    "label_classes",
    "numeric_stats",
    "plan_columns",
    "split_column",
    "tabular_frame",
    "tag_rows",
]

MAX_CLASSES = 100
"""More distinct labels than this: the label is taken for a regression target (refused)."""
REASON_COL = "__gpuspark_reason"
ROW_COL = "__gpuspark_row"
SPLIT_COL = "split"
_FLOAT32_MAX = 3.4028234663852886e38
_NUMERIC_TYPES = ("boolean", "byte", "short", "integer", "long", "float", "double", "decimal")
_CATEGORY_TYPES = ("string", "boolean", "byte", "short", "integer", "long")
_SPLIT_SALT = "gpuspark-split"
_BUCKETS = 1 << 30


@dataclass(frozen=True)
class TabularColumns:
    """The source columns of a tabular dataset and their Spark type names."""

    label: str
    id: str | None
    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    types: dict[str, str]
    """Spark type name (``DataType.typeName()``) of every source column."""

    def as_number(self, F: Any, name: str) -> Any:
        """Column ``name`` as a double: strings by ``try_cast`` (null when not a number);
        ``F``: the session's functions module (``spark_compat.sql_functions``)."""
        col = F.col(name)
        return col.try_cast("double") if self.types[name] == "string" else col.cast("double")


# --------------------------------------------------------------------------- columns


def plan_columns(
    schema: Any,
    label: str,
    id: str | None,
    features: Sequence[str] | None,
    categorical: Sequence[str] | None,
) -> TabularColumns:
    """Resolve the label, id, numeric and categorical columns against ``schema``.

    ``features`` default: every column but label and id; ``categorical`` default: the string
    and boolean features (given, it is the whole list: a string feature left out is read as a
    number). Unknown names and unsupported types raise :class:`PrepError`.
    """
    types = {f.name: f.dataType.typeName() for f in schema.fields}
    for name, what in ((label, "label"), (id, "id")):
        if name is not None:
            _known(name, types, what)
    if id is not None and id == label:
        raise PrepError(f"the id column {id!r} is also the label", remedy="pass another --id")
    chosen = [c for c in types if c not in (label, id)] if features is None else list(features)
    for name in chosen:
        _known(name, types, "feature")
        if name in (label, id):
            raise PrepError(
                f"column {name!r} is the {'label' if name == label else 'id'} and a feature",
                remedy="leave it out of --features",
            )
    if categorical is None:
        cats = [c for c in chosen if types[c] in ("string", "boolean")]
    else:
        cats = list(categorical)
        for name in cats:
            _known(name, types, "categorical")
            _categorical_type(name, types[name])
    chosen += [c for c in cats if c not in chosen]
    numeric = [c for c in chosen if c not in cats]
    for name in numeric:
        _numeric_type(name, types[name])
    if not chosen:
        raise PrepError(f"no feature column besides the label {label!r}", remedy="add columns")
    return TabularColumns(label, id, tuple(numeric), tuple(cats), types)


def _known(name: str, types: dict[str, str], what: str) -> None:
    if name not in types:
        raise PrepError(
            f"{what} column {name!r} is not in the source{did_you_mean(name, list(types))}",
            remedy="columns: " + ", ".join(types),
        )


def _numeric_type(name: str, type_name: str) -> None:
    if type_name not in _NUMERIC_TYPES and type_name != "string":
        raise PrepError(
            f"feature column {name!r} has type {type_name}, which is neither a number nor a "
            "category",
            remedy="cast it to a number or a string, or leave it out of --features",
        )


def _categorical_type(name: str, type_name: str) -> None:
    if type_name not in _CATEGORY_TYPES:
        raise PrepError(
            f"categorical column {name!r} has type {type_name}",
            remedy="categorical columns are strings, booleans or integers: cast it first",
        )


# --------------------------------------------------------------------------- rows


def split_column(
    F: Any,
    cols: TabularColumns,
    fractions: Sequence[float] | None,
    all_cols: list[str],
) -> Any:
    """The split of each row (``train``/``val``/``test``) by a stable hash of the id column,
    or of every source column without one: no entity is in two splits. ``F``: the session's
    functions module."""

    keys = [F.col(cols.id)] if cols.id is not None else [F.col(c) for c in all_cols]
    bucket = F.pmod(F.xxhash64(F.lit(_SPLIT_SALT), *keys), F.lit(_BUCKETS)) / float(_BUCKETS)
    if not fractions:
        return F.lit(None).cast("string")
    expr, acc = None, 0.0
    names = list(SPLIT_NAMES[: len(fractions)])
    for name, frac in zip(names[:-1], fractions[:-1], strict=True):
        acc += frac
        expr = F.when(bucket < acc, name) if expr is None else expr.when(bucket < acc, name)
    return F.lit(names[-1]) if expr is None else expr.otherwise(names[-1])


def _reason(F: Any, cols: TabularColumns) -> Any:
    """Why a row is quarantined (null when it is not): the first bad value found."""

    label = F.col(cols.label)
    checks = [(label.isNull(), F.lit(f"column {cols.label}: null label"))]
    if cols.types[cols.label] in ("float", "double"):
        checks.append((F.isnan(label), F.lit(f"column {cols.label}: NaN label")))
    if cols.id is not None:
        checks.append((F.col(cols.id).isNull(), F.lit(f"column {cols.id}: null id")))
    for name in cols.numeric:
        kind = cols.types[name]
        value = cols.as_number(F, name)
        if kind == "string":
            bad = F.col(name).isNotNull() & value.isNull()
            text = F.concat(F.lit(f"column {name}: "), F.col(name), F.lit(" is not a number"))
            checks.append((bad, text))
        if kind in ("float", "double", "decimal", "string"):
            checks.append((F.abs(value) == float("inf"), F.lit(f"column {name}: infinite value")))
            checks.append(
                (F.abs(value) > _FLOAT32_MAX, F.lit(f"column {name}: outside the float32 range"))
            )
    expr = F.when(checks[0][0], checks[0][1])
    for cond, text in checks[1:]:
        expr = expr.when(cond, text)
    return expr


def tag_rows(df: Any, cols: TabularColumns, fractions: Sequence[float] | None) -> Any:
    """``df`` with the quarantine reason, a row number text and the split of each row."""
    F = sql_functions(df)

    source = list(df.columns)
    for name in (REASON_COL, ROW_COL, SPLIT_COL):
        if name in source:
            raise PrepError(
                f"the source has a column named {name!r}, which prep parquet uses itself",
                remedy="rename that column",
            )
    row = F.concat(F.lit("row "), F.monotonically_increasing_id().cast("string"))
    return df.withColumns(
        {
            REASON_COL: _reason(F, cols),
            ROW_COL: row,
            SPLIT_COL: split_column(F, cols, fractions, source),
        }
    )


# --------------------------------------------------------------------------- labels, stats


def label_classes(valid: Any, label: str) -> tuple[list[Any], int]:
    """The sorted distinct labels of the valid rows and the number of valid rows (one job).
    More than :data:`MAX_CLASSES` labels, or one, raise :class:`PrepError`."""
    F = sql_functions(valid)

    rows = valid.groupBy(label).agg(F.count(F.lit(1)).alias("n")).limit(MAX_CLASSES + 1).collect()
    if len(rows) > MAX_CLASSES:
        raise PrepError(
            f"label column {label!r} has more than {MAX_CLASSES} distinct values: regression "
            "is not supported",
            remedy="pass a class label (bin a numeric target into classes first)",
        )
    if len(rows) < 2:
        values = [r[label] for r in rows]
        raise PrepError(
            f"label column {label!r} has {len(rows)} distinct value(s) {values} in the valid rows",
            remedy="a classifier needs at least two classes",
        )
    return sorted(r[label] for r in rows), sum(int(r["n"]) for r in rows)


def _number(v: Any) -> float | None:
    """A JSON-safe float: NaN (and no value) -> None."""
    if v is None:
        return None
    f = float(v)
    return None if math.isnan(f) else f


def numeric_stats(
    rows: Any, cols: TabularColumns, label_values: list[Any]
) -> tuple[dict[str, dict[str, Any]], list[int]]:
    """count, missing (null or NaN), mean, std (sample), min, max of every numeric feature
    and the rows per class, over ``rows``, in one aggregation."""
    F = sql_functions(rows)

    aggs = [F.count(F.lit(1)).alias("__n")]
    for i, name in enumerate(cols.numeric):
        v = cols.as_number(F, name)
        v = F.when(~F.isnan(v), v)
        aggs += [
            F.count(v).alias(f"c{i}"),
            F.avg(v).alias(f"mean{i}"),
            F.stddev_samp(v).alias(f"std{i}"),
            F.min(v).alias(f"min{i}"),
            F.max(v).alias(f"max{i}"),
        ]
    label = F.col(cols.label)
    aggs += [
        F.count(F.when(label == F.lit(v), 1)).alias(f"l{k}") for k, v in enumerate(label_values)
    ]
    got = rows.agg(*aggs).first().asDict()
    stats = {
        name: {
            "count": int(got[f"c{i}"]),
            "missing": int(got["__n"]) - int(got[f"c{i}"]),
            "mean": _number(got[f"mean{i}"]),
            "std": _number(got[f"std{i}"]),
            "min": _number(got[f"min{i}"]),
            "max": _number(got[f"max{i}"]),
        }
        for i, name in enumerate(cols.numeric)
    }
    return stats, [int(got[f"l{k}"]) for k in range(len(label_values))]


def category_stats(rows: Any, cols: TabularColumns, max_vocab: int) -> dict[str, dict[str, Any]]:
    """Per categorical column: the ``max_vocab`` most frequent values (ties by value) with
    their counts, the missing rows and the rows whose value was not kept, in one job."""
    F, Window = sql_functions(rows), sql_window(rows)
    if not cols.categorical:
        return {}
    pairs = F.explode(
        F.array(
            *[
                F.struct(F.lit(i).alias("k"), F.col(name).cast("string").alias("v"))
                for i, name in enumerate(cols.categorical)
            ]
        )
    )
    counts = rows.select(pairs.alias("p")).select("p.k", "p.v").groupBy("k", "v").count()
    by_col = Window.partitionBy("k")
    rank = F.row_number().over(by_col.orderBy(F.col("v").isNull(), F.desc("count"), "v"))
    kept = (
        counts.withColumn("rank", rank)
        .withColumn("total", F.sum("count").over(by_col))
        .filter((F.col("rank") <= max_vocab) | F.col("v").isNull())
        .collect()
    )
    return {name: _vocab(kept, i, cols.types[name]) for i, name in enumerate(cols.categorical)}


def _vocab(kept: list[Any], k: int, type_name: str) -> dict[str, Any]:
    mine = [r for r in kept if r["k"] == k]
    missing = sum(int(r["count"]) for r in mine if r["v"] is None)
    values = sorted((r for r in mine if r["v"] is not None), key=lambda r: r["rank"])
    total = int(mine[0]["total"]) if mine else 0
    counts = [int(r["count"]) for r in values]
    return {
        "vocab": [_typed(r["v"], type_name) for r in values],
        "counts": counts,
        "missing": missing,
        "other": total - missing - sum(counts),
    }


def _typed(text: str, type_name: str) -> Any:
    """A vocabulary value (Spark's string cast) back in its column's type, for the manifest."""
    if type_name == "boolean":
        return text == "true"
    if type_name in ("byte", "short", "integer", "long"):
        return int(text)
    return text


# --------------------------------------------------------------------------- output rows


def tabular_frame(
    valid: Any,
    cols: TabularColumns,
    label_values: list[Any],
    categories: dict[str, dict[str, Any]],
    with_split: bool,
) -> Any:
    """The rows to write: ``id`` (string), ``label`` (class index), ``x`` (float32 numeric
    features, NaN when missing), ``c`` (vocabulary codes, 0 = missing or not kept) and the
    split column when ``with_split``."""
    F = sql_functions(valid)

    label_type = cols.types[cols.label]
    classes = F.array(*[F.lit(v).cast(_sql_type(label_type)) for v in label_values])
    nan = F.lit(float("nan")).cast("float")
    x = [F.coalesce(cols.as_number(F, n).cast("float"), nan) for n in cols.numeric]
    out = {
        "id": F.col(cols.id).cast("string") if cols.id is not None else F.col(ROW_COL),
        "label": (F.array_position(classes, F.col(cols.label)) - 1).cast("long"),
        "x": F.array(*x).cast("array<float>"),
    }
    if cols.categorical:
        out["c"] = F.array(
            *[_codes(F, name, categories[name]["vocab"]) for name in cols.categorical]
        ).cast("array<int>")
    select = [e.alias(n) for n, e in out.items()]
    return valid.select(*select, F.col(SPLIT_COL)) if with_split else valid.select(*select)


def _codes(F: Any, name: str, vocab: list[Any]) -> Any:
    """Vocabulary index + 1 of the value of column ``name``; 0 for null or a value not kept."""

    text = F.col(name).cast("string")
    if not vocab:
        return F.lit(0)
    pairs = []
    for i, v in enumerate(vocab):
        key = ("true" if v else "false") if isinstance(v, bool) else str(v)
        pairs += [F.lit(key), F.lit(i + 1)]
    return F.coalesce(F.try_element_at(F.create_map(*pairs), text), F.lit(0))


def _sql_type(type_name: str) -> str:
    return {"integer": "int"}.get(type_name, type_name)
