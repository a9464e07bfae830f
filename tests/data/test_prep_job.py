"""The prep job base's outcome warnings (``gpuspark.data.prep.job``), without Spark: a split
that was asked for and came out empty (``prep parquet --id`` where every id is the same puts
every row in train, and ``train`` then fails on ``val``), and a classification dataset of one
class (``prep images`` of a single class folder). The result carries them (``--json``) and
logs them (the CLI prints logged warnings on stderr)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpuspark.data.format.manifest import Manifest, ShardInfo
from gpuspark.data.prep.common import WriteOptions
from gpuspark.data.prep.job import PrepRun, outcome_warnings


def _manifest(**per_split: int) -> Manifest:
    """A committed manifest with one shard of ``records`` per split named."""
    shards = [
        ShardInfo(f"{name}-0.tfrecord", n, 100 * n, "h", f"{name}-0.idx")
        for name, n in per_split.items()
    ]
    return Manifest(
        shards=shards,
        total_records=sum(per_split.values()),
        splits={name: [f"{name}-0.tfrecord"] for name in per_split},
    )


def _run(tmp_path: Path, kind: str, fractions: tuple[float, ...] | None) -> PrepRun:
    write = WriteOptions(fractions, None, None, False, None)
    return PrepRun(kind, str(tmp_path / "src"), str(tmp_path / "ds"), write)


def test_every_id_alike_warns_that_val_and_test_are_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``prep parquet --id k`` (default split 0.8,0.1,0.1) where every row has one id."""
    run = _run(tmp_path, "parquet", (0.8, 0.1, 0.1))
    with caplog.at_level(logging.WARNING, logger="gpuspark"):
        res = run.result(
            _manifest(train=3), inputs=3, files_in_rows=3, q_rows=[], label_map={"0": "a", "1": "b"}
        )
    [line] = res.warnings
    assert "split val (0.1 asked) and test (0.1 asked) came out empty" in line
    assert line.startswith(f"prep parquet of {tmp_path / 'src'}: ")
    assert "gpuspark train needs --val-split none" in line and "\n" not in line
    assert res.as_dict()["warnings"] == [line]  # what --json prints
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [line]


def test_one_class_warns(tmp_path: Path) -> None:
    """``prep images`` of SRC/cat/*.jpg only."""
    res = _run(tmp_path, "images", (0.9, 0.1)).result(
        _manifest(train=9, val=1), inputs=10, files_in_rows=10, q_rows=[], label_map={"0": "cat"}
    )
    assert res.warnings == [
        f"prep images of {tmp_path / 'src'}: one class only ('cat'): a classifier trained on it"
        " learns nothing; check the labels (or the class folders)"
    ]


@pytest.mark.parametrize(
    ("fractions", "splits", "label_map", "expected"),
    [
        ((0.9, 0.1), {"train": 9, "val": 1}, {"0": "a", "1": "b"}, []),  # all is well
        (None, {}, {"0": "a", "1": "b"}, []),  # no splits asked
        ((1.0,), {"train": 4}, None, []),  # only train asked
        ((0.8, 0.2, 0.0), {"train": 4, "val": 1}, None, []),  # test=0 asked nothing
        ((0.9, 0.0, 0.1), {"train": 4}, None, ["split test (0.1 asked) came out empty"]),
        ((0.5, 0.5), {"val": 2}, None, ["--train-split all"]),
        ((0.9, 0.1), {"train": 9, "val": 0}, None, ["--val-split none"]),
        ((0.9, 0.1), {"train": 9, "val": 1}, {}, []),  # no labels (text, DICOM without)
    ],
)
def test_outcome_warnings_cases(
    fractions: tuple[float, ...] | None,
    splits: dict[str, int],
    label_map: dict[str, str] | None,
    expected: list[str],
) -> None:
    got = outcome_warnings("prep x", "/s", fractions, splits, label_map)
    assert len(got) == len(expected)
    for line, part in zip(got, expected, strict=True):
        assert part in line
    if fractions == (0.9, 0.0, 0.1):
        assert "gpuspark train needs" not in got[0]  # train reads no test split by default
