"""Prep jobs check on the driver, before any cluster starts: source, destination, world size,
labels file, typed options; the CLI parses the text forms. No Spark here: ``job_session`` is
replaced by a function that fails the test if a job gets that far unexpectedly."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cli.main import main
from gpuspark.data import prep
from gpuspark.data.prep import (
    PrepError,
    common,
    deal_shards,
    prep_dicom,
    prep_images,
)
from gpuspark.data.prep import job as prep_job
from gpuspark.errors import DatasetExistsError, LabelsError


class _Started(Exception):
    """Raised where the cluster would start: every driver check passed."""


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    def started(*_a: Any, **_k: Any) -> Any:
        raise _Started

    monkeypatch.setattr(prep_job, "job_session", started)


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "src"
    (d / "a").mkdir(parents=True)
    (d / "a" / "x.dcm").write_bytes(b"x")
    return d


def test_checks_pass_then_the_cluster_starts(src: Path, tmp_path: Path) -> None:
    with pytest.raises(_Started):
        prep_dicom(src, tmp_path / "ds", shape=[16, 24, 24], window=(40, 400), split=[0.8, 0.2])
    with pytest.raises(_Started):
        prep_images(src, tmp_path / "ds", split=(0.9, 0.1), world_size=2)
    assert not (tmp_path / "ds").exists()  # the checks create nothing


@pytest.mark.parametrize("fn", [prep_dicom, prep_images])
def test_source_must_be_a_readable_directory(fn: Any, src: Path, tmp_path: Path) -> None:
    with pytest.raises(PrepError, match="does not exist"):
        fn(tmp_path / "nope", tmp_path / "ds")
    with pytest.raises(PrepError, match="not a directory"):
        fn(src / "a" / "x.dcm", tmp_path / "ds")
    if os.geteuid() != 0:
        src.chmod(0)
        try:
            with pytest.raises(PrepError, match="not readable"):
                fn(src, tmp_path / "ds")
        finally:
            src.chmod(0o755)


@pytest.mark.parametrize("fn", [prep_dicom, prep_images])
def test_existing_dataset_refused_before_the_job(fn: Any, src: Path, tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "manifest.json").write_text('{"version": 1}')
    with pytest.raises(DatasetExistsError, match="overwrite"):
        fn(src, ds)
    with pytest.raises(_Started):
        fn(src, ds, overwrite=True)
    (ds / "manifest.json").unlink()
    (ds / "notes.txt").write_text("mine")
    with pytest.raises(DatasetExistsError, match="not empty"):
        fn(src, ds)


@pytest.mark.parametrize("fn", [prep_dicom, prep_images])
@pytest.mark.parametrize("kwargs", [{"world_size": 0}, {"num_shards": 0}, {"world_size": -2}])
def test_world_size_and_num_shards_at_least_one(
    fn: Any, kwargs: dict, src: Path, tmp_path: Path
) -> None:
    name = next(iter(kwargs))
    with pytest.raises(PrepError, match=f"{name} must be at least 1"):
        fn(src, tmp_path / "ds", **kwargs)


def test_labels_file_unreadable_is_one_line(src: Path, tmp_path: Path) -> None:
    binary = tmp_path / "labels.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(LabelsError, match=r"labels file .*labels\.csv.*UTF-8") as info:
        prep_dicom(src, tmp_path / "ds", labels=binary)
    assert "\n" not in str(info.value)
    with pytest.raises(LabelsError, match="does not exist"):
        prep_dicom(src, tmp_path / "ds", labels=tmp_path / "none.csv")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"spacing": "1,1,1"}, "spacing must be a tuple"),
        ({"shape": "16,24,24"}, "shape must be a tuple"),
        ({"shape": (16, 24)}, "shape must be three positive integers"),
        ({"shape": (16, 24, 2.5)}, "shape must be three positive integers"),
        ({"spacing": (1, 0, 1)}, "spacing must be three positive numbers"),
        ({"split": "0.8,0.1,0.1"}, "split must be a sequence"),
        ({"split": (0.5, 0.1)}, "summing to 1"),
        ({"window": "40,400"}, "not a preset"),
        ({"window": "lugn"}, "did you mean 'lung'"),
        ({"window": (40, 0)}, "width must be > 0"),
        ({"dtype": "int8"}, "dtype must be"),
    ],
)
def test_typed_options(kwargs: dict, message: str, src: Path, tmp_path: Path) -> None:
    with pytest.raises(PrepError if "window" not in kwargs else Exception, match=message):
        prep_dicom(src, tmp_path / "ds", **kwargs)


def test_images_options(src: Path, tmp_path: Path) -> None:
    with pytest.raises(PrepError, match="split must be a sequence"):
        prep_images(src, tmp_path / "ds", split="0.9,0.1")
    with pytest.raises(PrepError, match="mode must be"):
        prep_images(src, tmp_path / "ds", mode="squash")


def test_plan_shards_refuses_world_size_zero() -> None:
    with pytest.raises(PrepError, match="world_size"):
        deal_shards({"s": (None, 1, 1)}, world_size=0, num_shards=None, tasks=1, shard_bytes=1)


def test_no_records_is_an_error_and_mostly_quarantined_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    q = [{"reason": "not a DICOM file: x"}] * 3 + [{"reason": "no label: y"}]
    with pytest.raises(PrepError, match=r"no records: 4 of 4 inputs .*not a DICOM file \(3\)"):
        common.check_outcome("prep dicom", "/src", "/dst", 4, 0, q)
    with caplog.at_level(logging.WARNING, logger="gpuspark"):
        common.check_outcome("prep dicom", "/src", "/dst", 6, 2, q)
    assert "4 of 6 inputs were quarantined" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpuspark"):
        common.check_outcome("prep dicom", "/src", "/dst", 8, 4, q)  # half: no warning
    assert caplog.text == ""


class _Conf:
    def __init__(self, cpus: str | None) -> None:
        self.cpus = cpus

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.cpus if key == "spark.task.cpus" and self.cpus else default


class _Spark:
    def __init__(self, parallelism: int, cpus: str | None = None) -> None:
        conf = _Conf(cpus)
        self.sparkContext = type(
            "SC", (), {"defaultParallelism": parallelism, "getConf": lambda _self: conf}
        )()


def test_cores_from_public_information() -> None:
    assert common.cores(_Spark(8)) == 8
    assert common.cores(_Spark(8, "2")) == 4
    assert common.cores(_Spark(1, "4")) == 2  # fallback


def test_public_face() -> None:
    assert set(prep.__all__) >= {"PrepResult", "Progress", "prep_dicom", "prep_images"}
    assert prep.QUARANTINE_FILE == "quarantine.parquet"


# --------------------------------------------------------------------------- CLI


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    seen: list[dict] = []

    def fake(src: Any, dst: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        raise PrepError("stop here")

    monkeypatch.setattr(prep, "prep_dicom", fake)
    monkeypatch.setattr(prep, "prep_images", fake)
    return seen


def test_cli_parses_text_into_typed_values(calls: list[dict], src: Path, tmp_path: Path) -> None:
    dst = str(tmp_path / "ds")
    args = ["prep", "dicom", str(src), dst, "--shape", "16,24,24", "--spacing", "1,0.8,0.8"]
    assert main([*args, "--window", "50,350", "--split", "0.7,0.3", "--json"]) == 1
    assert calls[-1]["shape"] == (16, 24, 24) and calls[-1]["spacing"] == (1.0, 0.8, 0.8)
    assert calls[-1]["window"] == (50.0, 350.0) and calls[-1]["split"] == (0.7, 0.3)
    assert main(["prep", "dicom", str(src), dst, "--window", "lung", "--json"]) == 1
    assert calls[-1]["window"] == "lung" and calls[-1]["split"] == (0.8, 0.1, 0.1)
    assert main(["prep", "images", str(src), dst, "--json"]) == 1
    assert calls[-1]["split"] == (0.9, 0.1)  # train + val: what `train resnet2d` reads


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["dicom", "--shape", "1,2"], "--shape"),
        (["dicom", "--shape", "16,24,x"], "--shape"),
        (["dicom", "--spacing", "1,0,1"], "--spacing"),
        (["dicom", "--window", "40,x"], "--window"),
        (["dicom", "--split", "0.8;0.2"], "--split"),
        (["dicom", "--world-size", "0"], "--world-size"),
        (["images", "--num-shards", "0"], "--num-shards"),
    ],
)
def test_cli_bad_text_is_a_usage_error(
    args: list[str],
    option: str,
    calls: list[dict],
    src: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kind, *opts = args
    assert main(["prep", kind, str(src), str(tmp_path / "ds"), *opts]) == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err
    assert calls == []


def test_links_to_folders_that_read_files_twice_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ln -s .. img/cat/loop`` made 12 images 732 records, ids nested ~40 levels deep, dog
    images labelled cat and copies in train and val. Loops and second ways into a folder of
    the tree are refused in one line naming every link; links to files, and to folders outside
    the tree, are fine."""
    monkeypatch.chdir(tmp_path)
    for label in ("cat", "dog"):
        (tmp_path / "img" / label).mkdir(parents=True)
        for i in range(6):
            (tmp_path / "img" / label / f"{i}.jpg").write_bytes(b"x")
    os.symlink("..", tmp_path / "img" / "cat" / "loop")
    os.symlink("../dog", tmp_path / "img" / "cat" / "dogs")
    assert main(["prep", "images", "img", "out"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert err == [
        "error: source img has 2 links to folders that would read files more than once: "
        "cat/dogs -> ../dog (the tree already holds it as dog); cat/loop -> .. (leads back "
        "to img) (remove those links (a link to a file is fine), or pass a source without them)"
    ]
    assert not (tmp_path / "out").exists()
    for link in ("loop", "dogs"):
        os.unlink(tmp_path / "img" / "cat" / link)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "7.jpg").write_bytes(b"x")
    os.symlink("../../elsewhere", tmp_path / "img" / "dog" / "more")  # outside: read once
    os.symlink("0.jpg", tmp_path / "img" / "cat" / "zero.jpg")  # a link to a file: fine
    with pytest.raises(_Started):
        prep_images(tmp_path / "img", tmp_path / "out")


_KINDS = {  # prep kind -> (a file its source check accepts, the options it needs)
    "parquet": ("t.parquet", ["--label", "y"]),
    "text": ("a.txt", []),
    "images": ("cat/0.jpg", []),
    "dicom": ("s/0.dcm", []),
}


@pytest.mark.parametrize("kind", sorted(_KINDS))
@pytest.mark.parametrize(
    ("src_rel", "dst_rel", "line"),
    [
        ("risk", "risk/sub", "destination {dst} lies inside the source {src}"),
        ("risk", "risk", "destination {dst} is the source {src}"),
        ("out/risk", "out", "source {src} lies inside the destination {dst}"),
    ],
)
def test_cli_refuses_a_destination_overlapping_the_source(
    kind: str,
    src_rel: str,
    dst_rel: str,
    line: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``prep parquet risk/ risk/sub`` left ``risk/sub/_gpuspark_staging-*`` among its own
    inputs: a destination that is, lies in or holds the source is refused in one line before
    anything starts (the ``no_cluster`` fixture fails the test otherwise), as ``predict``
    refuses one."""
    monkeypatch.chdir(tmp_path)
    name, opts = _KINDS[kind]
    (tmp_path / src_rel / name).parent.mkdir(parents=True)
    (tmp_path / src_rel / name).write_bytes(b"x")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(["prep", kind, src_rel, dst_rel, *opts]) == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    src, dst = tmp_path / src_rel, dst_rel
    assert len(err) == 1 and err[0].startswith("error: " + line.format(src=src, dst=dst)), err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_destination_reached_through_a_link_into_the_source_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "x.dcm").write_bytes(b"x")
    os.symlink(src, tmp_path / "link")
    with pytest.raises(PrepError, match="lies inside the source"):
        prep_images(src, tmp_path / "link" / "ds")
    with pytest.raises(_Started):
        prep_images(src, tmp_path / "ds")
