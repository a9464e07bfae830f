"""The input side of batch prediction: the input's columns checked against the model's, and the
Spark expressions that encode a row exactly as ``gpuspark prep parquet`` did (numbers as
float32 with null = missing, categories as vocabulary codes with 0 = missing or unseen), plus
the reason a row cannot be scored.

A missing feature column, or one of a type the prep job would not read, is an error of the
whole job, raised before any Spark job. A value that cannot be scored is a row error: a NaN,
an infinite number, one outside the float32 range, or text in a numeric column that is not a
number. Those rows go to the quarantine table with their reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuspark.errors import GpusparkError, RecipeError, did_you_mean
from gpuspark.infer.model import TabularServing

__all__ = [
    "CODES_COL",
    "NUMBERS_COL",
    "REASON_COL",
    "InputPlan",
    "arrow_kinds",
    "column",
    "encoded_frame",
    "plan_input",
    "spark_kinds",
]

NUMBERS_COL = "__gpuspark_x"
CODES_COL = "__gpuspark_c"
REASON_COL = "__gpuspark_reason"
RESERVED = (NUMBERS_COL, CODES_COL, REASON_COL)
_FLOAT32_MAX = 3.4028234663852886e38
NUMBER, TEXT, CATEGORY, OTHER = "number", "text", "category", "other"
"""Kinds of input column: a number type, text, an integer/boolean (number or category)."""


@dataclass(frozen=True)
class InputPlan:
    """The input's columns as the job uses them."""

    keep: tuple[str, ...]
    """Columns copied to the predictions (and the quarantine table)."""
    kinds: dict[str, str]
    """Kind of every input column (:data:`NUMBER`, :data:`TEXT`, :data:`CATEGORY`, ...)."""


def spark_kinds(schema: Any) -> dict[str, str]:
    """The kind of every column of a Spark schema."""
    kinds = {}
    for f in schema.fields:
        name = f.dataType.typeName()
        if name in ("boolean", "byte", "short", "integer", "long"):
            kinds[f.name] = CATEGORY
        elif name in ("float", "double", "decimal"):
            kinds[f.name] = NUMBER
        elif name == "string":
            kinds[f.name] = TEXT
        else:
            kinds[f.name] = OTHER
    return kinds


def arrow_kinds(schema: Any) -> dict[str, str]:
    """The kind of every column of a pyarrow schema (as Spark would read it)."""
    import pyarrow.types as pt

    kinds = {}
    for f in schema:
        t = f.type
        if pt.is_boolean(t) or pt.is_integer(t):
            kinds[f.name] = CATEGORY
        elif pt.is_floating(t) or pt.is_decimal(t):
            kinds[f.name] = NUMBER
        elif pt.is_string(t) or pt.is_large_string(t):
            kinds[f.name] = TEXT
        else:
            kinds[f.name] = OTHER
    return kinds


def plan_input(
    kinds: Mapping[str, str], serving: TabularServing, model: str, source: str, id: str | None
) -> InputPlan:
    """Check the input's columns against the model's (one line naming the mismatch) and
    choose the kept columns: ``id``, else every column that is not a feature."""
    missing = [c for c in serving.features if c not in kinds]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        shown = ", ".join(missing[:5]) + more
        raise RecipeError(
            f"input {source} lacks {len(missing)} feature column(s) of model {model}: {shown}"
            f"{did_you_mean(missing[0], list(kinds))}",
            remedy="score a table with the columns the model was trained on "
            f"({', '.join(serving.features[:8])}{', ...' if len(serving.features) > 8 else ''})",
        )
    for name in serving.numeric:
        if kinds[name] not in (NUMBER, TEXT, CATEGORY):
            raise RecipeError(
                f"input {source}: numeric feature {name!r} of model {model} is not a number "
                "or text column",
                remedy=f"cast {name} to a number",
            )
    for name in serving.categorical:
        if kinds[name] not in (TEXT, CATEGORY):
            raise RecipeError(
                f"input {source}: categorical feature {name!r} of model {model} is neither "
                "text, an integer nor a boolean",
                remedy=f"cast {name} to the type it had in training",
            )
    keep = _kept(kinds, serving, source, id)
    return InputPlan(keep=keep, kinds=dict(kinds))


