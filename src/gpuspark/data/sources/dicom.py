"""DICOM series to 3D volumes: pixels to HU, resampling, CT windows, one series to one row.

A series becomes one volume with axes ``(z, y, x)`` = (slice, row, column), its frames ordered
by :mod:`~gpuspark.data.sources.dicom_header`. Spacings and shapes are given in the same
``(z, y, x)`` order, in millimetres.

Everything here is plain Python over one series, called alike from a Spark task and from a
single-process loop. A series that cannot form a volume raises
:class:`~gpuspark.data.sources.QuarantineError` with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuspark.data.checks import WINDOW_PRESETS, window_values, zyx
from gpuspark.data.sources.dicom_header import (
    OrderedSeries,
    header_from_dataset,
    order_frames,
    read_dataset,
    read_header,
)
from gpuspark.data.sources.listing import walk_unit
from gpuspark.data.sources.records import (
    LabelTable,
    QuarantineError,
    assign_split,
    hash_patient,
)

__all__ = [
    "WINDOW_PRESETS",
    "DicomOptions",
    "DicomSource",
    "Window",
    "apply_window",
    "load_volume",
    "parse_window",
    "prep_series",
    "resample",
]


@dataclass(frozen=True)
class Window:
    """A CT window (``level``, ``width`` in HU), or raw HU when ``level`` is None."""

    name: str
    level: float | None = None
    width: float | None = None

    @property
    def raw(self) -> bool:
        """True for raw Hounsfield units (int16 output)."""
        return self.level is None


def parse_window(
    spec: str | tuple[float, float] | Window | None, *, text_pairs: bool = True
) -> Window:
    """``soft-tissue``, ``lung``, ``bone``, ``(level, width)``, ``hu``/None, or with
    ``text_pairs`` ``"L,W"`` (e.g. ``"50,350"``); checked by
    :func:`gpuspark.data.checks.window_values`."""
    if isinstance(spec, Window):
        return spec
    return Window(*window_values(spec, text_pairs=text_pairs))


@dataclass(frozen=True)
class DicomOptions:
    """How series become volumes.

    ``spacing``/``shape`` are ``(z, y, x)``; with both, the volume is resampled to the spacing
    and then centre-cropped or padded (with its minimum value) to the shape. ``dtype`` is the
    output type of a windowed volume (``uint8`` 0..255 or ``float16`` 0..1); raw HU are int16.
    """

    spacing: tuple[float, float, float] | None = None
    shape: tuple[int, int, int] | None = None
    window: Window = field(default_factory=lambda: parse_window("soft-tissue"))
    dtype: str = "uint8"
    min_slices: int = 3
    spacing_tolerance: float = 0.1
    salt: str = ""

    def __post_init__(self) -> None:
        if self.dtype not in {"uint8", "float16"}:
            raise ValueError(f"dtype must be uint8 or float16, got: {self.dtype!r}")
        zyx(self.spacing, float, "spacing")
        zyx(self.shape, int, "shape")

    @property
    def out_dtype(self) -> str:
        """The numpy dtype name of the output volume."""
        return "int16" if self.window.raw else self.dtype


def load_volume(
    series: OrderedSeries,
    data: dict[str, bytes] | None = None,
    *,
    datasets: dict[str, Any] | None = None,
) -> Any:
    """Read the pixels of an ordered series into float32 HU (slope/intercept applied).

    Files are read from ``datasets`` (parsed already), else ``data`` (bytes), else by path.
    """
    import numpy as np

    vol = np.empty(series.shape, dtype=np.float32)
    cache: tuple[str, Any] | None = None
    for z, (h, k) in enumerate(series.frames):
        if cache is None or cache[0] != h.path:
            ds = (datasets or {}).get(h.path)
            if ds is None:
                ds = read_dataset(h.path, (data or {}).get(h.path), header_only=False)
            try:
                arr = ds.pixel_array
            except Exception as exc:
                raise QuarantineError.wrap(
                    exc,
                    f"pixel decode failed ({ds.file_meta.get('TransferSyntaxUID', '?')})",
                    h.path,
                ) from exc
            if arr.shape[-2:] != (h.rows, h.cols):
                raise QuarantineError(
                    f"pixel data shape {arr.shape} does not match Rows/Columns",
                    "Inconsistent",
                    path=h.path,
                )
            cache = (h.path, arr if h.frames > 1 else arr[None])
        vol[z] = cache[1][k] * np.float32(h.slope) + np.float32(h.intercept)
    return vol


def resample(
    vol: Any,
    spacing: Sequence[float],
    *,
    target_spacing: Sequence[float] | None = None,
    shape: Sequence[int] | None = None,
) -> tuple[Any, tuple[float, float, float]]:
    """Trilinear resampling of a ``(z, y, x)`` volume to a spacing and/or a shape.

    Returns the new float32 volume and its spacing. The physical extent is kept; with both
    arguments the resampled volume is centre-cropped or padded (with its minimum) to ``shape``.
    Trilinear interpolation is separable, so it runs as three 1-D linear passes in numpy; the
    sampling grid is that of ``torch.nn.functional.interpolate(mode="trilinear",
    align_corners=False)`` (tests compare the two), without importing torch in every task.
    """
    src = tuple(vol.shape)
    if target_spacing is not None:
        size = tuple(
            max(1, round(n * s / t)) for n, s, t in zip(src, spacing, target_spacing, strict=True)
        )
    elif shape is not None:
        size = tuple(int(x) for x in shape)
    else:
        return vol, tuple(float(s) for s in spacing)  # type: ignore[return-value]
    new_spacing = tuple(float(s) * n / m for s, n, m in zip(spacing, src, size, strict=True))
    for axis, m in enumerate(size):
        vol = _linear_axis(vol, axis, m)
    if target_spacing is not None and shape is not None:
        vol = _crop_or_pad(vol, tuple(int(x) for x in shape))
    return vol, new_spacing


def _linear_axis(vol: Any, axis: int, m: int) -> Any:
    """Linear interpolation of ``vol`` to ``m`` samples along ``axis`` (half-pixel centres)."""
    import numpy as np

    n = vol.shape[axis]
    vol = vol.astype(np.float32, copy=False)
    if n == m:
        return vol
    pos = np.maximum((np.arange(m, dtype=np.float64) + 0.5) * (n / m) - 0.5, 0.0)
    i0 = np.minimum(np.floor(pos).astype(np.int64), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    w = (pos - i0).astype(np.float32)
    bshape = [1] * vol.ndim
    bshape[axis] = m
    w = w.reshape(bshape)
    a = np.take(vol, i0, axis=axis)
    b = np.take(vol, i1, axis=axis)
    return a + (b - a) * w


def _crop_or_pad(vol: Any, shape: tuple[int, ...]) -> Any:
    import numpy as np

    out = np.full(shape, vol.min(), dtype=vol.dtype)
    src, dst = [], []
    for n, m in zip(vol.shape, shape, strict=True):
        if n >= m:
            a = (n - m) // 2
            src.append(slice(a, a + m))
            dst.append(slice(0, m))
        else:
            a = (m - n) // 2
            src.append(slice(0, n))
            dst.append(slice(a, a + n))
    out[tuple(dst)] = vol[tuple(src)]
    return out


def apply_window(hu: Any, window: Window, dtype: str = "uint8") -> Any:
    """HU to a windowed ``uint8`` (0..255) or ``float16`` (0..1) volume, or int16 raw HU."""
    import numpy as np

    if window.raw:
        return np.clip(np.rint(hu), -32768, 32767).astype(np.int16)
    lo = window.level - window.width / 2  # type: ignore[operator]
    x = np.clip((hu - lo) / window.width, 0.0, 1.0)
    if dtype == "uint8":
        return np.rint(x * 255.0).astype(np.uint8)
    return x.astype(np.float16)


def prep_series(
    files: Sequence[str],
    options: DicomOptions | None = None,
    *,
    labels: LabelTable | None = None,
    split: Sequence[float] | None = None,
    data: dict[str, bytes] | None = None,
) -> dict[str, Any]:
    """One series (its file URIs) to one row: the volume and its metadata.

    Reads each file once, orders frames along the normal, checks consistency, applies
    rescale to HU, resamples, windows, hashes the patient id, joins the label and picks the
    split. Raises :class:`QuarantineError` with the reason when the series is unusable.
    """
    try:
        return _prep_series(files, options or DicomOptions(), labels, split, data)
    except QuarantineError:
        raise
    except Exception as exc:  # anything else a malformed file can trigger
        raise QuarantineError.wrap(exc, "series failed") from exc


def _prep_series(
    files: Sequence[str],
    opts: DicomOptions,
    labels: LabelTable | None,
    split: Sequence[float] | None,
    data: dict[str, bytes] | None,
) -> dict[str, Any]:
    headers, datasets = [], {}
    for uri in files:
        datasets[uri] = read_dataset(uri, (data or {}).get(uri), header_only=False)
        headers.append(header_from_dataset(datasets[uri], uri))
    if len({h.series_uid for h in headers}) > 1:
        raise QuarantineError("files of several series given as one", "Inconsistent")
    first = headers[0]
    label = None
    if labels is not None:
        label = labels.lookup(first.series_uid, first.patient_id)
        if label is None:
            raise QuarantineError(f"no label for this series in {labels.source}", "NoLabel")
    ordered = order_frames(headers, min_slices=opts.min_slices, tol=opts.spacing_tolerance)
    hu = load_volume(ordered, datasets=datasets)
    vol, spacing = resample(hu, ordered.spacing, target_spacing=opts.spacing, shape=opts.shape)
    out = apply_window(vol, opts.window, opts.dtype)
    patient = _patient_hash(first, opts.salt)
    row: dict[str, Any] = {
        "id": first.series_uid,
        "series_uid": first.series_uid,
        "study_uid": first.study_uid,
        "patient_hash": patient,
        "modality": first.modality,
        "volume": out,
        "spacing": [round(s, 6) for s in spacing],
        "orig_spacing": [round(s, 6) for s in ordered.spacing],
        "orig_shape": list(ordered.shape),
        "slices": ordered.shape[0],
        "files": len(files),
        "window": opts.window.name,
    }
    if label is not None:
        row["label"] = int(label)
    if split is not None:
        row["split"] = assign_split(patient, split)
    return row


def _patient_hash(header: Any, salt: str) -> str:
    """The hashed patient id of a file's header (its study, else its series, without one):
    what a series is split by."""
    return hash_patient(header.patient_id or header.study_uid or header.series_uid, salt)


@dataclass(frozen=True)
class DicomSource:
    """DICOM files below ``root`` as a :class:`~gpuspark.data.sources.base.Source`: a header
    per file (:func:`read_header`), one sample per series (:func:`prep_series`), split by
    patient (:meth:`split_of`). Plain data: Spark ships it to the tasks."""

    root: str
    options: DicomOptions | None = None
    labels: LabelTable | None = None
    split: Sequence[float] | None = None

    def list_inputs(self) -> Iterator[tuple[str, int]]:
        """``(path, size)`` of every file below ``root``, in sorted order."""
        return walk_unit((self.root, True, 0))

    def read_header(self, uri: str) -> Any:
        """The file's :class:`~gpuspark.data.sources.FileHeader`."""
        return read_header(uri)

    def sample_key(self, uri: str, header: Any) -> str:
        """The series the file belongs to."""
        return str(header.series_uid)

    def read_sample(self, uris: Sequence[str]) -> dict[str, Any]:
        """One series to one row (:func:`prep_series`)."""
        return prep_series(uris, self.options, labels=self.labels, split=self.split)

    def split_of(self, header: Any) -> str | None:
        """The split of the series of a file with this header, by its hashed patient id (the
        rule :func:`prep_series` applies); None without ``split``."""
        if not self.split:
            return None
        salt = self.options.salt if self.options is not None else ""
        return assign_split(_patient_hash(header, salt), self.split)
