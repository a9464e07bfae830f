"""``synth_risk`` / ``gpuspark datasets synth-risk``: the argument checks made before Spark
starts, and the CLI's errors. The generated table itself (skew, positive rate, repeated ids,
the signal a model learns) is checked with Spark in ``test_prep_parquet.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuspark.cli.main import main
from gpuspark.demo import RISK_CATEGORIES, synth_risk
from gpuspark.errors import DatasetExistsError, GpusparkError


class _Started(Exception):
    """Raised where Spark would start: every check passed."""


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuspark.cluster.session as session

    def started(*_a: Any, **_k: Any) -> Any:
        raise _Started

    monkeypatch.setattr(session, "job_session", started)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rows": 0}, "rows must be at least 1, got 0"),
        ({"rows": 10, "partitions": 0}, "partitions must be at least 1"),
        ({"rows": 10, "bad_rows": 1.0}, r"bad_rows must be a fraction in \[0, 1\), got 1.0"),
        ({"rows": 10, "bad_rows": -0.1}, "bad_rows must be a fraction"),
    ],
)
def test_bad_arguments_refused_before_spark(
    kwargs: dict[str, Any], message: str, tmp_path: Path
) -> None:
    with pytest.raises(GpusparkError, match=message):
        synth_risk(tmp_path / "risk", **kwargs)
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_non_empty_destination_refused_and_nothing_left_behind(tmp_path: Path) -> None:
    dst = tmp_path / "risk"
    dst.mkdir()
    (dst / "keep.txt").write_text("x")
    with pytest.raises(DatasetExistsError, match="already exists and is not empty"):
        synth_risk(dst, 10)
    # overwrite replaces only a folder synth-risk wrote: a user's file is never deleted
    with pytest.raises(DatasetExistsError, match="was not written by gpuspark"):
        synth_risk(dst, 10, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["risk"]
    assert (dst / "keep.txt").read_text() == "x"


def test_overwrite_of_own_output_reaches_spark_and_leaves_nothing_behind(tmp_path: Path) -> None:
    from gpuspark.demo.staging import commit_dir, staging_dir

    dst = tmp_path / "risk"
    tmp = staging_dir(dst, overwrite=False)
    (tmp / "part-0.parquet").write_bytes(b"x")
    commit_dir(tmp, dst, "datasets synth-risk")
    with pytest.raises(_Started):  # every check passed; the staging folder is removed
        synth_risk(dst, 10, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["risk"]
    assert (dst / "part-0.parquet").read_bytes() == b"x"


def test_remote_destination_refused(tmp_path: Path) -> None:
    with pytest.raises(GpusparkError, match="is a remote URL"):
        synth_risk("s3://bucket/risk", 10)


def test_categories_are_skewed_lists_of_distinct_values() -> None:
    assert len(RISK_CATEGORIES["region"]) == 20 and len(RISK_CATEGORIES["channel"]) == 8
    for values in RISK_CATEGORIES.values():
        assert len(set(values)) == len(values) >= 4


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["datasets", "synth-risk", str(tmp_path / "r"), "--rows", "0"]) == 2
    assert "--rows" in capsys.readouterr().err
    assert main(["datasets", "synth-risk", str(tmp_path / "r"), "--bad-rows", "1.5"]) == 2
    assert "--bad-rows" in capsys.readouterr().err
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    assert main(["datasets", "synth-risk", str(full), "--rows", "100"]) == 1
    err = capsys.readouterr().err
    assert "already exists and is not empty" in err and "--overwrite" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