def _kept(
    kinds: Mapping[str, str], serving: TabularServing, source: str, id: str | None
) -> tuple[str, ...]:
    reserved = [c for c in kinds if c in RESERVED]
    if reserved:
        raise GpusparkError(
            f"input {source} has a column named {reserved[0]!r}, which predict uses itself",
            remedy="rename that column",
        )
    if id is not None:
        if id not in kinds:
            raise GpusparkError(
                f"--id column {id!r} is not in input {source}{did_you_mean(id, list(kinds))}",
                remedy="columns: " + ", ".join(list(kinds)[:20]),
            )
        return (id,)
    features = set(serving.features)
    return tuple(c for c in kinds if c not in features)


def encoded_frame(df: Any, serving: TabularServing, keep: Sequence[str]) -> Any:
    """``df`` as the kept columns, the numbers (``array<float>``, when the model has numeric
    features), the codes (``array<int>``, when it has categorical ones) and the reason
    (null when the row can be scored)."""
    from pyspark.sql import functions as F

    kinds = spark_kinds(df.schema)
    cols = [column(c) for c in keep]
    if serving.numeric:
        nan = F.lit(float("nan")).cast("float")
        x = [F.coalesce(_number(n, kinds[n]).cast("float"), nan) for n in serving.numeric]
        cols.append(F.array(*x).cast("array<float>").alias(NUMBERS_COL))
    if serving.categorical:
        codes = [_codes(n, v) for n, v in zip(serving.categorical, serving.vocab, strict=True)]
        cols.append(F.array(*codes).cast("array<int>").alias(CODES_COL))
    cols.append(_reason(serving, kinds).alias(REASON_COL))
    return df.select(*cols)


def column(name: str) -> Any:
    """Column ``name`` taken literally (a dot or a space in it is part of the name)."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _number(name: str, kind: str) -> Any:
    """Column ``name`` as a double: text by ``try_cast`` (null when not a number), as prep."""
    col = column(name)
    return col.try_cast("double") if kind == TEXT else col.cast("double")


def _codes(name: str, vocab: Sequence[str]) -> Any:
    """Vocabulary index + 1 of the value of ``name`` cast to text; 0 for null or a value the
    vocabulary did not keep (the prep job's "other")."""
    from pyspark.sql import functions as F

    if not vocab:
        return F.lit(0)
    pairs = []
    for i, key in enumerate(vocab):
        pairs += [F.lit(key), F.lit(i + 1)]
    text = column(name).cast("string")
    return F.coalesce(F.try_element_at(F.create_map(*pairs), text), F.lit(0))


def _reason(serving: TabularServing, kinds: Mapping[str, str]) -> Any:
    """Why a row cannot be scored (the first bad value), null when it can."""
    from pyspark.sql import functions as F

    checks = []
    for name in serving.numeric:
        kind, value = kinds[name], _number(name, kinds[name])
        if kind == TEXT:
            bad = column(name).isNotNull() & value.isNull()
            text = F.concat(F.lit(f"column {name}: not a number: '"), column(name), F.lit("'"))
            checks.append((bad, text))
        if kind in (TEXT, NUMBER):
            checks.append((F.isnan(value), F.lit(f"column {name}: NaN value")))
            checks.append((F.abs(value) == float("inf"), F.lit(f"column {name}: infinite value")))
            checks.append(
                (F.abs(value) > _FLOAT32_MAX, F.lit(f"column {name}: outside the float32 range"))
            )
    if not checks:
        return F.lit(None).cast("string")
    expr = F.when(checks[0][0], checks[0][1])
    for cond, text in checks[1:]:
        expr = expr.when(cond, text)
    return expr
