"""Blocks: up to ``block_rows`` rows of a table stored column by column in one record.

One ``tf.train.Example`` per row costs a protobuf walk per row (tens of thousands of rows per
second in Python); a block costs a few ``np.frombuffer`` calls per thousand rows. For a block
of ``b`` rows, each column ``NAME`` is stored as (through the ordinary Example codec):

======================  =========================================================================
column kind             stored as
======================  =========================================================================
``number``              column j of ``#DTYPE``: one numpy array [b, k] per dtype holding the
                        table's k number columns of that dtype, in table order (exact values;
                        one feature instead of k, which is what makes wide tables fast)
``string`` / ``binary``  ``NAME``: list of b ``str`` / ``bytes``
``array`` (numbers)     numpy array [b, d] when every row has length d and none is null; else the
                        values flattened [sum of lengths] plus ``NAME#len`` (int32 [b])
``string_array``        values flattened (list of ``str``) plus ``NAME#len``
======================  =========================================================================

A column with a null in the block also gets ``NAME#null`` (bool [b], True = null); the null's
slot holds 0, ``""``, ``b""`` or an empty list.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuspark.data.format.table.columns import TableColumn
from gpuspark.errors import TableError

__all__ = [
    "BlockParts",
    "concat_arrays",
    "concat_parts",
    "decode_block",
    "decode_parts",
    "encode_block",
    "number_index",
    "rechunk",
]

LEN = "#len"
NULL = "#null"
NUMBERS = "#"
"""Prefix of the per-dtype matrices of number columns (``#float64``, ``#int32``, ...)."""


def rechunk(batches: Iterable[Any], rows: int) -> Iterator[Any]:
    """Arrow record batches regrouped into batches of exactly ``rows`` rows (the last one
    shorter), without copying more than the rows that straddle two input batches."""
    import pyarrow as pa

    pending: list[Any] = []
    have = 0
    for batch in batches:
        while batch.num_rows:
            take = min(rows - have, batch.num_rows)
            pending.append(batch.slice(0, take))
            batch = batch.slice(take)
            have += take
            if have == rows:
                yield _combine(pa, pending)
                pending, have = [], 0
    if have:
        yield _combine(pa, pending)


def _combine(pa: Any, parts: list[Any]) -> Any:
    if len(parts) == 1:
        return parts[0]
    return pa.Table.from_batches(parts).combine_chunks().to_batches()[0]


# --------------------------------------------------------------------------- encode


def encode_block(batch: Any, columns: Sequence[TableColumn]) -> dict[str, Any]:
    """The sample (for :func:`gpuspark.data.format.encode_example`) of an Arrow record batch
    holding ``columns``."""
    out: dict[str, Any] = {}
    numbers: dict[str, list[np.ndarray]] = {}
    for col in columns:
        values = batch.column(batch.schema.get_field_index(col.name))
        if values.null_count:
            out[col.name + NULL] = np.asarray(values.is_null().to_numpy(zero_copy_only=False))
        if col.kind == "number":
            numbers.setdefault(str(col.dtype), []).append(_number_values(col, values))
        else:
            _ENCODERS[col.kind](out, col, values)
    for dtype, arrays in numbers.items():
        out[NUMBERS + dtype] = np.stack(arrays, axis=1)
    return out


def _number_values(col: TableColumn, values: Any) -> np.ndarray:
    import pyarrow.compute as pc

    if values.null_count:
        values = pc.fill_null(values, False if col.dtype == "bool" else 0)
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=col.dtype)


def _encode_text(out: dict[str, Any], col: TableColumn, values: Any) -> None:
    import pyarrow.compute as pc

    if values.null_count:
        values = pc.fill_null(values, "" if col.kind == "string" else b"")
    out[col.name] = values.to_pylist()


def _lengths(values: Any) -> np.ndarray:
    import pyarrow.compute as pc

    lengths = pc.fill_null(pc.list_value_length(values), 0)
    return np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.int32)


