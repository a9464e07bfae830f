"""Image folders (``root/<label>/<file>.jpg|png``) to rows, one image at a time.

Three modes: ``keep`` stores the original bytes (after a full decode to prove they are
readable), ``resize`` re-encodes as JPEG with the shorter side resized to ``size``, and
``predecode`` stores a ``size`` x ``size`` x 3 uint8 array (shorter side resized, centre crop).
A file that does not decode raises :class:`~gpuspark.data.sources.QuarantineError`.
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuspark._util.extras import require
from gpuspark.data.checks import check_size
from gpuspark.data.sources.listing import walk_unit
from gpuspark.data.sources.records import QuarantineError, local_path, read_bytes

__all__ = ["IMAGE_EXTENSIONS", "MODES", "ImageOptions", "ImageSource", "class_of", "prep_image"]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
MODES = ("keep", "resize", "predecode")


@dataclass(frozen=True)
class ImageOptions:
    """How images become rows: ``mode`` (keep/resize/predecode), ``size`` in pixels."""

    mode: str = "keep"
    size: int = 224
    quality: int = 90

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got: {self.mode!r}")
        check_size(self.size)


def class_of(uri: str, root: str) -> tuple[str, str]:
    """``(class name, path relative to root)`` of an image file below ``root``.

    Raises :class:`QuarantineError` for files that are not in a class folder or have no
    image extension.
    """
    path, base = local_path(uri), local_path(root).rstrip("/")
    if not path.startswith(base + "/"):
        raise QuarantineError(f"not below the source folder {base}", "Layout", path=uri)
    rel = path[len(base) + 1 :]
    if "/" not in rel:
        raise QuarantineError("not in a class folder (expected root/<label>/<file>)", "Layout")
    if not rel.lower().endswith(IMAGE_EXTENSIONS):
        ext = posixpath.splitext(rel)[1] or "no extension"
        raise QuarantineError(f"not an image file ({ext})", "Layout")
    return rel.split("/", 1)[0], rel


def _decode(data: bytes) -> Any:
    Image = require("PIL.Image", "images", "reading image files")
    img = Image.open(io.BytesIO(data))
    fmt = (img.format or "").lower()
    if fmt not in {"jpeg", "png"}:
        raise QuarantineError(f"unsupported image format {fmt or 'unknown'}", "Format")
    img.load()  # full decode: truncated or corrupt data fails here
    return img, fmt


def _resize_shorter(img: Any, size: int) -> Any:
    Image = require("PIL.Image", "images", "resizing images")
    w, h = img.size
    scale = size / min(w, h)
    new = (max(1, round(w * scale)), max(1, round(h * scale)))
    return img.resize(new, Image.Resampling.BILINEAR) if new != (w, h) else img


def prep_image(data: bytes, options: ImageOptions | None = None) -> dict[str, Any]:
    """One encoded image to row fields: ``image`` (bytes or HWC uint8 array), ``format``,
    ``width``, ``height`` (of what is stored)."""
    import warnings

    opts = options or ImageOptions()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # PIL warns on some truncated/corrupt files
            img, fmt = _decode(data)
    except QuarantineError:
        raise
    except Exception as exc:
        raise QuarantineError.wrap(exc, "image decode failed") from exc
    if opts.mode == "keep":
        return {"image": data, "format": fmt, "width": img.width, "height": img.height}
    img = _resize_shorter(img.convert("RGB"), opts.size)
    if opts.mode == "resize":
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=opts.quality)
        return {"image": buf.getvalue(), "format": "jpeg", "width": img.width, "height": img.height}
    import numpy as np

    w, h = img.size
    left, top = (w - opts.size) // 2, (h - opts.size) // 2
    img = img.crop((left, top, left + opts.size, top + opts.size))
    arr = np.asarray(img, dtype=np.uint8)
    return {"image": arr, "format": "raw", "width": opts.size, "height": opts.size}


@dataclass(frozen=True)
class ImageSource:
    """An image folder ``root/<label>/<file>`` as a :class:`~gpuspark.data.sources.base.Source`:
    the header of a file is ``(class name, path relative to root)`` (:func:`class_of`), each
    image is one sample (:func:`prep_image`), keyed by that relative path. Plain data: Spark
    ships it to the tasks."""

    root: str
    options: ImageOptions | None = None

    def list_inputs(self) -> Iterator[tuple[str, int]]:
        """``(path, size)`` of every file below ``root``, in sorted order."""
        return walk_unit((self.root, True, 0))

    def read_header(self, uri: str) -> Any:
        """``(class name, relative path)``; raises :class:`QuarantineError` off the layout."""
        return class_of(uri, self.root)

    def sample_key(self, uri: str, header: Any) -> str:
        """The image's path relative to ``root``: one sample per image."""
        return str(header[1])

    def read_sample(self, uris: Sequence[str]) -> dict[str, Any]:
        """The one image's row fields (:func:`prep_image`)."""
        if len(uris) != 1:
            raise ValueError(f"an image sample is one file, got {len(uris)}: {list(uris)[:3]}")
        return prep_image(read_bytes(uris[0]), self.options)
