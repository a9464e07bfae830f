"""DICOM series to volumes (no Spark): ordering, HU, resampling, windows, checks, real files."""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pydicom
import pytest
from pydicom.data import get_testdata_file

from gpuspark.data.sources import (
    DicomOptions,
    QuarantineError,
    apply_window,
    order_frames,
    parse_window,
    prep_series,
    read_header,
    read_labels,
    resample,
)
from gpuspark.demo import load_cohort, render_phantom, synth_ct


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cohort") / "c"
    synth_ct(root, studies=6, seed=3, size=32)
    return root


def _files(cohort: Path, params) -> list[str]:
    files = [str(cohort / "dicom" / f) for f in params.files]
    random.Random(params.index).shuffle(files)
    return files


def test_series_in_slice_order_with_shuffled_names_and_bad_instance_numbers(cohort: Path) -> None:
    params = load_cohort(cohort)
    kinds = {p.instance_numbers for p in params}
    assert {"missing", "wrong"} <= kinds  # the cohort exercises both traps
    for p in params:
        row = prep_series(_files(cohort, p), DicomOptions(window=parse_window("hu")))
        # raw HU equal the phantom exactly, slice by slice, z ascending
        np.testing.assert_array_equal(row["volume"], render_phantom(p))
        assert row["orig_spacing"] == pytest.approx(
            [p.slice_spacing, p.pixel_spacing] * 1 + [p.pixel_spacing]
        )
        assert row["orig_shape"] == [p.slices, p.size, p.size]


