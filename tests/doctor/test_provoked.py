"""Real failures, provoked here, then diagnosed from what they leave: the exception text a
user sees (written to a log file), the driver log, and the rank logs gpuspark keeps."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from gpuspark.doctor.logs import Diagnosis, diagnose
from gpuspark.errors import LaunchError
from gpuspark.launch import run

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def raise_on_rank_1() -> None:
    """Rank 1 raises; rank 0 returns."""
    if os.environ["RANK"] == "1":
        raise ValueError("bad batch from shard 7")


def gloo_straggler(timeout_s: float) -> None:
    """Rank 1 sleeps past the collective timeout while rank 0 waits in an all-reduce."""
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    if dist.get_rank() == 1:
        time.sleep(timeout_s * 4)
        return
    t = torch.ones(4)
    dist.all_reduce(t)


def _left(tmp_path: Path, exc: BaseException, name: str = "driver-output.log") -> Path:
    """What the user saw, as a log file."""
    path = tmp_path / name
    path.write_text(f"{type(exc).__module__}.{type(exc).__name__}: {exc}\n")
    return path


def _ids(diag: Diagnosis) -> list[str]:
    return diag.ids()


@pytest.fixture()
def kept_rank_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Rank logs kept (GPUSPARK_KEEP_LOGS=1) in this test's own temp dir."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    monkeypatch.setenv("GPUSPARK_KEEP_LOGS", "1")
    monkeypatch.setattr(tempfile, "tempdir", str(ranks))
    return ranks


def test_a_rank_that_raises(tmp_path: Path, kept_rank_logs: Path) -> None:
    with pytest.raises(LaunchError) as info:
        run(raise_on_rank_1, num_processes=2, local=True, gpus_per_process=0)
    diag = diagnose([_left(tmp_path, info.value)])
    assert _ids(diag) == ["gpuspark-rank-failed"]
    assert diag.findings[0].rank == 1
    assert "ValueError: bad batch from shard 7" in diag.findings[0].cause
    # The rank logs alone name the rank too.
    assert list(kept_rank_logs.rglob("rank-1.error.json"))
    ranks = diagnose([kept_rank_logs])
    found = {f.entry.id: f for f in ranks.findings}
    assert found["gpuspark-rank-failed"].rank == 1
    assert found["gpuspark-rank-failed"].values["error"] == "ValueError: bad batch from shard 7"


def test_a_gloo_collective_that_times_out(tmp_path: Path, kept_rank_logs: Path) -> None:
    with pytest.raises(LaunchError) as info:
        run(gloo_straggler, 2.0, num_processes=2, local=True, gpus_per_process=0)
    diag = diagnose([_left(tmp_path, info.value)])
    assert "gloo-timeout" in _ids(diag), str(info.value)
    gloo = diag.findings[_ids(diag).index("gloo-timeout")]
    assert gloo.values["timeout_ms"] == "2000"
    ranks = diagnose([kept_rank_logs])
    timeouts = [f for f in ranks.findings if f.entry.id == "gloo-timeout"]
    assert [f.rank for f in timeouts] == [0]  # the rank that waited; rank 1 was the straggler


# ---------------------------------------------------------------------------- on Spark


def _spark_error(fn: Any) -> BaseException:
    try:
        fn()
    except Exception as exc:  # Py4J / captured Spark errors: the text is what matters
        return exc
    raise AssertionError("expected the job to fail")


def _barrier_job(spark: Any, partitions: int) -> Any:
    rdd = spark.sparkContext.parallelize(range(partitions), partitions)
    return lambda: rdd.barrier().mapPartitions(lambda it: it).collect()


@pytest.mark.spark
def test_a_barrier_stage_asking_more_slots_than_exist(spark_factory: Any, tmp_path: Path) -> None:
    from gpuspark.cluster.driver_log import driver_log_file

    spark = spark_factory.get(
        **{
            "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "1",
            "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
        }
    )
    try:
        # gpuspark's own preflight refuses it before Spark sees it...
        with pytest.raises(LaunchError) as info:
            run(raise_on_rank_1, num_processes=64, spark=spark)
        ours = diagnose([_left(tmp_path, info.value, "launch.log")])
        assert _ids(ours) == ["gpuspark-not-enough-slots"]
        assert ours.findings[0].values["tasks"] == "64"
        # ... and Spark's own check, on a raw barrier RDD.
        exc = _spark_error(_barrier_job(spark, 40))
        sparks = diagnose([_left(tmp_path, exc, "barrier.log")])
        assert "spark-barrier-slots" in _ids(sparks), str(exc)[:500]
        # The driver log holds only "Job N failed" for it (Spark raises the check's message
        # to the caller without logging it): unexplained, with that line in the error tail.
        log = driver_log_file()
        if log.exists():
            assert any("failed" in e.text for e in diagnose([log]).error_lines)
    finally:
        spark_factory.stop()


@pytest.mark.slow  # two session rebuilds (~60 s); the refusal itself is in test_preflight
@pytest.mark.spark
def test_training_with_dynamic_allocation_on(spark_factory: Any, tmp_path: Path) -> None:
    spark = spark_factory.get(**{"spark.dynamicAllocation.enabled": "true"})
    try:
        with pytest.raises(LaunchError) as info:
            run(raise_on_rank_1, num_processes=2, spark=spark)
        assert _ids(diagnose([_left(tmp_path, info.value, "launch.log")])) == [
            "gpuspark-dynamic-allocation"
        ]
        exc = _spark_error(_barrier_job(spark, 2))
        assert "spark-barrier-dynamic-allocation" in _ids(
            diagnose([_left(tmp_path, exc, "barrier.log")])
        ), str(exc)[:500]
    finally:
        spark_factory.stop()


@pytest.mark.spark
def test_an_executor_running_another_python(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    # A second interpreter without this environment's packages: a bare venv, as an executor
    # whose PYSPARK_PYTHON points at the system Python of a node would be.
    venv = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    sc = spark.sparkContext
    monkeypatch.setattr(sc, "pythonExec", str(venv / "bin" / "python"))
    # What any gpuspark task does first on an executor (a lambda: pickled by value).
    rdd = sc.parallelize([0], 1).map(lambda _: __import__("gpuspark").__version__)
    exc = _spark_error(rdd.collect)
    diag = diagnose([_left(tmp_path, exc, "job.log")])
    assert "python-module-not-found" in _ids(diag), str(exc)[-800:]
    finding = diag.findings[_ids(diag).index("python-module-not-found")]
    assert finding.values["module"] == "gpuspark"
