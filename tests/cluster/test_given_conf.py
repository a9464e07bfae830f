"""``--conf`` and the spec's Spark keys reach the session or are refused with the reason
(hardening case 4: ``launch -n 2 --conf spark.executor.memory=abc`` and ``--conf
spark.task.resource.gpu.amount=0`` exited 0, and neither value was applied)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuspark.cli.main import app
from gpuspark.cluster.given_conf import check_given
from gpuspark.cluster.session import JobKind, session_plan
from gpuspark.errors import ClusterError
from gpuspark.spec import default_spec


def _with_conf(**conf: str) -> Any:
    spec = default_spec()
    spark = spec.spark.model_copy(update={"conf": {**spec.spark.conf, **conf}})
    return spec.model_copy(update={"spark": spark})


@pytest.mark.parametrize(
    ("item", "said"),
    [
        ("spark.executor.memory=abc", "must be a JVM memory size"),
        ("spark.task.resource.gpu.amount=0", "greater than 0"),
        ("spark.master=local[2]", "--master 'local[2]'"),
    ],
)
def test_launch_refuses_a_conf_value_its_spec_setting_would_refuse(
    item: str, said: str, tmp_path: Path
) -> None:
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    res = CliRunner().invoke(app, ["launch", "-n", "2", "--conf", item, str(script)])
    assert res.exit_code == 2, res.output
    assert said in res.output and item.split("=")[0] in res.output
    assert "ran" not in res.output


def test_training_refuses_a_task_gpu_share_and_dynamic_allocation() -> None:
    spec = _with_conf(
        **{"spark.task.resource.gpu.amount": "0.5", "spark.dynamicAllocation.maxExecutors": "3"}
    )
    with pytest.raises(ClusterError) as err:
        session_plan("local[2]", spec, kind=JobKind.TRAINING)
    text = str(err.value)
    assert "2 Spark settings would not apply" in text
    assert "spark.task.resource.gpu.amount=0.5: a training job's tasks ask whole GPUs" in text
    assert "spark.dynamicAllocation.maxExecutors=3: training runs barrier stages" in text
    # the same settings are a data job's to take; a single-machine master says it leaves
    # them out (it has no GPU scheduling or dynamic allocation)
    plan = session_plan("local[2]", spec, kind=JobKind.DATA)
    assert "spark.dynamicAllocation.maxExecutors" not in plan.conf
    assert plan.notes == [
        "spark.dynamicAllocation.maxExecutors=3 does not apply to this master; left out",
        "spark.task.resource.gpu.amount=0.5 does not apply to this master; left out",
    ]


def test_settings_that_reach_the_session_pass_and_keyword_overrides_win() -> None:
    spec = _with_conf(**{"spark.sql.shuffle.partitions": "7"})
    assert session_plan("local[2]", spec).conf["spark.sql.shuffle.partitions"] == "7"
    plan = session_plan("local[2]", spec, spark_sql_shuffle_partitions="9")
    assert plan.conf["spark.sql.shuffle.partitions"] == "9"  # the caller's, on purpose


def test_check_given_names_each_setting_and_notes_real_cluster_keys() -> None:
    merged = {"spark.executor.memory": "1g", "spark.executor.cores": "2"}
    given = {
        "spark.executor.memory": "8g",
        "spark.executor.cores": "2",
        "spark.executor.memoryOverhead": "24g",
    }
    with pytest.raises(ClusterError) as err:
        check_given(given, merged, training=False, embedded=True)
    text = str(err.value)
    assert "1 Spark setting would not apply: spark.executor.memory=8g" in text
    assert "have spark.executor.memory=1g" in text and "spark.executor_memory" in text
    assert "cluster up --spec" in text
    notes = check_given(
        {"spark.executor.memoryOverhead": "24g"}, merged, training=False, embedded=True
    )
    assert notes == [
        "spark.executor.memoryOverhead=24g describes the real cluster; "
        "the embedded one leaves it out"
    ]


@pytest.mark.spark
def test_embedded_cluster_refuses_its_executor_shape_from_conf(local_cluster: Any) -> None:
    shape_memory = local_cluster.shape.executor_memory
    asked = "3g" if shape_memory != "3g" else "5g"
    spec = _with_conf(**{"spark.executor.memory": asked})
    with pytest.raises(ClusterError, match=f"have spark.executor.memory={shape_memory}"):
        session_plan(spec=spec, cluster=local_cluster)
    same = _with_conf(
        **{"spark.executor.memory": shape_memory, "spark.sql.shuffle.partitions": "7"}
    )
    plan = session_plan(spec=same, cluster=local_cluster)
    assert plan.conf["spark.executor.memory"] == shape_memory
    assert plan.conf["spark.sql.shuffle.partitions"] == "7"


@pytest.mark.slow
@pytest.mark.spark
def test_live_session_holds_every_conf_it_accepted(local_cluster: Any) -> None:
    from gpuspark.cluster.session import session

    spec = _with_conf(**{"spark.sql.shuffle.partitions": "7", "spark.network.timeout": "301s"})
    spark = session(spec=spec, cluster=local_cluster, app_name="given-conf")
    try:
        assert spark.conf.get("spark.sql.shuffle.partitions") == "7"
        assert spark.sparkContext.getConf().get("spark.network.timeout") == "301s"
        memory = spark.sparkContext.getConf().get("spark.executor.memory")
        assert memory == local_cluster.shape.executor_memory
    finally:
        spark.stop()