def test_hu_values_after_rescale_match_tissues(cohort: Path) -> None:
    params = load_cohort(cohort)
    assert len({(p.slope, p.intercept) for p in params}) >= 2  # several rescale conventions
    p = params[0]
    vol = prep_series(_files(cohort, p), DicomOptions(window=parse_window("hu")))["volume"]
    assert vol.dtype == np.int16
    assert vol[0, 0, 0] == -1000  # air, no noise outside the body
    centre = vol[:, p.size // 2 - 2 : p.size // 2 + 2, p.size // 2 - 2 : p.size // 2 + 2]
    assert -400 < float(np.median(centre)) < 120  # soft tissue / organ region


def test_shape_and_spacing_as_requested(cohort: Path) -> None:
    p = load_cohort(cohort)[1]
    files = _files(cohort, p)
    row = prep_series(files, DicomOptions(shape=(24, 20, 20)))
    assert row["volume"].shape == (24, 20, 20) and row["volume"].dtype == np.uint8
    extent = [p.slices * p.slice_spacing, p.size * p.pixel_spacing, p.size * p.pixel_spacing]
    assert [s * n for s, n in zip(row["spacing"], (24, 20, 20), strict=True)] == pytest.approx(
        extent
    )
    row = prep_series(files, DicomOptions(spacing=(6.0, 6.0, 6.0)))
    assert row["spacing"] == pytest.approx([6.0, 6.0, 6.0], rel=0.1)
    assert row["volume"].shape == tuple(round(e / 6.0) for e in extent)
    row = prep_series(files, DicomOptions(spacing=(6.0, 6.0, 6.0), shape=(16, 16, 16)))
    assert row["volume"].shape == (16, 16, 16)
    f16 = prep_series(files, DicomOptions(shape=(8, 8, 8), dtype="float16"))["volume"]
    assert f16.dtype == np.float16 and float(f16.min()) >= 0.0 and float(f16.max()) <= 1.0


def test_lesion_studies_have_label_one(cohort: Path) -> None:
    labels = read_labels(cohort / "labels.csv")
    params = load_cohort(cohort)
    assert {p.label for p in params} == {0, 1}
    for p in params:
        row = prep_series(_files(cohort, p), DicomOptions(shape=(8, 8, 8)), labels=labels)
        assert row["label"] == (1 if p.lesion else 0)


def test_lesion_raises_hu_inside_sphere(cohort: Path) -> None:
    p = next(p for p in load_cohort(cohort) if p.lesion)
    vol = render_phantom(p).astype(float)
    x, y, z, _ = p.lesion
    coords = (np.arange(p.size) - (p.size - 1) / 2) * p.pixel_spacing
    k = int(np.argmin([abs(zz - z) for zz in p.z_positions()]))
    i, j = int(np.argmin(abs(coords - y))), int(np.argmin(abs(coords - x)))
    assert vol[k, i, j] > 60  # soft tissue 40 + 60, with noise


def test_windows_and_resample() -> None:
    hu = np.array([[[-1000.0, -160.0, 40.0, 240.0, 3000.0]]])
    w = apply_window(hu, parse_window("soft-tissue"))
    assert w.tolist() == [[[0, 0, 128, 255, 255]]]
    assert parse_window("lung").level == -600 and parse_window("bone").width == 1800
    assert parse_window("50,350").width == 350
    with pytest.raises(ValueError, match="did you mean 'lung'"):
        parse_window("lugn")
    assert apply_window(hu, parse_window("hu")).dtype == np.int16
    vol = np.arange(8 * 8 * 8, dtype=np.float32).reshape(8, 8, 8)
    out, sp = resample(vol, (2.0, 1.0, 1.0), target_spacing=(1.0, 2.0, 2.0))
    assert out.shape == (16, 4, 4) and sp == (1.0, 2.0, 2.0)
    assert float(out.mean()) == pytest.approx(float(vol.mean()), rel=1e-3)  # linear data


def _series_copy(src: str, dst: Path, n: int, spacing: float = 2.0) -> list[str]:
    """n copies of a single-slice file as one series, positions along its normal."""
    out = []
    for k in range(n):
        ds = pydicom.dcmread(src)
        ds.SeriesInstanceUID = "1.2.3.4.5." + str(abs(hash(src)) % 10**8)
        ds.SOPInstanceUID = f"{ds.SeriesInstanceUID}.{k}"
        ipp = [float(v) for v in ds.ImagePositionPatient]
        iop = [float(v) for v in ds.ImageOrientationPatient]
        normal = np.cross(iop[:3], iop[3:])
        ds.ImagePositionPatient = [f"{ipp[i] + k * spacing * normal[i]:.4f}" for i in range(3)]
        ds.InstanceNumber = n - k
        path = dst / f"{Path(src).stem}-{k}.dcm"
        ds.save_as(path)
        out.append(str(path))
    return out


@pytest.mark.parametrize(
    "name",
    [
        "MR_small.dcm",
        "MR_small_RLE.dcm",
        "MR_small_jp2klossless.dcm",
        "MR_small_jpeg_ls_lossless.dcm",
        "MR_small_bigendian.dcm",
        "MR_small_implicit.dcm",
        "CT_small.dcm",
    ],
)
def test_compressed_transfer_syntaxes_decode(tmp_path: Path, name: str) -> None:
    files = _series_copy(get_testdata_file(name), tmp_path, 3)
    row = prep_series(files, DicomOptions(window=parse_window("hu")))
    assert row["volume"].shape[0] == 3
    if name.startswith("MR_small"):  # lossless: identical to the uncompressed pixels
        ref = pydicom.dcmread(get_testdata_file("MR_small.dcm")).pixel_array
        np.testing.assert_array_equal(row["volume"][1], ref)


REAL_FILES = [
    "CT_small.dcm",
    "MR_small.dcm",
    "MR_truncated.dcm",
    "JPEG2000.dcm",
    "JPEG-lossy.dcm",
    "JPGExtended.dcm",
    "MR_small_RLE.dcm",
    "SC_rgb_rle_2frame.dcm",
    "rtdose.dcm",
    "rtdose_rle.dcm",
    "rtplan.dcm",
    "test-SR.dcm",
    "no_meta.dcm",
    "badVR.dcm",
    "waveform_ecg.dcm",
    "liver_1frame.dcm",
    "693_J2KI.dcm",
]


@pytest.mark.parametrize("name", REAL_FILES)
def test_pydicom_files_become_volumes_or_quarantine_with_reason(name: str) -> None:
    path = get_testdata_file(name)
    try:
        row = prep_series([path], DicomOptions(shape=(4, 8, 8)))
    except QuarantineError as exc:
        assert exc.reason and exc.error_type
        return
    assert row["volume"].shape == (4, 8, 8)
    assert name.startswith("rtdose")  # the multi-frame dose grids do form volumes


def test_multiframe_rtdose_positions_from_grid_offsets() -> None:
    row = prep_series([get_testdata_file("rtdose.dcm")], DicomOptions(window=parse_window("hu")))
    ds = pydicom.dcmread(get_testdata_file("rtdose.dcm"))
    assert row["orig_shape"] == [int(ds.NumberOfFrames), ds.Rows, ds.Columns]
    assert row["orig_spacing"][0] == pytest.approx(
        abs(ds.GridFrameOffsetVector[1] - ds.GridFrameOffsetVector[0])
    )


def test_inconsistent_series_are_rejected_with_reasons(cohort: Path, tmp_path: Path) -> None:
    p = load_cohort(cohort)[0]
    files = sorted(_files(cohort, p))
    headers = [read_header(f) for f in files]
    ordered = order_frames(headers)
    assert ordered.shape[0] == p.slices
    # non-uniform spacing: drop one slice from the middle
    by_z = [h.path for h, _ in ordered.frames]
    with pytest.raises(QuarantineError, match="non-uniform slice spacing"):
        prep_series(by_z[:10] + by_z[11:])
    # duplicate position: the same file twice under another name
    dup = tmp_path / "dup.dcm"
    shutil.copy(by_z[3], dup)
    with pytest.raises(QuarantineError, match="duplicate slice positions"):
        prep_series([*by_z, str(dup)])
    # mixed orientation
    ds = pydicom.dcmread(by_z[5])
    ds.ImageOrientationPatient = [0, 1, 0, 0, 0, -1]
    odd = tmp_path / "odd.dcm"
    ds.save_as(odd)
    with pytest.raises(QuarantineError, match="mixed orientations"):
        prep_series([*by_z[:5], str(odd), *by_z[6:]])
    with pytest.raises(QuarantineError, match="at least 3"):
        prep_series(by_z[:2])


def test_fuzzed_dicom_series_never_crash(
    cohort: Path, tmp_path: Path, mutations: Callable[[bytes, random.Random], list[bytes]]
) -> None:
    rng = random.Random(7)
    p = load_cohort(cohort)[2]
    files = _files(cohort, p)
    outcomes = {"row": 0, "quarantined": 0}
    for trial, bad in enumerate(mutations(Path(files[0]).read_bytes(), rng) * 2):
        path = tmp_path / f"fuzz{trial}.dcm"
        path.write_bytes(bad)
        try:
            prep_series([str(path), *files[1:]], DicomOptions(shape=(8, 8, 8)))
            outcomes["row"] += 1
        except QuarantineError as exc:
            assert exc.reason
            outcomes["quarantined"] += 1
    assert outcomes["quarantined"] >= 3  # truncations at least


def test_resample_matches_torch_trilinear() -> None:
    torch = pytest.importorskip("torch")
    vol = np.random.default_rng(0).normal(size=(13, 17, 19)).astype(np.float32)
    for size in [(26, 9, 19), (5, 40, 7), (1, 3, 50)]:
        ours, _ = resample(vol, (1.0, 1.0, 1.0), shape=size)
        ref = torch.nn.functional.interpolate(
            torch.from_numpy(vol)[None, None], size=size, mode="trilinear", align_corners=False
        )[0, 0].numpy()
        np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_headers_read_from_local_paths_file_urls_and_fsspec_urls() -> None:
    fsspec = pytest.importorskip("fsspec")
    path = get_testdata_file("CT_small.dcm")
    with open(path, "rb") as f, fsspec.open("memory://dicom/ct.dcm", "wb") as out:
        out.write(f.read())
    local, url, remote = (
        read_header(path),
        read_header(f"file://{path}"),
        read_header("memory://dicom/ct.dcm"),
    )
    assert local.series_uid == url.series_uid == remote.series_uid
    assert remote.path == "memory://dicom/ct.dcm"
