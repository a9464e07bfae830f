"""DICOM headers and slice geometry: what each file says about its place in a series, and
the frames of a series ordered along the slice normal and checked to form a volume.

Slices are ordered by their position along the slice normal (``ImagePositionPatient`` · the
cross product of the two ``ImageOrientationPatient`` direction cosines), never by file name
or ``InstanceNumber``. Spacings and shapes are ``(z, y, x)``, in millimetres. A series that
cannot form a volume raises :class:`~gpuspark.data.sources.QuarantineError` with the reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuspark import storage
from gpuspark._util.extras import require
from gpuspark.data.sources.records import QuarantineError, read_bytes

__all__ = [
    "FileHeader",
    "OrderedSeries",
    "header_from_dataset",
    "order_frames",
    "read_dataset",
    "read_header",
]


@dataclass(frozen=True)
class FileHeader:
    """What a DICOM file says about its place in a series (one entry per frame)."""

    path: str
    series_uid: str
    study_uid: str
    patient_id: str
    modality: str
    rows: int
    cols: int
    samples: int
    frames: int
    orientation: tuple[float, ...] | None
    pixel_spacing: tuple[float, float] | None
    positions: tuple[tuple[float, float, float], ...] | None
    slope: float
    intercept: float
    instance_number: int | None
    thickness: float | None = None


def _floats(v: Any) -> tuple[float, ...] | None:
    try:
        return tuple(float(x) for x in v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _seq_item(ds: Any, *names: str) -> Any:
    """``ds.A[0].B[0]...`` or None."""
    cur = ds
    for name in names:
        seq = getattr(cur, name, None)
        if not seq:
            return None
        cur = seq[0]
    return cur


def _frame_group_value(ds: Any, seq: str, attr: str) -> Any:
    for fg in ("SharedFunctionalGroupsSequence", "PerFrameFunctionalGroupsSequence"):
        item = _seq_item(ds, fg, seq)
        if item is not None and attr in item:
            return item.get(attr)
    return None


def _positions(ds: Any, frames: int, orientation: tuple[float, ...] | None) -> Any:
    ipp = _floats(ds.get("ImagePositionPatient"))
    if frames <= 1:
        return (ipp,) if ipp is not None and len(ipp) == 3 else None
    per_frame = ds.get("PerFrameFunctionalGroupsSequence")
    if per_frame and len(per_frame) == frames:
        items = [_seq_item(f, "PlanePositionSequence") for f in per_frame]
        pos = [_floats(i.get("ImagePositionPatient")) if i is not None else None for i in items]
        if all(p is not None and len(p) == 3 for p in pos):
            return tuple(pos)
    if ipp is None or orientation is None:
        return None
    normal = _normal(orientation)
    offsets = _floats(ds.get("GridFrameOffsetVector"))
    if offsets is None or len(offsets) != frames:
        step = _floats([ds.get("SpacingBetweenSlices") or ds.get("SliceThickness") or 0])
        if not step or step[0] <= 0:
            return None
        offsets = tuple(k * step[0] for k in range(frames))
    return tuple(tuple(ipp[i] + o * normal[i] for i in range(3)) for o in offsets)


def _normal(orientation: Sequence[float]) -> tuple[float, float, float]:
    r, c = orientation[:3], orientation[3:6]
    return (r[1] * c[2] - r[2] * c[1], r[2] * c[0] - r[0] * c[2], r[0] * c[1] - r[1] * c[0])


def header_from_dataset(ds: Any, path: str) -> FileHeader:
    """The :class:`FileHeader` of a parsed dataset; rejects files that are not images."""
    series = str(ds.get("SeriesInstanceUID", "") or "")
    if not series:
        raise QuarantineError("no SeriesInstanceUID", error_type="MissingTag", path=path)
    rows, cols = ds.get("Rows"), ds.get("Columns")
    if not rows or not cols:
        sop = ds.get("SOPClassUID")
        kind = getattr(sop, "name", str(sop)) if sop else "unknown SOP class"
        raise QuarantineError(f"not an image (no Rows/Columns; {kind})", "NoPixels", path=path)
    frames = int(ds.get("NumberOfFrames", 1) or 1)
    orientation = _floats(ds.get("ImageOrientationPatient")) or _floats(
        _frame_group_value(ds, "PlaneOrientationSequence", "ImageOrientationPatient")
    )
    spacing = _floats(ds.get("PixelSpacing")) or _floats(
        _frame_group_value(ds, "PixelMeasuresSequence", "PixelSpacing")
    )
    slope = ds.get("RescaleSlope") or _frame_group_value(
        ds, "PixelValueTransformationSequence", "RescaleSlope"
    )
    intercept = ds.get("RescaleIntercept") or _frame_group_value(
        ds, "PixelValueTransformationSequence", "RescaleIntercept"
    )
    inst = ds.get("InstanceNumber")
    return FileHeader(
        path=path,
        series_uid=series,
        study_uid=str(ds.get("StudyInstanceUID", "") or ""),
        patient_id=str(ds.get("PatientID", "") or ""),
        modality=str(ds.get("Modality", "") or ""),
        rows=int(rows),
        cols=int(cols),
        samples=int(ds.get("SamplesPerPixel", 1) or 1),
        frames=frames,
        orientation=orientation if orientation and len(orientation) == 6 else None,
        pixel_spacing=spacing[:2] if spacing and len(spacing) >= 2 else None,  # type: ignore[arg-type]
        positions=_positions(ds, frames, orientation),
        slope=float(slope) if slope not in (None, "") else 1.0,
        intercept=float(intercept) if intercept not in (None, "") else 0.0,
        instance_number=int(inst) if isinstance(inst, int) else None,
        thickness=_thickness(ds),
    )


def _thickness(ds: Any) -> float | None:
    v = _floats([ds.get("SpacingBetweenSlices") or ds.get("SliceThickness") or 0])
    return v[0] if v and v[0] > 0 else None


def read_dataset(uri: str, data: bytes | None, *, header_only: bool) -> Any:
    """The parsed DICOM file ``uri`` (from ``data`` when given); headers only with
    ``header_only`` (``stop_before_pixels``). Unreadable files raise :class:`QuarantineError`."""
    import io

    pydicom = require("pydicom", "dicom", "reading DICOM files")
    src: Any
    if data is not None:
        src = io.BytesIO(data)
    elif storage.is_url(uri):
        src = io.BytesIO(read_bytes(uri))
    else:
        src = storage.local_path(uri)
    try:
        return pydicom.dcmread(src, stop_before_pixels=header_only)
    except pydicom.errors.InvalidDicomError as exc:
        raise QuarantineError("not a DICOM file", error_type=type(exc).__name__, path=uri) from exc
    except Exception as exc:
        raise QuarantineError.wrap(exc, "unreadable DICOM", uri) from exc


def read_header(uri: str, data: bytes | None = None) -> FileHeader:
    """Header-only pass over one file (``stop_before_pixels``): cheap, for grouping."""
    ds = read_dataset(uri, data, header_only=True)
    try:
        return header_from_dataset(ds, uri)
    except QuarantineError:
        raise
    except Exception as exc:
        raise QuarantineError.wrap(exc, "bad DICOM header", uri) from exc


@dataclass(frozen=True)
class OrderedSeries:
    """Frames of a series in slice order, with the geometry they share."""

    frames: list[tuple[FileHeader, int]]  # (file, frame index)
    spacing: tuple[float, float, float]  # z, y, x in mm
    shape: tuple[int, int, int]


def order_frames(
    headers: Sequence[FileHeader], *, min_slices: int = 3, tol: float = 0.1
) -> OrderedSeries:
    """Sort the frames of one series along the slice normal and check they form a volume.

    Rejects (with the reason): colour images, missing geometry, mixed orientations, pixel
    spacings or shapes, too few slices, duplicate positions, slices not stacked along the
    normal (gantry tilt) and slice gaps that differ by more than ``tol`` of the median.
    """
    first = headers[0]
    if any(h.samples != 1 for h in headers):
        raise QuarantineError(
            f"colour images (SamplesPerPixel={max(h.samples for h in headers)}) are not a "
            "grey-value volume",
            "Inconsistent",
        )
    for attr, what in (
        ("orientation", "ImageOrientationPatient"),
        ("pixel_spacing", "PixelSpacing"),
        ("positions", "ImagePositionPatient"),
    ):
        if any(getattr(h, attr) is None for h in headers):
            raise QuarantineError(f"no slice geometry ({what} missing)", "MissingTag")
    if len({(h.rows, h.cols) for h in headers}) > 1:
        raise QuarantineError(
            f"mixed image shapes {sorted({(h.rows, h.cols) for h in headers})}", "Inconsistent"
        )
    if not all(_close(h.orientation, first.orientation, 1e-3) for h in headers):  # type: ignore[arg-type]
        raise QuarantineError(
            "mixed orientations (ImageOrientationPatient differs)", "Inconsistent"
        )
    if not all(_close(h.pixel_spacing, first.pixel_spacing, 1e-3) for h in headers):  # type: ignore[arg-type]
        raise QuarantineError("mixed pixel spacings", "Inconsistent")
    normal = _normal(first.orientation)  # type: ignore[arg-type]
    items = [
        (sum(p[i] * normal[i] for i in range(3)), h, k, p)
        for h in headers
        for k, p in enumerate(h.positions or ())
    ]
    if len(items) < min_slices:
        raise QuarantineError(
            f"series has {len(items)} slice(s); a volume needs at least {min_slices}",
            "TooFewSlices",
        )
    items.sort(key=lambda t: t[0])
    dz = _check_gaps(items, normal, tol)
    ps = first.pixel_spacing
    return OrderedSeries(
        frames=[(h, k) for _, h, k, _ in items],
        spacing=(dz, float(ps[0]), float(ps[1])),  # type: ignore[index]
        shape=(len(items), first.rows, first.cols),
    )


def _close(a: Sequence[float], b: Sequence[float], tol: float) -> bool:
    return len(a) == len(b) and all(
        abs(x - y) <= tol * max(1.0, abs(y)) for x, y in zip(a, b, strict=True)
    )


def _check_gaps(items: list[Any], normal: Sequence[float], tol: float) -> float:
    if len(items) == 1:
        return float(items[0][1].thickness or 1.0)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(items)]
    med = sorted(gaps)[len(gaps) // 2]
    if med <= 1e-6 or min(gaps) <= 1e-3 * med:
        raise QuarantineError("duplicate slice positions", "Inconsistent")
    if max(abs(g - med) for g in gaps) > tol * med:
        raise QuarantineError(
            f"non-uniform slice spacing (gaps {min(gaps):.3g}..{max(gaps):.3g} mm)", "Inconsistent"
        )
    for (da, _, _, pa), (db, _, _, pb) in itertools.pairwise(items):
        shift = [pb[i] - pa[i] - (db - da) * normal[i] for i in range(3)]
        if sum(s * s for s in shift) ** 0.5 > tol * med:
            raise QuarantineError(
                "slices are not stacked along the normal (gantry tilt?)", "Inconsistent"
            )
    return float(sum(gaps) / len(gaps))
