"""The embedded cluster and its applications expose Spark's Prometheus metrics the way a
rendered production conf does, and publish themselves as file_sd targets while they run."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cluster.conf import METRICS_NAMESPACE, spark_conf
from gpuspark.cluster.monitor_dirs import targets_dir
from gpuspark.monitor import names
from gpuspark.spec import default_spec


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def _targets(kind: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((targets_dir() / kind).glob("*.json")):
        out.extend(json.loads(path.read_text()))
    return out


def test_namespace_is_stable_and_shared() -> None:
    conf = spark_conf(default_spec())
    assert conf["spark.metrics.namespace"] == METRICS_NAMESPACE == names.SPARK_NAMESPACE
    assert conf["spark.ui.prometheus.enabled"] == "true"


@pytest.mark.spark
def test_master_metrics_and_target(local_cluster: Any) -> None:
    port = local_cluster.state.webui_port
    groups = _targets("spark-master")
    assert any(f"127.0.0.1:{port}" in g["targets"] for g in groups), groups
    text = _get(f"http://127.0.0.1:{port}/metrics/master/prometheus")
    assert "metrics_master_aliveWorkers_Value" in text, text[:500]


@pytest.mark.spark
def test_driver_and_executor_metrics_and_target(spark: Any) -> None:
    sc = spark.sparkContext
    sc.parallelize(range(64), 4).sum()
    app_id = sc.applicationId
    groups = [g for g in _targets("spark-apps") if g["labels"]["spark_app_id"] == app_id]
    assert len(groups) == 1, _targets("spark-apps")
    target = groups[0]["targets"][0]
    driver = _get(f"http://{target}/metrics/prometheus")
    # The stable namespace, not the app id, in driver metric names.
    assert f"metrics_{METRICS_NAMESPACE}_driver_" in driver
    assert app_id.replace("-", "_") not in driver
    executors = _get(f"http://{target}/metrics/executors/prometheus")
    assert "metrics_executor_activeTasks{" in executors
    assert f'application_id="{app_id}"' in executors


@pytest.mark.spark
def test_withdraw_removes_the_target(spark: Any) -> None:
    from gpuspark.cluster.announce import announce_app, withdraw_app

    app_id = announce_app(spark)
    assert app_id == spark.sparkContext.applicationId
    path = targets_dir() / "spark-apps" / f"{app_id}.json"
    assert path.exists()
    withdraw_app(app_id)
    assert not path.exists()
    withdraw_app(app_id)  # twice: no error
    announce_app(spark)  # the shared session keeps its target for the other tests


@pytest.mark.slow
@pytest.mark.spark
def test_job_session_withdraws_its_target(spark_factory: Any, local_cluster: Any) -> None:
    from gpuspark.cluster.session import JobKind, job_session

    spark_factory.stop()
    with job_session(JobKind.DATA, master=local_cluster.master_url) as s:
        app_id = s.sparkContext.applicationId
        path = targets_dir() / "spark-apps" / f"{app_id}.json"
        assert path.exists()
    assert not path.exists()
    assert not Path(path).with_suffix(".json.tmp").exists()
