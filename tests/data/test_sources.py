"""What every source reader shares (no Spark): patient hashing, stable splits, label tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuspark.data.sources import (
    LabelsError,
    assign_split,
    hash_patient,
    parse_split,
    read_labels,
)


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
