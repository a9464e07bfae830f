"""The column types of a Parquet input's files, read from their footers before any Spark job.

Spark takes a folder's schema from one file and reads every other file as that schema, so
files that disagree on a column's type fail the job halfway with hundreds of lines of
``FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH``. Here the footers are compared first:
types Spark can read as one wider type (whole numbers of several widths as ``bigint``,
whole numbers and floats as ``double``, a column of nulls as anything) are read as that type,
without losing a value; any other disagreement is a one-line error that names the column,
each type and a file that holds it (:func:`check_file_types`). Types outside numbers, text
and booleans (timestamps, decimals, nested) are left to Spark, whose failure
:func:`mismatch_error` turns into one line too.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuspark.errors import RecipeError

__all__ = ["FileTypes", "check_file_types", "file_types", "mismatch_error"]

_WIDER = (
    ("bigint", frozenset({"int", "bigint"})),
    ("double", frozenset({"int", "float", "double"})),
)
"""The wider type Spark reads a mix of files as (each checked: Spark 4 reads INT32 as
``bigint`` and ``double``, FLOAT as ``double``; never INT64 as ``double``)."""
_ARROW = {"int": "int32", "bigint": "int64", "float": "float", "double": "double"}
_ARROW |= {"string": "string", "boolean": "bool"}
"""The pyarrow type of each Spark type here (what the input's kinds are computed from)."""
_MISMATCH = re.compile(
    r"reading file (?P<file>\S+?)\. Data type mismatches when reading Parquet column "
    r"\[?(?P<column>[^\]]+?)\]?\. Expected Spark type (?P<expected>\S+), actual Parquet "
    r"type (?P<actual>\w+)"
)


@dataclass(frozen=True)
class FileTypes:
    """What the footers of an input's files say about its columns."""

    files: int
    """Files read."""
    read_as: dict[str, str] = field(default_factory=dict)
    """Columns whose files hold different types that Spark reads as one: the Spark type."""
    conflicts: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """Columns whose files hold types no one type reads: type -> the files that hold it."""

    def arrow_type(self, column: str) -> str | None:
        """The pyarrow type name ``column`` is read as, when the files made it wider."""
        spark = self.read_as.get(column)
        return _ARROW[spark] if spark is not None else None


def _spark_type(arrow: Any) -> str | None:
    """The Spark type a Parquet column of pyarrow type ``arrow`` is read as: ``null`` for a
    column of nulls; ``None`` for a type whose mix is left to Spark."""
    import pyarrow.types as pt

    if pt.is_null(arrow):
        return "null"
    if pt.is_boolean(arrow):
        return "boolean"
    if pt.is_int8(arrow) or pt.is_int16(arrow) or pt.is_int32(arrow):
        return "int"
    if pt.is_uint8(arrow) or pt.is_uint16(arrow):
        return "int"
    if pt.is_int64(arrow):
        return "bigint"
    if pt.is_float32(arrow):
        return "float"
    if pt.is_float64(arrow):
        return "double"
    if pt.is_string(arrow) or pt.is_large_string(arrow):
        return "string"
    return None


def file_types(schemas: Iterable[tuple[str, Any]]) -> FileTypes:
    """Compare the pyarrow schemas of an input's files, ``(file name, schema)`` each."""
    seen: dict[str, dict[str, list[str]]] = {}
    spark: dict[str, dict[str, str | None]] = {}
    files = 0
    for name, schema in schemas:
        files += 1
        for f in schema:
            seen.setdefault(f.name, {}).setdefault(str(f.type), []).append(name)
            spark.setdefault(f.name, {})[str(f.type)] = _spark_type(f.type)
    read_as: dict[str, str] = {}
    conflicts: dict[str, dict[str, list[str]]] = {}
    for column, by_type in seen.items():
        if len(by_type) < 2:
            continue
        named = set(spark[column].values())
        if None in named:
            continue  # a timestamp, decimal, nested...: Spark's own rules
        kinds = {k for k in named if k is not None and k != "null"}
        wider = _wider(kinds)
        if wider is not None:
            read_as[column] = wider
        elif kinds:
            conflicts[column] = by_type
    return FileTypes(files, read_as, conflicts)


def _wider(kinds: set[str]) -> str | None:
    """The one type Spark reads every file's ``kinds`` as, or ``None``."""
    if len(kinds) == 1:
        return next(iter(kinds))
    for wide, narrower in _WIDER:
        if kinds <= narrower:
            return wide
    return None


def check_file_types(
    found: FileTypes,
    columns: Sequence[str],
    source: str,
    numeric: Collection[str] = (),
    categorical: Collection[str] = (),
) -> None:
    """Refuse, in one line, the first of ``columns`` (the columns the job reads) whose files
    disagree on its type: each type with its files, and how the model reads the column
    (``numeric`` and ``categorical``: its features)."""
    for column in columns:
        by_type = found.conflicts.get(column)
        if by_type is None:
            continue
        groups = sorted(by_type.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        types = "; ".join(_group(t, names, found.files) for t, names in groups)
        if column in numeric:
            reads, fix = "; the model reads it as a number", f"{column} cast to double"
        elif column in categorical:
            reads, fix = "; the model reads it as a category", f"{column} of its type in training"
        else:
            reads, fix = "", f"one type for {column}, or keep only an id column with --id COL"
        raise RecipeError(
            f"input {source}: its files disagree on the type of column {column!r}: {types}{reads}",
            remedy=f"rewrite the files with {fix}",
        )


def _group(arrow: str, names: list[str], total: int) -> str:
    first = ", ".join(names[:2]) + (", ..." if len(names) > 2 else "")
    return f"{arrow} in {len(names)} of {total} files ({first})"


def mismatch_error(exc: BaseException, source: str) -> RecipeError | None:
    """Spark's ``PARQUET_COLUMN_DATA_TYPE_MISMATCH`` (files that disagree on a column's type,
    found while the job reads them) as one line; ``None`` for any other failure."""
    text = str(exc)
    if "PARQUET_COLUMN_DATA_TYPE_MISMATCH" not in text:
        return None
    m = _MISMATCH.search(text)
    if m is None:
        return RecipeError(
            f"input {source}: its files disagree on the type of a column",
            remedy="write every file with one type per column",
        )
    path = m["file"].removeprefix("file://")
    return RecipeError(
        f"input {source}: its files disagree on the type of column {m['column']!r}: "
        f"{path} holds {m['actual'].lower()} where another file has {m['expected']}",
        remedy=f"write every file with one type for {m['column']}",
    )
