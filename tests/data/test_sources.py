"""What every source reader shares (no Spark): patient hashing, stable splits, label tables,
the :class:`Source` protocol and the DICOM and image sources behind it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpuspark.data.sources import (
    DicomSource,
    ImageOptions,
    ImageSource,
    LabelsError,
    QuarantineError,
    Source,
    assign_split,
    hash_patient,
    parse_split,
    read_labels,
)
from gpuspark.demo import synth_ct, synth_images


def test_no_patient_in_two_splits() -> None:
    ids = [hash_patient(f"P{i}") for i in range(2000)]
    splits = {pid: assign_split(pid, (0.8, 0.1, 0.1)) for pid in ids}
    assert all(assign_split(pid, (0.8, 0.1, 0.1)) == s for pid, s in splits.items())
    shares = {s: list(splits.values()).count(s) / len(ids) for s in ("train", "val", "test")}
    assert shares["train"] == pytest.approx(0.8, abs=0.04)
    assert shares["val"] == pytest.approx(0.1, abs=0.03)
    assert parse_split("0.8,0.2") == (0.8, 0.2)
    with pytest.raises(ValueError, match="sum"):
        parse_split("0.5,0.1")


def test_read_labels_keys_and_names(tmp_path: Path) -> None:
    f = tmp_path / "l.csv"
    f.write_text("PatientID,label\nA,benign\nB,malignant\nC,benign\n")
    t = read_labels(f)
    assert t.key == "patient_id" and t.names == {0: "benign", 1: "malignant"}
    assert t.lookup("x", "B") == 1 and t.lookup("x", "Z") is None
    f.write_text("name,label\nA,1\n")
    with pytest.raises(LabelsError, match="series_uid"):
        read_labels(f)


class _ToySource:
    """A source of one-line text files, one sample per file."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def list_inputs(self) -> Iterator[tuple[str, int]]:
        for p in sorted(self.root.iterdir()):
            yield str(p), p.stat().st_size

    def read_header(self, uri: str) -> Any:
        return Path(uri).stem

    def sample_key(self, uri: str, header: Any) -> str:
        return str(header)

    def read_sample(self, uris: Sequence[str]) -> dict[str, Any]:
        return {"text": Path(uris[0]).read_text()}


def _samples(source: Source, quarantined: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every sample of ``source``, through the four steps of the protocol; the inputs whose
    header does not read go to ``quarantined``."""
    groups: dict[str, list[str]] = {}
    for uri, _ in source.list_inputs():
        try:
            header = source.read_header(uri)
        except QuarantineError:
            (quarantined if quarantined is not None else []).append(uri)
            continue
        groups.setdefault(source.sample_key(uri, header), []).append(uri)
    return {key: source.read_sample(sorted(uris)) for key, uris in groups.items()}


def test_the_sources_implement_the_source_protocol(tmp_path: Path) -> None:
    assert isinstance(DicomSource(str(tmp_path)), Source)
    assert isinstance(ImageSource(str(tmp_path)), Source)
    assert isinstance(_ToySource(tmp_path), Source)
    assert not isinstance(object(), Source)
    (tmp_path / "a.txt").write_text("alpha")
    assert _samples(_ToySource(tmp_path)) == {"a": {"text": "alpha"}}


def test_image_source_makes_one_sample_per_image(tmp_path: Path) -> None:
    synth_images(tmp_path / "imgs", classes=2, per_class=2, seed=0)
    source = ImageSource(str(tmp_path / "imgs"), ImageOptions(mode="resize", size=16))
    quarantined: list[str] = []
    samples = _samples(source, quarantined)
    assert len(samples) == 4
    assert {key.split("/")[0] for key in samples} == {"class_00", "class_01"}
    assert all(
        s["format"] == "jpeg" and min(s["width"], s["height"]) == 16 for s in samples.values()
    )
    assert [Path(q).name for q in quarantined] == [".gpuspark-generated.json"]  # no class folder


def test_dicom_source_makes_one_sample_per_series(tmp_path: Path) -> None:
    synth_ct(tmp_path / "c", studies=2, seed=3, size=32)
    samples = _samples(DicomSource(str(tmp_path / "c" / "dicom")))
    assert len(samples) == 2
    assert all(row["series_uid"] == uid for uid, row in samples.items())
