"""Per-record compression of Example payloads (``None`` or ``"zstd"``).

The framing stays TFRecord; only the payloads are compressed, so only gpuspark can read a
compressed dataset's records. Default: off.
"""

from __future__ import annotations

from typing import Any

from gpuspark.errors import GpusparkError

__all__ = ["CODECS", "compress", "decompress", "unknown_codec_error"]

CODECS = (None, "zstd")


def compress(payload: bytes | memoryview, codec: str | None) -> bytes:
    """Compress one record payload with ``codec`` (``None`` or ``"zstd"``)."""
    if codec is None:
        return bytes(payload)
    if codec == "zstd":
        return _zstd()[0].compress(payload)
    raise unknown_codec_error(codec)


def decompress(payload: bytes | memoryview, codec: str | None) -> bytes | memoryview:
    """Reverse :func:`compress` (``codec=None`` returns ``payload`` unchanged)."""
    if codec is None:
        return payload
    if codec == "zstd":
        return _zstd()[1].decompress(payload)
    raise unknown_codec_error(codec)


def unknown_codec_error(codec: object) -> GpusparkError:
    """The error for a compression codec that is not one of :data:`CODECS`."""
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
