"""TFRecord framing, exactly as TensorFlow writes it, and reading records back.

Each record is::

    uint64 length (LE) | uint32 masked_crc32c(length) | payload | uint32 masked_crc32c(payload)

Readers take a local path, an fsspec URL (see :mod:`gpuspark.storage`) or an open binary file;
a damaged record raises :class:`~gpuspark.errors.CorruptRecordError` naming the file, the
record number and its byte offset.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import IO

from crc32c import crc32c

from gpuspark import storage
from gpuspark.errors import CorruptRecordError

__all__ = [
    "FOOTER_BYTES",
    "HEADER_BYTES",
    "frame",
    "iter_records",
    "masked_crc32c",
    "parse_framed",
    "read_record",
]

HEADER_BYTES = 12  # uint64 length + uint32 masked CRC of the length
FOOTER_BYTES = 4  # uint32 masked CRC of the payload
_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """TensorFlow's masked CRC-32C of ``data`` (``((crc >> 15) | (crc << 17)) + 0xa282ead8``).

    ``crc32c`` is a hardware CRC that reads any buffer in place: a memory-mapped record is
    checked without a copy."""
    crc = crc32c(data)
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