def _encode_array(out: dict[str, Any], col: TableColumn, values: Any) -> None:
    import pyarrow.compute as pc

    flat = pc.list_flatten(values)
    if flat.null_count:
        if not str(col.dtype).startswith("float"):
            raise TableError(
                f"column {col.name!r}: an array holds a null element",
                remedy="fill the nulls (e.g. transform(col, x -> coalesce(x, 0))) first",
            )
        flat = pc.fill_null(flat, float("nan"))
    data = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=col.dtype)
    lengths = _lengths(values)
    width = int(lengths[0]) if len(lengths) else 0
    if not values.null_count and width > 0 and bool((lengths == width).all()):
        out[col.name] = data.reshape(len(lengths), width)
    else:
        out[col.name] = data
        out[col.name + LEN] = lengths


def _encode_string_array(out: dict[str, Any], col: TableColumn, values: Any) -> None:
    import pyarrow.compute as pc

    flat = pc.list_flatten(values)
    if flat.null_count:
        flat = pc.fill_null(flat, "")
    out[col.name] = flat.to_pylist()
    out[col.name + LEN] = _lengths(values)


_ENCODERS = {
    "string": _encode_text,
    "binary": _encode_text,
    "array": _encode_array,
    "string_array": _encode_string_array,
}


# --------------------------------------------------------------------------- decode


def decode_block(
    sample: dict[str, Any], columns: Sequence[TableColumn], names: Iterable[str] | None = None
) -> dict[str, Any]:
    """A decoded block record (``decode_example_views`` output, no schema) as columns.

    Numbers: 1-D arrays [b] (a ``numpy.ma`` masked array when the block has nulls); fixed
    arrays: 2-D [b, d]; ragged arrays: object arrays of 1-D arrays; strings and binaries:
    object arrays [b] (``None`` for nulls). ``names`` selects columns (default: all).
    """
    wanted = None if names is None else set(names)
    out: dict[str, Any] = {}
    position: dict[str, tuple[str, int]] | None = None
    for col in columns:
        if wanted is not None and col.name not in wanted:
            continue
        if col.kind == "number":
            position = position if position is not None else number_index(columns)
            dtype, j = position[col.name]
            value = np.asarray(sample[NUMBERS + dtype])[:, j]
        else:
            value = _DECODERS[col.kind](sample, col)
        nulls = sample.get(col.name + NULL)
        if nulls is not None:
            value = _with_nulls(value, np.asarray(nulls, dtype=bool), col.kind)
        out[col.name] = value
    return out


def number_index(columns: Sequence[TableColumn]) -> dict[str, tuple[str, int]]:
    """``name -> (dtype, j)``: where each number column lives in a block (column ``j`` of
    the ``#dtype`` matrix)."""
    seen: dict[str, int] = {}
    out: dict[str, tuple[str, int]] = {}
    for col in columns:
        if col.kind == "number":
            j = seen.get(str(col.dtype), 0)
            out[col.name] = (str(col.dtype), j)
            seen[str(col.dtype)] = j + 1
    return out


@dataclass
class BlockParts:
    """Rows as the table readers' fast path needs them: the number matrices whole (one per
    dtype, rows x number columns of that dtype), the null masks of number columns that have
    nulls in these rows, and every other selected column decoded as :func:`decode_block`
    does. A decoded block, a slice of one, or several concatenated (:func:`concat_parts`)."""

    matrices: dict[str, np.ndarray]
    masks: dict[str, np.ndarray]
    others: dict[str, Any]
    rows: int

    def slice(self, lo: int, hi: int) -> BlockParts:
        """Rows ``lo:hi`` (views, no copy)."""
        return BlockParts(
            {d: m[lo:hi] for d, m in self.matrices.items()},
            {n: m[lo:hi] for n, m in self.masks.items()},
            {n: v[lo:hi] for n, v in self.others.items()},
            max(0, min(hi, self.rows) - max(lo, 0)),
        )

    def take(self, perm: np.ndarray) -> BlockParts:
        """Rows in the order ``perm`` (a copy)."""
        return BlockParts(
            {d: m[perm] for d, m in self.matrices.items()},
            {n: m[perm] for n, m in self.masks.items()},
            {n: v[perm] for n, v in self.others.items()},
            len(perm),
        )


