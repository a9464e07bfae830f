"""Demo data: deterministic synthetic CT cohort and image folders; their CLI."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import pydicom
import pytest

from gpuspark.cli.main import main
from gpuspark.demo import DatasetExistsError, load_cohort, synth_ct, synth_images
from gpuspark.demo.staging import MARKER


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def test_synth_ct_is_deterministic_and_valid(tmp_path: Path) -> None:
    a = synth_ct(tmp_path / "a", studies=4, seed=9, size=24)
    synth_ct(tmp_path / "b", studies=4, seed=9, size=24)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    synth_ct(tmp_path / "c", studies=4, seed=10, size=24)
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")
    params = load_cohort(tmp_path / "a")
    assert a.files == sum(p.slices for p in params) and a.studies == 4
    assert len({p.slices for p in params}) > 1 or len({p.slice_spacing for p in params}) > 1
    with open(tmp_path / "a" / "labels.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["label"]) for r in rows] == [p.label for p in params]
    ds = pydicom.dcmread(tmp_path / "a" / "dicom" / params[0].files[0])
    assert ds.SOPClassUID == "1.2.840.10008.5.1.4.1.1.2" and ds.Modality == "CT"
    assert pydicom.uid.UID(ds.SeriesInstanceUID).is_valid
    assert ds.Rows == 24 and ds.pixel_array.shape == (24, 24)
    for attr in (
        "ImagePositionPatient",
        "ImageOrientationPatient",
        "PixelSpacing",
        "SliceThickness",
        "RescaleSlope",
        "RescaleIntercept",
    ):
        assert attr in ds


def test_synth_ct_lesions_about_half() -> None:
    from gpuspark.demo import cohort_params

    params = cohort_params(200, seed=0, size=32)
    share = sum(p.label for p in params) / len(params)
    assert 0.35 < share < 0.65
    assert len({p.patient_id for p in params}) < len(params)  # some follow-up studies


def test_refuses_non_empty_destination(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    with pytest.raises(DatasetExistsError):
        synth_images(tmp_path / "x", classes=1, per_class=1)
    assert (tmp_path / "x" / "keep.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["x"]  # no temp dir left behind


def test_synth_images_layout(tmp_path: Path) -> None:
    res = synth_images(tmp_path / "i", classes=3, per_class=4, seed=1, png_every=2)
    assert res.classes == ["class_00", "class_01", "class_02"] and res.images == 12
    files = sorted(f for f in (tmp_path / "i").rglob("*.*") if f.name != MARKER)
    assert len(files) == 12 and {f.suffix for f in files} == {".jpg", ".png"}


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "datasets",
                "synth-ct",
                str(tmp_path / "c"),
                "--studies",
                "2",
                "--size",
                "16",
                "--json",
            ]
        )
        == 0
    )
    assert '"studies": 2' in capsys.readouterr().out
    assert main(["datasets", "synth-ct", str(tmp_path / "c"), "--studies", "2"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert (
        main(
            ["datasets", "synth-images", str(tmp_path / "i"), "--classes", "2", "--per-class", "2"]
        )
        == 0
    )
    # option errors come before any Spark work
    src = str(tmp_path / "c" / "dicom")
    assert main(["prep", "dicom", src, str(tmp_path / "o"), "--window", "lugn"]) == 1
    assert "did you mean 'lung'" in capsys.readouterr().err
    assert main(["prep", "dicom", src, str(tmp_path / "o"), "--shape", "1,2"]) == 2
    assert "three positive integers z,y,x" in capsys.readouterr().err
    assert main(["prep", "images", str(tmp_path / "nope"), str(tmp_path / "o")]) == 1
    assert "does not exist" in capsys.readouterr().err


def _modes(root: Path) -> dict[str, int]:
    import stat

    paths = [root, *root.rglob("*")]
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in paths}


@pytest.mark.parametrize("command", ["synth-images", "synth-ct"])
def test_synth_output_follows_the_umask(command: str, tmp_path: Path) -> None:
    """Under umask 022 the generated root, its folders and files are 0755 / 0644, not 0700."""
    import os

    dst = tmp_path / "out"
    size = ["--classes", "2", "--per-class", "2"] if command == "synth-images" else []
    size = size or ["--studies", "2", "--size", "16"]
    old = os.umask(0o022)
    try:
        assert main(["datasets", command, str(dst), *size]) == 0
    finally:
        os.umask(old)
    modes = _modes(dst)
    assert len(modes) > 3
    want = {k: 0o755 if (dst / k).is_dir() else 0o644 for k in modes}
    assert {k: oct(v) for k, v in modes.items()} == {k: oct(v) for k, v in want.items()}
