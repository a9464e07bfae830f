"""The gpuspark shard format: TFRecord files of ``tf.train.Example``, an index, a manifest.

A dataset is a directory::

    manifest.json                       committed last; without it the directory is no dataset
    part-00000-<wid>.tfrecord           TFRecord shard (TensorFlow framing, Example payloads)
    part-00000-<wid>.tfrecord.idx       DALI ``tfrecord2idx`` index: "offset length" per record
    train-00000-<wid>.tfrecord ...      shards of a named split (listed in ``manifest.splits``)

``<wid>`` is a per-write id, so an overwrite can land new shards next to the old ones and
switch datasets by replacing ``manifest.json`` atomically.

**Framing** (exactly as TensorFlow writes it)::

    uint64 length (LE) | uint32 masked_crc32c(length) | payload | uint32 masked_crc32c(payload)

**Sample encoding** (:func:`encode_example`): a sample is a ``dict[str, value]``:

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

Per-record compression (``compression="zstd"``) compresses each Example payload before
framing; the framing stays TFRecord, but only gpuspark can read the payloads. Default: off.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import IO, Any, NamedTuple

import numpy as np

from gpuspark import storage
from gpuspark.errors import (
    CorruptRecordError,
    DatasetExistsError,
    GpusparkError,
    NotADatasetError,
    SampleError,
)

__all__ = [
    "ARRAY_DTYPES",
    "CODECS",
    "FORMAT_VERSION",
    "HEADER_BYTES",
    "MANIFEST_NAME",
    "CorruptRecordError",
    "DatasetExistsError",
    "EncodedImage",
    "Manifest",
    "NotADatasetError",
    "Problem",
    "SampleError",
    "ShardInfo",
    "compress",
    "decode_example",
    "decompress",
    "encode_example",
    "file_hash",
    "frame",
    "infer_schema",
    "inspect_dataset",
    "iter_records",
    "load_manifest",
    "masked_crc32c",
    "merge_schema",
    "parse_framed",
    "read_index",
    "read_record",
    "verify_dataset",
    "write_index",
    "write_manifest",
]

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
HEADER_BYTES = 12  # uint64 length + uint32 masked CRC of the length
FOOTER_BYTES = 4  # uint32 masked CRC of the payload
CODECS = (None, "zstd")
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
_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# --------------------------------------------------------------------------- CRC + framing


def _crc32c_function() -> Callable[[bytes | bytearray | memoryview], int]:
    """``crc32c.crc32c`` (hardware CRC, reads any buffer in place: a memory-mapped record is
    checked without a copy); else ``google_crc32c.value``, whose C extension takes only
    ``bytes`` and so costs a copy of every memoryview."""
    try:
        from crc32c import crc32c

        return crc32c
    except ImportError:
        import google_crc32c

        def value(data: bytes | bytearray | memoryview) -> int:
            return int(google_crc32c.value(data if isinstance(data, bytes) else bytes(data)))

        return value


_crc32c: Callable[[bytes | bytearray | memoryview], int] | None = None


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """TensorFlow's masked CRC-32C of ``data`` (``((crc >> 15) | (crc << 17)) + 0xa282ead8``)."""
    global _crc32c
    if _crc32c is None:
        _crc32c = _crc32c_function()
    crc = _crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Return ``payload`` framed as one TFRecord record (length, CRCs, payload)."""
    length = _U64.pack(len(payload))
    return b"".join(
        (
            length,
            _U32.pack(masked_crc32c(length)),
            payload,
            _U32.pack(masked_crc32c(payload)),
        )
    )


def _read_header(
    header: bytes | memoryview, verify: bool, path: str | None, record: int | None, offset: int
) -> int:
    """Return the payload length of a 12-byte record header, checking its CRC."""
    (length,) = _U64.unpack_from(header, 0)
    if verify:
        (crc,) = _U32.unpack_from(header, 8)
        if crc != masked_crc32c(header[:8]):
            raise CorruptRecordError(path, record, offset, "length CRC mismatch (bad length)")
    return length


def _check_payload_crc(
    payload: bytes | memoryview, footer: bytes | memoryview, path: str | None, record, offset
) -> None:
    (crc,) = _U32.unpack_from(footer, 0)
    if crc != masked_crc32c(payload):
        raise CorruptRecordError(path, record, offset, "payload CRC mismatch")


def parse_framed(
    buf: bytes | bytearray | memoryview,
    *,
    verify: bool = True,
    path: str | None = None,
    record: int | None = None,
    offset: int | None = None,
) -> memoryview:
    """Return the payload of one framed record held in memory, as a zero-copy memoryview.

    ``buf`` must be exactly one record (an index entry's bytes). ``path``, ``record`` and
    ``offset`` only label a :class:`CorruptRecordError`.
    """
    view = memoryview(buf)
    if view.nbytes < HEADER_BYTES + FOOTER_BYTES:
        raise CorruptRecordError(
            path, record, offset, f"record of {view.nbytes} bytes is truncated"
        )
    length = _read_header(view[:HEADER_BYTES], verify, path, record, offset or 0)
    if HEADER_BYTES + length + FOOTER_BYTES != view.nbytes:
        raise CorruptRecordError(
            path,
            record,
            offset,
            f"record length {length} does not match the {view.nbytes}-byte index entry",
        )
    payload = view[HEADER_BYTES : HEADER_BYTES + length]
    if verify:
        _check_payload_crc(payload, view[HEADER_BYTES + length :], path, record, offset)
    return payload


# --------------------------------------------------------------------------- file access


def iter_records(
    path_or_fileobj: str | os.PathLike[str] | IO[bytes], verify: bool = True
) -> Iterator[bytes]:
    """Yield the payload of every record of a TFRecord shard, in order.

    Raises :class:`CorruptRecordError` (file, record number, byte offset) on a bad length
    CRC, a bad payload CRC (with ``verify=True``) or a truncated file.
    """
    if isinstance(path_or_fileobj, (str, os.PathLike)):
        with storage.open_file(path_or_fileobj) as f:
            yield from _iter_fileobj(f, verify, os.fspath(path_or_fileobj))
    else:
        yield from _iter_fileobj(path_or_fileobj, verify, storage.display_name(path_or_fileobj))


def _iter_fileobj(f: IO[bytes], verify: bool, path: str | None) -> Iterator[bytes]:
    offset, record = 0, 0
    while True:
        header = f.read(HEADER_BYTES)
        if not header:
            return
        if len(header) < HEADER_BYTES:
            raise CorruptRecordError(path, record, offset, "file truncated inside a record header")
        length = _read_header(header, verify, path, record, offset)
        body = f.read(length + FOOTER_BYTES)
        if len(body) < length + FOOTER_BYTES:
            raise CorruptRecordError(
                path, record, offset, f"file truncated: record of {length} bytes is cut short"
            )
        payload = body[:length]
        if verify:
            _check_payload_crc(payload, body[length:], path, record, offset)
        yield payload
        offset += HEADER_BYTES + length + FOOTER_BYTES
        record += 1


def read_record(
    fileobj_or_path: str | os.PathLike[str] | IO[bytes],
    offset: int,
    length: int,
    *,
    verify: bool = True,
    path: str | None = None,
    record: int | None = None,
) -> bytes:
    """Read one record's payload given its index entry ``(offset, length)``.

    ``length`` is the whole framed record (DALI ``tfrecord2idx`` semantics), as in
    :func:`read_index`. ``path``/``record`` label errors when a file object is passed.
    """
    if isinstance(fileobj_or_path, (str, os.PathLike)):
        with storage.open_file(fileobj_or_path) as f:
            return read_record(
                f, offset, length, verify=verify, path=os.fspath(fileobj_or_path), record=record
            )
    f = fileobj_or_path
    path = path or storage.display_name(f)
    f.seek(offset)
    buf = f.read(length)
    if len(buf) < length:
        raise CorruptRecordError(
            path, record, offset, f"file truncated: index says {length} bytes, read {len(buf)}"
        )
    return bytes(parse_framed(buf, verify=verify, path=path, record=record, offset=offset))


def read_index(path_or_fileobj: str | os.PathLike[str] | IO[bytes]) -> np.ndarray:
    """Read a DALI ``tfrecord2idx`` index: an ``(N, 2)`` int64 array of (offset, length)."""
    if isinstance(path_or_fileobj, (str, os.PathLike)):
        with storage.open_file(path_or_fileobj) as f:
            text = f.read()
    else:
        text = path_or_fileobj.read()
    try:
        values = np.array(text.split(), dtype=np.int64)
    except ValueError as exc:
        name = (
            path_or_fileobj
            if isinstance(path_or_fileobj, str)
            else storage.display_name(path_or_fileobj)
        )
        raise GpusparkError(
            f"index {name}: not an 'offset length' text index ({exc})",
            remedy="rebuild it with `gpuspark shards verify` or rewrite the dataset",
        ) from None
    if values.size % 2:
        raise GpusparkError(f"index {path_or_fileobj}: odd number of fields")
    return values.reshape(-1, 2)


def write_index(path: str | os.PathLike[str], entries: np.ndarray | list[tuple[int, int]]) -> None:
    """Write ``(offset, length)`` pairs as a DALI index file, atomically."""
    text = "".join(f"{int(o)} {int(n)}\n" for o, n in entries)
    storage.atomic_write_bytes(path, text.encode())


def file_hash(path: str | os.PathLike[str]) -> str:
    """Return ``"xxh3_128:<hex>"`` of a file's bytes (``"sha256:<hex>"`` is also accepted)."""
    import xxhash

    h = xxhash.xxh3_128()
    with storage.open_file(path) as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return f"xxh3_128:{h.hexdigest()}"


def _hash_matches(path: str, expected: str) -> tuple[bool, str]:
    algo = expected.split(":", 1)[0]
    if algo == "sha256":
        import hashlib

        h = hashlib.sha256()
        with storage.open_file(path) as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        actual = f"sha256:{h.hexdigest()}"
    else:
        actual = file_hash(path)
    return actual == expected, actual


# --------------------------------------------------------------------------- compression


def compress(payload: bytes | memoryview, codec: str | None) -> bytes:
    """Compress one record payload with ``codec`` (``None`` or ``"zstd"``)."""
    if codec is None:
        return bytes(payload)
    if codec == "zstd":
        return _zstd()[0].compress(payload)
    raise _bad_codec(codec)


def decompress(payload: bytes | memoryview, codec: str | None) -> bytes | memoryview:
    """Reverse :func:`compress` (``codec=None`` returns ``payload`` unchanged)."""
    if codec is None:
        return payload
    if codec == "zstd":
        return _zstd()[1].decompress(payload)
    raise _bad_codec(codec)


def _bad_codec(codec: object) -> GpusparkError:
    return GpusparkError(
        f"compression {codec!r} is not supported", remedy="use compression=None or 'zstd'"
    )


_ZSTD: tuple[Any, Any] | None = None


def _zstd() -> tuple[Any, Any]:
    global _ZSTD
    if _ZSTD is None:
        import zstandard

        _ZSTD = (zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor())
    return _ZSTD


# --------------------------------------------------------------------------- Example codec


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


def _scalar_kind(value: object) -> str | None:
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
    kinds = {_scalar_kind(v) for v in values}
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
    from gpuspark.data.example_pb import Example

    example = Example()
    feats = example.features.feature
    for key, value in sample.items():
        _check_key(key)
        if value is None:
            continue
        kind = _scalar_kind(value)
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
    return example.SerializeToString()


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
    from gpuspark.data.example_pb import Example

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


# --------------------------------------------------------------------------- schema


def _value_spec(key: str, value: Any) -> dict[str, Any]:
    kind = _scalar_kind(value)
    if kind is not None:
        return {"kind": kind}
    if isinstance(value, EncodedImage):
        return {"kind": "encoded", "format": value.format}
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        return {"kind": "ndarray", "dtype": arr.dtype.name, "shape": list(arr.shape)}
    if isinstance(value, (list, tuple)):
        kinds = {_scalar_kind(v) for v in value}
        return {"kind": "list", "item": kinds.pop() if len(kinds) == 1 else None}
    if isinstance(value, (bytearray, memoryview)):
        return {"kind": "bytes"}
    raise SampleError(f"sample key {key!r}: values of type {type(value).__name__} cannot be stored")


def infer_schema(sample: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Schema of one sample: ``{key: {"kind": ..., ...}, ...}`` with a ``count`` of 1."""
    return {k: {**_value_spec(k, v), "count": 1} for k, v in sample.items() if v is not None}


def _merge_spec(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
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
        out[key] = _merge_spec(out[key], spec) if key in out else dict(spec)
    return out


# --------------------------------------------------------------------------- manifest


@dataclass
class ShardInfo:
    """One shard of a dataset: paths relative to the dataset directory."""

    path: str
    records: int
    bytes: int
    hash: str
    index: str


@dataclass
class Manifest:
    """The ``manifest.json`` of a dataset; its presence is what makes a directory a dataset.

    ``schema`` maps each key to ``{"kind": "int"|"float"|"bytes"|"str"|"list"|"ndarray"|
    "encoded"|"mixed", "count": records having it, ...}`` (``dtype``/``shape`` for arrays,
    ``None`` in ``shape`` where it varies; ``item`` for lists). ``splits`` maps a split name
    to its shard paths (``{}`` when none). ``extra`` is free-form (label map, quarantine
    counts, prep parameters).
    """

    version: int = FORMAT_VERSION
    schema: dict[str, Any] = field(default_factory=dict)
    shards: list[ShardInfo] = field(default_factory=list)
    total_records: int = 0
    compression: str | None = None
    splits: dict[str, list[str]] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Serialize to indented JSON."""
        return json.dumps(asdict(self), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        """Parse :meth:`to_json` output (unknown top-level fields are kept in ``extra``)."""
        raw = json.loads(text)
        known = {f for f in cls.__dataclass_fields__ if f != "shards"}
        kwargs = {k: v for k, v in raw.items() if k in known}
        extra = dict(kwargs.pop("extra", {}) or {})
        extra.update({k: v for k, v in raw.items() if k not in known and k != "shards"})
        shards = [ShardInfo(**s) for s in raw.get("shards", [])]
        return cls(shards=shards, extra=extra, **kwargs)

    def shard_records(self) -> list[int]:
        """Records per shard, in manifest order."""
        return [s.records for s in self.shards]


def dataset_root(dataset_path_or_url: str | os.PathLike[str]) -> str:
    """The dataset directory of a dataset path or of its ``manifest.json`` path."""
    path = os.fspath(dataset_path_or_url).rstrip("/")
    if path.endswith("/" + MANIFEST_NAME) or path == MANIFEST_NAME:
        path = path[: -len(MANIFEST_NAME)].rstrip("/") or "."
    return path


def load_manifest(dataset_path_or_url: str | os.PathLike[str]) -> Manifest:
    """Load a dataset's manifest from a local path or an fsspec URL.

    Raises :class:`NotADatasetError` when there is no committed ``manifest.json``.
    """
    root = dataset_root(dataset_path_or_url)
    url = storage.join(root, MANIFEST_NAME)
    try:
        with storage.open_file(url) as f:
            text = f.read()
    except (FileNotFoundError, NotADirectoryError):
        what = "does not exist" if not storage.exists(root) else f"has no {MANIFEST_NAME}"
        raise NotADatasetError(
            f"{root} is not a gpuspark dataset: it {what} (a dataset is visible only once its "
            "manifest is committed, last)",
            remedy="point at a dataset directory written by ShardWriter / write_dataframe, "
            "or re-run the write that did not finish",
        ) from None
    try:
        manifest = Manifest.from_json(text)
    except (ValueError, TypeError) as exc:
        raise NotADatasetError(
            f"{url}: manifest is not valid ({exc})", remedy="rewrite the dataset"
        ) from None
    if manifest.version > FORMAT_VERSION:
        raise NotADatasetError(
            f"{url}: format version {manifest.version} is newer than this gpuspark's "
            f"({FORMAT_VERSION})",
            remedy="upgrade gpuspark",
        )
    return manifest


def write_manifest(dataset_path: str | os.PathLike[str], manifest: Manifest) -> None:
    """Commit ``manifest.json`` atomically (temp file + rename): the dataset becomes visible."""
    storage.atomic_write_text(storage.join(dataset_path, MANIFEST_NAME), manifest.to_json())


# --------------------------------------------------------------------------- inspect / verify


@dataclass
class Problem:
    """One problem found by :func:`verify_dataset`."""

    shard: str
    record: int | None
    offset: int | None
    message: str

    def __str__(self) -> str:
        where = self.shard
        if self.record is not None:
            where += f" record {self.record}"
        if self.offset is not None:
            where += f" (byte {self.offset})"
        return f"{where}: {self.message}"


def inspect_dataset(dataset_path_or_url: str | os.PathLike[str]) -> dict[str, Any]:
    """Summary of a dataset from its manifest: shards, records, bytes, schema, balance."""
    root = dataset_root(dataset_path_or_url)
    m = load_manifest(root)
    counts = m.shard_records() or [0]
    return {
        "path": root,
        "version": m.version,
        "shards": len(m.shards),
        "records": m.total_records,
        "bytes": sum(s.bytes for s in m.shards),
        "compression": m.compression,
        "min_records_per_shard": min(counts),
        "max_records_per_shard": max(counts),
        "splits": {k: len(v) for k, v in m.splits.items()},
        "schema": m.schema,
        "provenance": m.provenance,
        "shard_list": [asdict(s) for s in m.shards],
    }


def verify_dataset(dataset_path_or_url: str | os.PathLike[str]) -> list[Problem]:
    """Re-check every record CRC, index entry, file size and hash; return the problems found.

    An empty list means the dataset is intact. A missing manifest raises
    :class:`NotADatasetError`.
    """
    root = dataset_root(dataset_path_or_url)
    manifest = load_manifest(root)
    problems: list[Problem] = []
    total = 0
    for shard in manifest.shards:
        problems.extend(_verify_shard(root, shard, manifest))
        total += shard.records
    if total != manifest.total_records:
        problems.append(
            Problem(MANIFEST_NAME, None, None, f"total_records {manifest.total_records} != {total}")
        )
    return problems


def _verify_shard(root: str, shard: ShardInfo, manifest: Manifest) -> list[Problem]:
    path = storage.join(root, shard.path)
    if not storage.exists(path):
        return [Problem(shard.path, None, None, "shard file is missing")]
    problems: list[Problem] = []
    ok, actual = _hash_matches(path, shard.hash)
    if not ok:
        problems.append(Problem(shard.path, None, None, f"hash {actual} != manifest {shard.hash}"))
    entries, scan_problems = _scan(path, shard.path, manifest)
    problems.extend(scan_problems)
    size = storage.file_size(path)
    if size != shard.bytes:
        problems.append(Problem(shard.path, None, None, f"size {size} != manifest {shard.bytes}"))
    if not scan_problems and len(entries) != shard.records:
        problems.append(
            Problem(shard.path, None, None, f"{len(entries)} records != manifest {shard.records}")
        )
    problems.extend(_verify_index(root, shard, entries, complete=not scan_problems))
    return problems


def _scan(path: str, rel: str, manifest: Manifest) -> tuple[list[tuple[int, int]], list[Problem]]:
    """Read every record; return (offset, length) entries and the first problem, if any."""
    entries: list[tuple[int, int]] = []
    offset = 0
    try:
        with storage.open_file(path) as f:
            for i, payload in enumerate(_iter_fileobj(f, True, rel)):
                n = HEADER_BYTES + len(payload) + FOOTER_BYTES
                entries.append((offset, n))
                try:
                    decode_example(decompress(payload, manifest.compression))
                except Exception as exc:  # bad payload behind a good CRC
                    return entries, [Problem(rel, i, offset, f"payload does not decode: {exc}")]
                offset += n
    except CorruptRecordError as exc:
        return entries, [Problem(rel, exc.record, exc.offset, exc.what)]
    return entries, []


def _verify_index(
    root: str, shard: ShardInfo, entries: list[tuple[int, int]], complete: bool
) -> list[Problem]:
    index_path = storage.join(root, shard.index)
    if not storage.exists(index_path):
        return [Problem(shard.index, None, None, "index file is missing")]
    try:
        index = read_index(index_path)
    except GpusparkError as exc:
        return [Problem(shard.index, None, None, str(exc))]
    problems = []
    for i, (off, n) in enumerate(index.tolist()):
        if i < len(entries) and (off, n) != entries[i]:
            problems.append(
                Problem(shard.index, i, off, f"index entry ({off}, {n}) != record {entries[i]}")
            )
            break
    if complete and len(index) != len(entries):
        problems.append(
            Problem(shard.index, None, None, f"{len(index)} entries != {len(entries)} records")
        )
    return problems