def concat_parts(parts: Sequence[BlockParts]) -> BlockParts:
    """The rows of ``parts`` one after the other (a copy; a column with nulls in one part
    gets a mask for all)."""
    masked = {n for p in parts for n in p.masks}
    return BlockParts(
        {d: np.concatenate([p.matrices[d] for p in parts]) for d in parts[0].matrices},
        {
            n: np.concatenate([p.masks.get(n, np.zeros(p.rows, dtype=bool)) for p in parts])
            for n in masked
        },
        {n: concat_arrays([p.others[n] for p in parts]) for n in parts[0].others},
        sum(p.rows for p in parts),
    )


def concat_arrays(values: list[np.ndarray]) -> np.ndarray:
    """One column's arrays one after the other: fixed-width in one and ragged (or of another
    width) in another becomes ragged (object array of 1-D arrays); masked if any is masked."""
    widths = {v.shape[1] if v.ndim == 2 else None for v in values}
    if len(widths) > 1 or (None in widths and any(v.ndim == 2 for v in values)):
        values = [_as_ragged(v) if v.ndim == 2 else v for v in values]
    if any(np.ma.isMaskedArray(v) for v in values):
        return np.ma.concatenate(values)
    return np.concatenate(values)


def _as_ragged(rows: np.ndarray) -> np.ndarray:
    out = np.empty(len(rows), dtype=object)
    for i, row in enumerate(rows):  # per row: object columns only
        out[i] = row
    return out


def decode_parts(
    sample: dict[str, Any], columns: Sequence[TableColumn], names: Iterable[str] | None = None
) -> BlockParts:
    """A decoded block record as :class:`BlockParts` (``names`` selects columns; the matrices
    of the selected number columns' dtypes are returned whole)."""
    wanted = None if names is None else set(names)
    selected = [c for c in columns if wanted is None or c.name in wanted]
    numbers = [c for c in selected if c.kind == "number"]
    matrices = {str(c.dtype): np.asarray(sample[NUMBERS + str(c.dtype)]) for c in numbers}
    masks = {
        c.name: np.asarray(sample[c.name + NULL], dtype=bool)
        for c in numbers
        if c.name + NULL in sample
    }
    others = decode_block(sample, columns, [c.name for c in selected if c.kind != "number"])
    rows = next(iter(matrices.values())).shape[0] if matrices else _rows(others)
    return BlockParts(matrices, masks, others, rows)


def _rows(columns: dict[str, Any]) -> int:
    return len(next(iter(columns.values()))) if columns else 0


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    return [value]


def _decode_text(sample: dict[str, Any], col: TableColumn) -> Any:
    items = _as_list(sample[col.name])
    if col.kind == "string":
        items = [_text(v) for v in items]
    else:
        items = [bytes(v) if isinstance(v, memoryview) else v for v in items]
    arr = np.empty(len(items), dtype=object)
    arr[:] = items
    return arr


def _text(value: Any) -> Any:
    if isinstance(value, memoryview):
        value = bytes(value)
    return value.decode() if isinstance(value, bytes) else value


def _decode_array(sample: dict[str, Any], col: TableColumn) -> Any:
    data = np.asarray(sample[col.name], dtype=col.dtype)
    lengths = sample.get(col.name + LEN)
    if lengths is None:
        return data
    return _split(data, np.asarray(lengths))


def _decode_string_array(sample: dict[str, Any], col: TableColumn) -> Any:
    raw = sample[col.name]
    items = [] if isinstance(raw, list) and not raw else _as_list(raw)
    flat = np.empty(len(items), dtype=object)
    flat[:] = [_text(v) for v in items]
    return _split(flat, np.asarray(sample[col.name + LEN]))


def _split(flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    out = np.empty(len(lengths), dtype=object)
    out[:] = np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []
    return out


def _with_nulls(value: np.ndarray, nulls: np.ndarray, kind: str) -> Any:
    if kind == "number":
        return np.ma.masked_array(value, mask=nulls)
    out = value.astype(object) if value.dtype != object or value.ndim != 1 else value.copy()
    if out.ndim != 1:  # a fixed-width array column never has nulls (see _encode_array)
        return value
    out[nulls] = None
    return out


_DECODERS = {
    "string": _decode_text,
    "binary": _decode_text,
    "array": _decode_array,
    "string_array": _decode_string_array,
}
