"""A synthetic CT cohort as real DICOM series (``synth_ct``) and its ground truth.

``synth_ct`` writes body-like phantoms (air, fat, soft tissue, liver, lungs, bone) as CT Image
Storage files with valid UIDs and geometry; about half of the studies carry a lesion (a sphere
of +60 HU over soft tissue), which gives the label. File names are shuffled, folders nested,
InstanceNumber is sometimes missing or wrong, and series differ in slice count and spacing, so
that a reader must order slices by position and resample. Everything is deterministic per seed.

``render_phantom`` recomputes the exact Hounsfield units of a series from the parameters kept
in ``cohort.json``, which is how tests check a reader against ground truth.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark._util.extras import require
from gpuspark.demo.staging import commit_dir, staging_dir

__all__ = [
    "CohortSummary",
    "SeriesParams",
    "cohort_params",
    "load_cohort",
    "render_phantom",
    "synth_ct",
]

CT_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.2"
_SYNTH = "writing synthetic DICOM"  # what needs the [dicom] extra (pydicom)
AIR_HU = -1000
FAT_HU = -100
SOFT_HU = 40
LIVER_HU = 60
LUNG_HU = -850
BONE_HU = 700
MARROW_HU = 250
LESION_DELTA_HU = 60
NOISE_HU = 8.0


@dataclass(frozen=True)
class SeriesParams:
    """Everything needed to re-render one synthetic series exactly (lengths in mm)."""

    index: int
    patient_id: str
    study_uid: str
    series_uid: str
    size: int
    pixel_spacing: float
    slice_spacing: float
    slices: int
    z0: float
    body_axes: tuple[float, float]
    body_center: tuple[float, float]
    fat_mm: float
    lesion: tuple[float, float, float, float] | None  # x, y, z, radius
    slope: float
    intercept: float
    signed: bool
    descending: bool
    instance_numbers: str  # "ok" | "missing" | "wrong"
    noise_seed: int
    files: list[str] = field(default_factory=list)

    @property
    def label(self) -> int:
        """1 if the series carries a lesion, else 0."""
        return 0 if self.lesion is None else 1

    def z_positions(self) -> list[float]:
        """Slice positions along z (ascending)."""
        return [self.z0 + k * self.slice_spacing for k in range(self.slices)]


@dataclass(frozen=True)
class CohortSummary:
    """What ``synth_ct`` wrote."""

    path: str
    dicom_dir: str
    labels_csv: str
    studies: int
    patients: int
    lesions: int
    files: int
    bytes: int


def _uid(seed: int, *parts: object) -> Any:
    generate_uid = require("pydicom.uid", "dicom", _SYNTH).generate_uid
    return str(generate_uid(entropy_srcs=[f"gpuspark-synth-{seed}", *map(str, parts)]))


def cohort_params(studies: int, seed: int = 0, *, size: int = 96) -> list[SeriesParams]:
    """The deterministic parameters of a cohort of ``studies`` single-series CT studies.

    About one study in five is a follow-up of the previous patient, so patients can have
    several studies (which splits must keep together).
    """
    import numpy as np

    if studies < 1:
        raise ValueError(f"studies must be >= 1, got: {studies}")
    rng = np.random.default_rng(seed)
    out: list[SeriesParams] = []
    patient = -1
    for i in range(studies):
        if i == 0 or rng.random() >= 0.2:
            patient += 1
        ps = round(float(rng.uniform(3.0, 3.6)), 3)
        dz = float(rng.choice([4.0, 4.5, 5.0]))
        n = int(rng.integers(36, 49))
        fov = ps * (size - 1)
        axes = (float(rng.uniform(0.36, 0.43) * fov), float(rng.uniform(0.27, 0.32) * fov))
        center = (float(rng.uniform(-5, 5)), float(rng.uniform(-5, 5)))
        z0 = round(float(rng.uniform(-120, -80)), 2)
        lesion = _lesion(rng, axes, center, z0, dz, n) if rng.random() < 0.5 else None
        kind = int(rng.integers(0, 3))
        slope, intercept, signed = [(1.0, -1024.0, False), (1.0, 0.0, True), (0.5, -1024.0, False)][
            kind
        ]
        out.append(
            SeriesParams(
                index=i,
                patient_id=f"SYN{seed:04d}-{patient:05d}",
                study_uid=_uid(seed, "study", i),
                series_uid=_uid(seed, "series", i),
                size=size,
                pixel_spacing=ps,
                slice_spacing=dz,
                slices=n,
                z0=z0,
                body_axes=axes,
                body_center=center,
                fat_mm=float(rng.uniform(6, 14)),
                lesion=lesion,
                slope=slope,
                intercept=intercept,
                signed=signed,
                descending=bool(rng.random() < 0.5),
                instance_numbers=("wrong", "missing", "ok")[i % 3],
                noise_seed=int(rng.integers(0, 2**31 - 1)),
            )
        )
    return out


def _lesion(
    rng: Any, axes: tuple[float, float], center: tuple[float, float], z0: float, dz: float, n: int
) -> tuple[float, float, float, float]:
    """A sphere inside the soft-tissue core, away from the spine, lungs and liver."""
    import numpy as np

    r = min(float(rng.uniform(12, 22)), 0.27 * axes[0])  # capped for small phantoms
    zlo, zhi = z0 + r + dz, z0 + (n - 1) * dz * 0.55 - r  # lower body: no lungs there
    zhi = max(zhi, zlo)
    x = y = 0.0
    for _ in range(10_000):  # rejection sampling; small phantoms may leave little room
        x = float(rng.uniform(-0.6, 0.6) * axes[0])
        y = float(rng.uniform(-0.55, 0.25) * axes[1])
        inside = ((x / (axes[0] * 0.8)) ** 2 + (y / (axes[1] * 0.8)) ** 2) <= 1.0
        spine = np.hypot(x, y - 0.62 * axes[1]) < 0.16 * axes[1] + r + 4
        liver = _liver_mask(x - r, y, axes) or _liver_mask(x, y, axes)
        if inside and not spine and not liver:
            break
    return (x + center[0], y + center[1], float(rng.uniform(zlo, zhi)), r)


def _liver_mask(x: Any, y: Any, axes: tuple[float, float]) -> Any:
    return ((x + 0.45 * axes[0]) / (0.3 * axes[0])) ** 2 + (
        (y + 0.05 * axes[1]) / (0.45 * axes[1])
    ) ** 2 <= 1.0


def render_phantom(p: SeriesParams) -> Any:
    """Exact Hounsfield units of series ``p`` as an int16 array (z ascending, y, x)."""
    import numpy as np

    n = p.size
    coords = (np.arange(n) - (n - 1) / 2) * p.pixel_spacing
    yy, xx = np.meshgrid(coords, coords, indexing="ij")
    x, y = xx - p.body_center[0], yy - p.body_center[1]
    a, b = p.body_axes
    rng = np.random.default_rng(p.noise_seed)
    zs = p.z_positions()
    zmid = zs[0] + 0.55 * (zs[-1] - zs[0])
    vol = np.empty((p.slices, n, n), dtype=np.int16)
    for k, z in enumerate(zs):
        hu = np.full((n, n), float(AIR_HU))
        body = (x / a) ** 2 + (y / b) ** 2 <= 1.0
        core = (x / (a - p.fat_mm)) ** 2 + (y / (b - p.fat_mm)) ** 2 <= 1.0
        hu[body] = FAT_HU
        hu[core] = SOFT_HU
        if z < zmid:
            hu[core & _liver_mask(x, y, p.body_axes)] = LIVER_HU
        else:
            grow = min(1.0, (z - zmid) / 30.0 + 0.4)
            for sx in (-1, 1):
                lung = ((x - sx * 0.42 * a) / (0.3 * a * grow)) ** 2 + (
                    (y + 0.1 * b) / (0.5 * b * grow)
                ) ** 2 <= 1.0
                hu[core & lung] = LUNG_HU
        spine_r = np.hypot(x, y - 0.62 * b)
        hu[spine_r < 0.16 * b] = BONE_HU
        hu[spine_r < 0.09 * b] = MARROW_HU
        if p.lesion is not None:
            lx, ly, lz, lr = p.lesion
            sphere = (xx - lx) ** 2 + (yy - ly) ** 2 + (z - lz) ** 2 <= lr**2
            hu[sphere & (hu == SOFT_HU)] += LESION_DELTA_HU
        noise = rng.normal(0.0, NOISE_HU, size=(n, n))
        hu = np.where(body, hu + noise, hu)
        vol[k] = np.clip(np.rint(hu), -1024, 3071).astype(np.int16)
    return vol


def _slice_dataset(p: SeriesParams, k: int, z: float, hu: Any, seed: int) -> Any:
    import numpy as np

    dataset = require("pydicom.dataset", "dicom", _SYNTH)
    uid = require("pydicom.uid", "dicom", _SYNTH)
    Dataset, FileMetaDataset = dataset.Dataset, dataset.FileMetaDataset
    UID, ExplicitVRLittleEndian = uid.UID, uid.ExplicitVRLittleEndian
    PYDICOM_IMPLEMENTATION_UID = uid.PYDICOM_IMPLEMENTATION_UID

    sop_uid = _uid(seed, "sop", p.index, k)
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = UID(CT_IMAGE_STORAGE)
    meta.MediaStorageSOPInstanceUID = sop_uid
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    meta.ImplementationClassUID = PYDICOM_IMPLEMENTATION_UID
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = CT_IMAGE_STORAGE
    ds.SOPInstanceUID = sop_uid
    ds.Modality = "CT"
    ds.PatientID = p.patient_id
    ds.PatientName = f"Synthetic^{p.patient_id}"
    ds.StudyInstanceUID = p.study_uid
    ds.SeriesInstanceUID = p.series_uid
    ds.FrameOfReferenceUID = _uid(seed, "for", p.index)
    ds.StudyDate = "20260101"
    ds.SeriesNumber = 1
    order = p.slices - 1 - k if p.descending else k
    if p.instance_numbers == "ok":
        ds.InstanceNumber = order + 1
    elif p.instance_numbers == "wrong":
        ds.InstanceNumber = (order * 7919) % p.slices + 1  # a permutation, not the order
    half = (p.size - 1) / 2 * p.pixel_spacing
    ds.ImagePositionPatient = [f"{-half:.4f}", f"{-half:.4f}", f"{z:.4f}"]
    ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
    ds.PixelSpacing = [p.pixel_spacing, p.pixel_spacing]
    ds.SliceThickness = p.slice_spacing
    ds.RescaleSlope = p.slope
    ds.RescaleIntercept = p.intercept
    ds.RescaleType = "HU"
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows = ds.Columns = p.size
    ds.BitsAllocated = 16
    ds.BitsStored = 16
    ds.HighBit = 15
    ds.PixelRepresentation = 1 if p.signed else 0
    stored = np.rint((hu.astype(np.float64) - p.intercept) / p.slope)
    ds.PixelData = stored.astype(np.int16 if p.signed else np.uint16).tobytes()
    return ds


def _file_name(p: SeriesParams, k: int, seed: int) -> str:
    h = hashlib.sha256(f"{seed}/{p.series_uid}/{k}".encode()).hexdigest()
    layout = p.index % 3
    if layout == 0:
        return f"{p.patient_id}/{h[:8]}/{h[8:24]}.dcm"
    if layout == 1:
        return f"{h[:2]}/{h[2:8]}/{h[8:24]}"  # no extension, hashed folders
    return f"flat/{h[8:24]}.dcm"  # studies mixed in one folder


def synth_ct(
    dst: str | os.PathLike[str],
    studies: int = 20,
    seed: int = 0,
    *,
    size: int = 96,
    overwrite: bool = False,
) -> CohortSummary:
    """Write a synthetic CT cohort: ``dst/dicom/...`` series, ``labels.csv``, ``cohort.json``.

    ``labels.csv`` has columns ``series_uid, study_uid, patient_id, label`` (1 = lesion).
    The directory appears complete or not at all (written under a temporary name, renamed).
    """
    root = storage.as_path(dst)
    params = cohort_params(studies, seed, size=size)
    tmp = staging_dir(dst, overwrite)
    try:
        total, nfiles = 0, 0
        written: list[SeriesParams] = []
        for p in params:
            files = _write_series(tmp / "dicom", p, seed)
            total += sum((tmp / "dicom" / f).stat().st_size for f in files)
            nfiles += len(files)
            written.append(SeriesParams(**{**asdict(p), "files": files}))
        _write_labels(tmp / "labels.csv", written)
        (tmp / "cohort.json").write_text(
            json.dumps({"seed": seed, "size": size, "series": [asdict(p) for p in written]})
        )
        commit_dir(tmp, dst, "datasets synth-ct")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return CohortSummary(
        path=str(root),
        dicom_dir=str(root / "dicom"),
        labels_csv=str(root / "labels.csv"),
        studies=len(params),
        patients=len({p.patient_id for p in params}),
        lesions=sum(p.label for p in params),
        files=nfiles,
        bytes=total,
    )


def _write_series(root: Path, p: SeriesParams, seed: int) -> list[str]:
    vol = render_phantom(p)
    files = []
    for k, z in enumerate(p.z_positions()):
        rel = _file_name(p, k, seed)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        _slice_dataset(p, k, z, vol[k], seed).save_as(path, enforce_file_format=True)
        files.append(rel)
    return files


def _write_labels(path: Path, params: list[SeriesParams]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["series_uid", "study_uid", "patient_id", "label"])
        for p in params:
            w.writerow([p.series_uid, p.study_uid, p.patient_id, p.label])


def load_cohort(path: str | os.PathLike[str]) -> list[SeriesParams]:
    """The series parameters recorded in ``cohort.json`` of a cohort written by ``synth_ct``."""
    data = json.loads((Path(path) / "cohort.json").read_text())
    out = []
    for s in data["series"]:
        s["body_axes"] = tuple(s["body_axes"])
        s["body_center"] = tuple(s["body_center"])
        s["lesion"] = None if s["lesion"] is None else tuple(s["lesion"])
        out.append(SeriesParams(**s))
    return out
