"""``gpuspark._util.spark_compat``: the supported pyspark versions, the features a version
lacks, the settings pinned for every version. Fast: nothing starts Spark (runs by default)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from gpuspark._util import spark_compat
from gpuspark.cluster.conf import driver_metrics_conf
from gpuspark.doctor.node import pyspark_check

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_pyproject_declares_the_requirement_the_messages_name() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert spark_compat.PYSPARK_REQUIREMENT in deps
    low = re.search(r">=([\d.]+)", spark_compat.PYSPARK_REQUIREMENT)
    assert low is not None and spark_compat.parse_version(low.group(1)) == spark_compat.PYSPARK_MIN


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("3.5.1", (3, 5, 1)),
        ("4.0.0.dev2", (4, 0, 0)),
        ("4.1", (4, 1, 0)),
        ("x", None),
        (None, None),
    ],
)
def test_parse_version(text: str | None, parsed: tuple[int, int, int] | None) -> None:
    assert spark_compat.parse_version(text) == parsed


@pytest.mark.parametrize("version", ["3.5.1", "3.5.9", "4.0.0", "4.3.0"])
def test_supported_versions_have_no_problem(version: str) -> None:
    assert spark_compat.version_problem(version) is None


@pytest.mark.parametrize(
    ("version", "words"),
    [
        ("3.5.0", "older than gpuspark supports (pyspark>=3.5.1,<5"),
        ("3.4.4", "older"),
        ("5.0.0", "newer than gpuspark supports"),
        ("nightly", "cannot read the pyspark version 'nightly'"),
    ],
)
def test_unsupported_versions_are_one_line_naming_the_requirement(version: str, words: str) -> None:
    problem = spark_compat.version_problem(version)
    assert problem is not None and words in problem and "\n" not in problem


def test_a_missing_feature_is_one_line_naming_the_version_that_has_it() -> None:
    line = spark_compat.missing("connect-server", "3.5.1")
    assert line is not None and "\n" not in line
    assert line.startswith("a local Spark Connect server needs pyspark >= 4.0.0 (installed: 3.5.1")
    assert spark_compat.missing("connect-server", "4.0.0") is None
    assert spark_compat.missing("connect-server", "") is not None  # unknown: not assumed


def test_the_wheel_matches_the_feature_table() -> None:
    """The installed pyspark ships a Spark Connect server exactly when the table says so."""
    spec = __import__("importlib").util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    jars = list((Path(spec.origin).parent / "jars").glob("spark-connect_*.jar"))
    assert bool(jars) == (spark_compat.missing("connect-server") is None)


def test_every_driver_gets_the_pinned_settings() -> None:
    conf = driver_metrics_conf()
    assert spark_compat.PINNED_CONF.items() <= conf.items()


def test_doctor_accepts_the_installed_pyspark() -> None:
    check = pyspark_check().as_dict()
    assert check["status"] == "ok", check
    assert check["evidence"] == f"pyspark {spark_compat.installed_version()}"


def test_doctor_refuses_an_older_pyspark_naming_the_requirement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spark_compat, "installed_version", lambda: "3.5.0")
    check = pyspark_check().as_dict()
    assert check["status"] == "failure" and "pyspark 3.5.0 is older" in check["evidence"]
    assert check["fix"] == "pip install 'pyspark>=3.5.1,<5'"
