"""Checks before any rank starts: conf and slots (gpuspark.launch.preflight) before the
barrier stage, the executors' Python inside it."""

from __future__ import annotations

from typing import Any

import pytest

from gpuspark.errors import LaunchError
from gpuspark.launch import (
    ExecutorCapacity,
    check_capacity,
    check_conf,
    check_python,
    make_request,
    run,
    run_request,
)


def never_runs(value: float) -> None:
    """A rank function for launches refused before any task starts."""
    raise AssertionError(f"a refused launch ran a rank ({value})")


def test_check_conf_refuses_dynamic_allocation() -> None:
    check_conf({"spark.dynamicAllocation.enabled": "false"})
    with pytest.raises(LaunchError) as exc:
        check_conf({"spark.dynamicAllocation.enabled": "true"})
    assert "SPARK-24942" in str(exc.value)
    assert "spark.dynamicAllocation.enabled=false" in str(exc.value)


def test_check_capacity_says_needed_and_available() -> None:
    cap = ExecutorCapacity(executors=2, cores_per_executor=8, gpus_per_executor=2)
    check_capacity(4, 1, cap)
    check_capacity(2, 2, cap)
    with pytest.raises(LaunchError) as exc:
        check_capacity(6, 1, cap)
    assert "needs 6 tasks x 1 GPU = 6 GPUs" in str(exc.value)
    assert "2 executor(s) x 2 GPUs" in str(exc.value) and "room for 4 tasks" in str(exc.value)
    busy = ExecutorCapacity(2, 8, 2, running_tasks=4, task_gpu_amount=0.25)
    with pytest.raises(LaunchError, match="3 GPUs and 12 cores free"):
        check_capacity(4, 1, busy)
    with pytest.raises(LaunchError, match="needs 4 GPUs but each executor has 2") as exc:
        check_capacity(1, 4, cap)
    assert exc.value.remedy is not None  # flags first, then the Python keywords
    assert exc.value.remedy.startswith(
        "lower --nproc-per-node (processes_per_task) or --gpus-per-process (gpus_per_process)"
    )


def test_check_python_names_both_versions() -> None:
    check_python((3, 11), {(3, 11)})
    with pytest.raises(LaunchError, match=r"driver runs Python 3.11 but executors run 3.10"):
        check_python((3, 11), {(3, 10), (3, 11)})


def test_task_cpus_are_the_executor_core_share_of_a_gpu_slot() -> None:
    cap = ExecutorCapacity(executors=2, cores_per_executor=8, gpus_per_executor=2)
    assert cap.task_cpus_for(1) == 4 and cap.task_cpus_for(2) == 8
    assert cap.task_cpus_for(0) == 1
    assert ExecutorCapacity(1, 8, 0.0).task_cpus_for(1) == 1  # CPU-only executors
    assert cap.slots(1) == 4 and cap.slots(0) == 16


@pytest.mark.slow  # two session rebuilds (~60 s); the rule itself is tested above
@pytest.mark.spark
@pytest.mark.own_session
def test_spark_dynamic_allocation_refused_before_any_task(spark_factory: Any) -> None:
    # It rebuilds the session (about 10 s); the next user rebuilds back.
    spark = spark_factory.get(
        **{
            "spark.dynamicAllocation.enabled": "true",
            "spark.dynamicAllocation.shuffleTracking.enabled": "true",
        }
    )
    tracker = spark.sparkContext.statusTracker()
    before = tracker.getJobIdsForGroup(None)
    with pytest.raises(LaunchError, match=r"spark.dynamicAllocation.enabled=false"):
        run(never_runs, 1.0, num_processes=2, spark=spark)
    assert tracker.getJobIdsForGroup(None) == before


@pytest.mark.spark
def test_an_executor_python_other_than_the_drivers_is_refused_before_any_rank(
    spark: Any,
) -> None:
    # The check runs inside the barrier stage (no separate job): every task compares its
    # Python with the one the request recorded for the driver, and no rank starts.
    req = make_request(never_runs, 1.0, num_processes=2, gpus_per_process=0)
    req.driver_python = (3, 1)
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))
    with pytest.raises(LaunchError) as exc:
        run_request(req, spark)
    mine = "{}.{}".format(*__import__("sys").version_info[:2])
    assert f"the driver runs Python 3.1 but executors run {mine}" in str(exc.value)
    assert len(set(tracker.getJobIdsForGroup(None)) - before) == 1  # the barrier stage only
