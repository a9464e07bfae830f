"""Dataset schemas: what each sample key holds, inferred per sample and merged per shard.

A schema maps each key to ``{"kind": "int"|"float"|"bytes"|"str"|"list"|"ndarray"|"encoded"|
"mixed", "count": records having it, ...}`` (``dtype``/``shape`` for arrays, ``None`` in
``shape`` where it varies; ``item`` for lists).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gpuspark.data.format.example import EncodedImage, scalar_kind
from gpuspark.errors import SampleError

__all__ = ["infer_schema", "merge_schema", "merge_spec", "value_spec"]


def value_spec(key: str, value: Any) -> dict[str, Any]:
    """The schema entry of one value (without ``count``); :class:`SampleError` if it cannot
    be stored."""
    kind = scalar_kind(value)
    if kind is not None:
        return {"kind": kind}
    if isinstance(value, EncodedImage):
        return {"kind": "encoded", "format": value.format}
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        return {"kind": "ndarray", "dtype": arr.dtype.name, "shape": list(arr.shape)}
    if isinstance(value, (list, tuple)):
        kinds = {scalar_kind(v) for v in value}
        return {"kind": "list", "item": kinds.pop() if len(kinds) == 1 else None}
    if isinstance(value, (bytearray, memoryview)):
        return {"kind": "bytes"}
    raise SampleError(f"sample key {key!r}: values of type {type(value).__name__} cannot be stored")


def infer_schema(sample: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Schema of one sample: ``{key: {"kind": ..., ...}, ...}`` with a ``count`` of 1."""
    return {k: {**value_spec(k, v), "count": 1} for k, v in sample.items() if v is not None}


def merge_spec(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Merge two schema entries of one key: counts add up, differing kinds or dtypes become
    ``"mixed"``, differing dimensions ``None``."""
    count = a.get("count", 0) + b.get("count", 0)
    if a["kind"] != b["kind"]:
        return {"kind": "mixed", "count": count}
    out = {**a, "count": count}
    if a["kind"] == "ndarray":
        if a["dtype"] != b["dtype"]:
            return {"kind": "mixed", "count": count}
        sa, sb = a.get("shape"), b.get("shape")
        if sa is None or sb is None or len(sa) != len(sb):
            out["shape"] = None
        else:
            out["shape"] = [x if x == y else None for x, y in zip(sa, sb, strict=True)]
    elif a["kind"] == "list":
        ia, ib = a.get("item"), b.get("item")
        out["item"] = ia if ib is None else ib if ia is None else ia if ia == ib else "mixed"
    elif a["kind"] == "encoded" and a.get("format") != b.get("format"):
        out["format"] = None
    return out


def merge_schema(
    a: Mapping[str, dict[str, Any]], b: Mapping[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Merge two schemas (per-key kinds, dtypes, fixed shapes; ``None`` dims vary)."""
    out = {k: dict(v) for k, v in a.items()}
    for key, spec in b.items():
        out[key] = merge_spec(out[key], spec) if key in out else dict(spec)
    return out
