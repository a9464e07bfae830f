"""Session plans (dry run): every master kind, the spec as the one source of settings, job
kinds, and the refusal of shapes Spark calls wasteful."""

from __future__ import annotations

import sys

import pytest

from gpuspark.cluster.session import JobKind, check_slots, session_plan
from gpuspark.errors import ClusterError
from gpuspark.spec import default_spec, example_spec, parse_spec


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
    plan = session_plan(
        "yarn", **{"spark.executor.resource.gpu.amount": 1, "spark.executor.cores": 2}
    )
    line = plan.materialize()
    assert "spark-submit --master yarn" in line
    assert "--conf spark.executor.resource.gpu.amount=1" in line
    assert plan.conf["spark.submit.deployMode"] == "client"


def test_k8s_needs_an_image(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GPUSPARK_QUOTA_DIR", str(tmp_path))  # the pod templates go there
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


def test_the_spec_is_the_source_of_spark_settings() -> None:
    spec = parse_spec(example_spec())
    plan = session_plan(spec=spec)  # the example's master: spark://dgx01:7077
    assert plan.master == "spark://dgx01:7077"
    assert plan.conf["spark.task.resource.gpu.amount"] == "0.25"
    assert plan.conf["spark.executor.cores"] == "16"
    assert plan.conf["spark.task.cpus"] == "4"
    assert plan.conf["spark.executor.memoryOverhead"] == "24g"  # [spark.conf] applied


def test_spec_file_and_env_variable(tmp_path, monkeypatch) -> None:
    path = tmp_path / "c.toml"
    path.write_text(example_spec().replace('executor_memory = "200g"', 'executor_memory = "64g"'))
    assert session_plan(spec=path).conf["spark.executor.memory"] == "64g"
    monkeypatch.setenv("GPUSPARK_SPEC", str(path))
    assert session_plan().conf["spark.executor.memory"] == "64g"


def test_data_jobs_keep_dynamic_allocation_training_turns_it_off() -> None:
    spec = parse_spec(example_spec())
    data = session_plan(spec=spec, kind="data").conf
    train = session_plan(spec=spec, kind=JobKind.TRAINING).conf
    assert data["spark.dynamicAllocation.enabled"] == "true"
    assert data["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
    assert train["spark.dynamicAllocation.enabled"] == "false"  # SPARK-24942
    assert not any(
        k.startswith("spark.dynamicAllocation.") and k != "spark.dynamicAllocation.enabled"
        for k in train
    )
    assert train["spark.task.resource.gpu.amount"] == "0.25"  # data tasks of the app still share


def test_local_master_drops_gpu_scheduling() -> None:
    plan = session_plan("local[2]", spec=default_spec())
    assert not any(".resource.gpu." in k for k in plan.conf)


@pytest.mark.parametrize(
    ("conf", "ok"),
    [
        (
            {
                "spark.executor.resource.gpu.amount": "1",
                "spark.task.resource.gpu.amount": "0.25",
                "spark.executor.cores": "4",
            },
            True,
        ),
        (
            {
                "spark.executor.resource.gpu.amount": "2",
                "spark.task.resource.gpu.amount": "0.25",
                "spark.executor.cores": "1",
            },
            False,
        ),  # the old demo conf Spark warned about
        (
            {
                "spark.executor.resource.gpu.amount": "2",
                "spark.task.resource.gpu.amount": "2",
                "spark.executor.cores": "1",
            },
            True,
        ),
        (
            {
                "spark.executor.resource.gpu.amount": "1",
                "spark.task.resource.gpu.amount": "0.25",
                "spark.executor.cores": "16",
                "spark.task.cpus": "4",
            },
            True,
        ),
    ],
)
def test_wasteful_shapes_are_refused(conf: dict[str, str], ok: bool) -> None:
    if ok:
        check_slots(conf)
    else:
        with pytest.raises(ClusterError, match=r"wasted|idle"):
            check_slots(conf)
