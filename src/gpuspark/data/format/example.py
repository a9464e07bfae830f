"""The ``tf.train.Example`` codec: sample dicts to Example payloads and back.

A sample is a ``dict[str, value]``:

============================  ===============================================================
value                         stored as
============================  ===============================================================
``bytes``                     ``bytes_list`` [value]
``str``                       ``bytes_list`` [utf-8]            (schema kind ``"str"``)
``int`` / ``bool``            ``int64_list`` [value]
``float``                     ``float_list`` [value] (TFRecord floats are float32)
``list`` of one of the above  the matching list; ``[]`` is an empty ``int64_list``
``numpy.ndarray`` / scalar    ``<key>/data`` (raw little-endian bytes, C order),
                              ``<key>/shape`` (int64 list), ``<key>/dtype`` (e.g. b"float32")
:class:`EncodedImage`         ``<key>/encoded`` (bytes) + ``<key>/format`` (e.g. b"jpeg")
============================  ===============================================================

:func:`decode_example` reverses it. Arrays come back as read-only ``numpy`` views over the
decoded bytes (``np.frombuffer``, no extra copy; ``.copy()`` if you must write to them). An
encoded image comes back as two keys: ``sample[key]`` (the encoded ``bytes``) and
``sample[key + "/format"]`` (``str``). TFRecord does not tell a ``str`` from ``bytes`` or a
one-element list from a scalar: pass the manifest's ``schema`` to :func:`decode_example` to get
exactly the types that were written; without it, one-element lists become scalars and strings
stay ``bytes`` (the natural reading of a file written by TensorFlow).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from gpuspark.errors import SampleError

__all__ = ["ARRAY_DTYPES", "EncodedImage", "decode_example", "encode_example", "scalar_kind"]

ARRAY_DTYPES = (
    "bool",
    "uint8",
    "int8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
)
_ARRAY_SUFFIXES = ("/data", "/shape", "/dtype")
_IMAGE_SUFFIXES = ("/encoded", "/format")
_RESERVED_SUFFIXES = _ARRAY_SUFFIXES + _IMAGE_SUFFIXES
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class EncodedImage(NamedTuple):
    """An already-encoded image (JPEG, PNG, ...) stored as ``<key>/encoded`` + ``<key>/format``."""

    data: bytes
    format: str


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise SampleError(f"sample key {key!r} must be a non-empty str")
    if key.endswith(_RESERVED_SUFFIXES):
        raise SampleError(
            f"sample key {key!r} ends with a reserved suffix {_RESERVED_SUFFIXES}",
            remedy="rename it; arrays and EncodedImage values create these keys themselves",
        )
    return key


def _array_features(feats: Any, key: str, value: np.ndarray | np.generic) -> None:
    arr = np.asarray(value)
    if arr.dtype.name not in ARRAY_DTYPES:
        raise SampleError(
            f"sample key {key!r}: array dtype {arr.dtype} is not supported",
            remedy=f"convert it to one of {', '.join(ARRAY_DTYPES)}",
        )
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    feats[key + "/data"].bytes_list.value.append(np.ascontiguousarray(arr).tobytes())
    feats[key + "/shape"].int64_list.value.extend(arr.shape)
    feats[key + "/dtype"].bytes_list.value.append(arr.dtype.name.encode())


def scalar_kind(value: object) -> str | None:
    """The schema kind of a plain scalar (``"int"``, ``"float"``, ``"bytes"``, ``"str"``), or
    ``None`` for anything else (numpy scalars included: they are stored as arrays)."""
    if isinstance(value, np.generic):  # np.float64 is a float subclass: keep it exact
        return None
    if isinstance(value, (bool, int)):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, str):
        return "str"
    return None


def _list_features(feats: Any, key: str, values: list | tuple) -> None:
    kinds = {scalar_kind(v) for v in values}
    if None in kinds or len(kinds - {"bytes", "str"}) > 1 or len(kinds) > 1:
        raise SampleError(
            f"sample key {key!r}: list items must all be int, all float or all bytes/str "
            f"(got {sorted({type(v).__name__ for v in values})})",
            remedy="use a numpy array for numeric data of mixed or nested shape",
        )
    kind = kinds.pop() if kinds else "int"
    feature = feats[key]
    if kind == "int":
        _check_int_range(key, values)
        feature.int64_list.value.extend(int(v) for v in values)
    elif kind == "float":
        feature.float_list.value.extend(values)
    else:
        feature.bytes_list.value.extend(v.encode() if isinstance(v, str) else v for v in values)


def _check_int_range(key: str, values: list | tuple) -> None:
    for v in values:
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise SampleError(
                f"sample key {key!r}: int {v} does not fit in int64",
                remedy="store it as bytes or str",
            )


def encode_example(sample: Mapping[str, Any]) -> bytes:
    """Serialize a sample dict as a ``tf.train.Example`` (see the module docstring)."""
    from gpuspark.data.format._example_pb import Example

    example = Example()
    feats = example.features.feature
    for key, value in sample.items():
        _check_key(key)
        if value is None:
            continue
        kind = scalar_kind(value)
        if kind is not None:
            _list_features(feats, key, [value])
        elif isinstance(value, EncodedImage):
            feats[key + "/encoded"].bytes_list.value.append(bytes(value.data))
            feats[key + "/format"].bytes_list.value.append(value.format.encode())
        elif isinstance(value, (np.ndarray, np.generic)):
            _array_features(feats, key, value)
        elif isinstance(value, (list, tuple)):
            _list_features(feats, key, value)
        elif isinstance(value, (bytearray, memoryview)):
            _list_features(feats, key, [bytes(value)])
        else:
            raise SampleError(
                f"sample key {key!r}: values of type {type(value).__name__} cannot be stored",
                remedy="use bytes, str, int, float, a list of those, a numpy array or EncodedImage",
            )
    # deterministic: a protobuf map is serialized in hash-table order otherwise, so the same
    # sample would give other bytes (and another shard hash) in another process
    return example.SerializeToString(deterministic=True)


def _feature_values(feature: Any) -> list:
    kind = feature.WhichOneof("kind")
    return list(getattr(feature, kind).value) if kind else []


def _natural(values: list) -> Any:
    return values[0] if len(values) == 1 else values


def decode_example(
    data: bytes | bytearray | memoryview, schema: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Parse a ``tf.train.Example`` payload back into a sample dict.

    Arrays come back as read-only numpy views over the payload's bytes (no extra copy); an
    encoded image ``img`` comes back as ``{"img": bytes, "img/format": str}``. With
    ``schema`` (``Manifest.schema``), strings, scalars and lists come back exactly as
    written; without it, one-element lists become scalars and strings stay ``bytes``.
    """
    from gpuspark.data.format._example_pb import Example

    example = Example()
    try:
        example.ParseFromString(bytes(data) if isinstance(data, memoryview) else data)
    except Exception as exc:  # protobuf's DecodeError
        raise SampleError(f"record payload is not a tf.train.Example ({exc})") from None
    feats = example.features.feature
    out: dict[str, Any] = {}
    done: set[str] = set()
    for name in feats:
        if name in done:
            continue
        base, _, suffix = name.rpartition("/")
        if base and "/" + suffix in _ARRAY_SUFFIXES and _has_all(feats, base, _ARRAY_SUFFIXES):
            out[base] = _decode_array(feats, base)
            done.update(base + s for s in _ARRAY_SUFFIXES)
        elif base and "/" + suffix in _IMAGE_SUFFIXES and _has_all(feats, base, _IMAGE_SUFFIXES):
            out[base] = feats[base + "/encoded"].bytes_list.value[0]
            out[base + "/format"] = feats[base + "/format"].bytes_list.value[0].decode()
            done.update(base + s for s in _IMAGE_SUFFIXES)
        else:
            out[name] = _typed(_feature_values(feats[name]), (schema or {}).get(name))
    return out


def _has_all(feats: Any, base: str, suffixes: tuple[str, ...]) -> bool:
    return all(base + s in feats for s in suffixes)


def _decode_array(feats: Any, base: str) -> np.ndarray:
    raw = feats[base + "/data"].bytes_list.value[0]
    shape = tuple(feats[base + "/shape"].int64_list.value)
    dtype = np.dtype(feats[base + "/dtype"].bytes_list.value[0].decode()).newbyteorder("<")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _typed(values: list, spec: Mapping[str, Any] | None) -> Any:
    kind = spec.get("kind") if spec else None
    if spec is None or kind is None or kind == "mixed":
        return _natural(values)
    is_list = kind.startswith("list")
    item = spec.get("item") if is_list else kind
    if item == "str":
        values = [v.decode() for v in values]
    if is_list:
        return values
    return values[0] if values else None
