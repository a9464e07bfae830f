"""Session plans (dry run) for every master kind."""

from __future__ import annotations

import sys

import pytest

from gpuspark.cluster.builder import session_plan
from gpuspark.errors import ClusterError


def test_executors_get_the_driver_python() -> None:
    plan = session_plan("spark://10.0.0.1:7077")
    assert plan.conf["spark.pyspark.python"] == sys.executable
    assert plan.conf["spark.executorEnv.PYSPARK_PYTHON"] == sys.executable
    assert plan.env["PYSPARK_PYTHON"] == sys.executable
    assert "spark.driver.memory" not in plan.conf  # small-memory defaults are for local only


def test_local_masters_get_small_quiet_defaults() -> None:
    plan = session_plan("local[2]")
    assert plan.conf["spark.driver.memory"] == "1g"
    assert plan.conf["spark.ui.showConsoleProgress"] == "false"


def test_overrides_win_and_accept_underscores() -> None:
    plan = session_plan("local[2]", spark_executor_cores=4, **{"spark.driver.memory": "3g"})
    assert plan.conf["spark.executor.cores"] == "4"
    assert plan.conf["spark.driver.memory"] == "3g"


def test_yarn_dry_run_materializes_spark_submit() -> None:
    plan = session_plan("yarn", **{"spark.executor.resource.gpu.amount": 1})
    line = plan.materialize()
    assert "spark-submit --master yarn" in line
    assert "--conf spark.executor.resource.gpu.amount=1" in line
    assert plan.conf["spark.submit.deployMode"] == "client"


def test_k8s_needs_an_image() -> None:
    with pytest.raises(ClusterError, match=r"spark\.kubernetes\.container\.image"):
        session_plan("k8s://https://api.example:6443")
    plan = session_plan(
        "k8s://https://api.example:6443", **{"spark.kubernetes.container.image": "img:1"}
    )
    assert plan.master.startswith("k8s://")


def test_bad_master_is_named() -> None:
    with pytest.raises(ClusterError, match=r"master='mesos://x' is not a Spark master URL"):
        session_plan("mesos://x")


def test_no_master_and_no_cluster_says_what_to_do(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GPUSPARK_STATE_DIR", str(tmp_path))
    with pytest.raises(ClusterError, match="gpuspark cluster up"):
        session_plan(None)
