"""Real failures, provoked here, then diagnosed from what they leave: the exception text a
user sees (written to a log file), the driver log, and the rank logs gpuspark keeps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from typer.testing import CliRunner

from gpuspark.cli.main import app
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


def kill_executor_of_task_1(_it: Any) -> Any:
    """Barrier task 1 kills its own executor's JVM (as the OOM killer would); task 0 waits."""
    from pyspark import BarrierTaskContext

    if BarrierTaskContext.get().partitionId() == 1:
        time.sleep(2)
        pid = os.getpid()
        while pid > 1:  # up from the Python worker to the executor JVM
            if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                os.kill(pid, signal.SIGKILL)
                break
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    time.sleep(60)
    yield 1


NEVER_JOINS = """\
import datetime
import os

import torch.distributed as dist

if os.environ["RANK"] != "1":  # rank 1 leaves without joining the process group
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
    dist.barrier()
"""


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


def test_a_rank_that_never_joins(tmp_path: Path) -> None:
    """The user's launch: rank 1 never calls init_process_group, rank 0 times out waiting for
    it and is the rank that fails; the diagnosis names rank 1, not rank 0's "error"."""
    script = tmp_path / "train.py"
    script.write_text(NEVER_JOINS)
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    env = {**os.environ, "GPUSPARK_KEEP_LOGS": "1", "TMPDIR": str(ranks)}
    cmd = [sys.executable, "-m", "gpuspark.cli.main", "launch", "-n", "2", "--local"]
    launch = subprocess.run(
        [*cmd, "--gpus-per-process", "0", str(script)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert launch.returncode == 1, launch.stderr[-2000:]
    console = tmp_path / "console.log"
    console.write_text(launch.stdout + launch.stderr)
    result = CliRunner().invoke(app, ["doctor", "logs", str(console)])
    assert result.exit_code == 0, result.output
    assert "rank 1 never joined the process group" in result.output, result.output
    assert "fix the error in the training code" not in result.output
    kept = diagnose([ranks])  # rank-0.error.json and the rank logs
    joined = [f for f in kept.findings if f.entry.id == "torch-rank-never-joined"]
    assert joined and joined[0].values["missing"] == "1", kept.ids()
    assert "gpuspark-rank-failed" not in kept.ids()


# ---------------------------------------------------------------------------- on Spark


def _driver_log_offset() -> int:
    from gpuspark.cluster.driver_log import driver_log_file

    log = driver_log_file()
    return log.stat().st_size if log.exists() else 0


def _driver_log_since(offset: int, tmp_path: Path) -> Path:
    """What this test's jobs wrote to the session's driver log, as a file of its own."""
    from gpuspark.cluster.driver_log import driver_log_file

    log = driver_log_file()
    with log.open("rb") as fh:
        fh.seek(offset)
        part = tmp_path / log.name
        part.write_bytes(fh.read())
    return part


def _doctor_json(path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["doctor", "logs", "--json", str(path)])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


def _finding(data: dict[str, Any], entry: str) -> dict[str, Any]:
    found = {f["id"]: f for f in data["findings"]}
    assert entry in found, (list(found), data["error_lines"])
    return dict(found[entry])


@pytest.mark.slow  # a 2-rank launch on the cluster (~20-40 s under load)
@pytest.mark.spark
def test_the_driver_log_of_a_launch_whose_rank_raises(spark: Any, tmp_path: Path) -> None:
    offset = _driver_log_offset()
    with pytest.raises(LaunchError):
        run(raise_on_rank_1, num_processes=2, spark=spark)
    failed = _finding(_doctor_json(_driver_log_since(offset, tmp_path)), "gpuspark-rank-failed")
    assert failed["rank"] == 1
    assert failed["values"]["error"] == "ValueError: bad batch from shard 7"


@pytest.mark.spark
def test_a_task_that_fails_on_every_attempt(spark: Any, tmp_path: Path) -> None:
    offset = _driver_log_offset()
    attempts = spark.sparkContext.getConf().get("spark.task.maxFailures", "4")
    _spark_error(spark.sparkContext.parallelize(range(2), 2).map(lambda x: 1 / 0).collect)
    data = _doctor_json(_driver_log_since(offset, tmp_path))
    assert _finding(data, "spark-task-retries-exhausted")["values"]["attempts"] == attempts


@pytest.mark.slow  # waits for a running job to be cancelled (~10 s)
@pytest.mark.spark
def test_a_cancelled_job(spark: Any, tmp_path: Path) -> None:
    sc = spark.sparkContext
    offset = _driver_log_offset()
    timer = threading.Timer(3.0, sc.cancelJobGroup, args=("nightly-etl",))
    timer.start()
    try:
        sc.setJobGroup("nightly-etl", "a job cancelled from outside", interruptOnCancel=True)
        _spark_error(sc.parallelize(range(2), 2).map(lambda x: time.sleep(60)).collect)
    finally:
        timer.cancel()
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            sc.setLocalProperty(key, None)  # no job group for the next tests' jobs
    data = _doctor_json(_driver_log_since(offset, tmp_path))
    assert _finding(data, "spark-job-cancelled")["values"]["group"] == "nightly-etl"


@pytest.mark.slow  # its own session, an executor killed and replaced (~30-60 s)
@pytest.mark.spark
@pytest.mark.own_session
def test_an_executor_lost_in_a_barrier_stage(spark_factory: Any, tmp_path: Path) -> None:
    from pyspark import cloudpickle as spark_pickle  # Spark ships functions with its own

    spark_pickle.register_pickle_by_value(sys.modules[__name__])
    spark = spark_factory.get(**{"spark.app.name": "gpuspark-tests-executor-lost"})
    try:
        offset = _driver_log_offset()
        rdd = spark.sparkContext.parallelize(range(2), 2).barrier()
        _spark_error(rdd.mapPartitions(kill_executor_of_task_1).collect)
        data = _doctor_json(_driver_log_since(offset, tmp_path))
    finally:
        spark_factory.stop()  # this application lost an executor: nobody else uses it
    lost = _finding(data, "spark-executor-lost")
    assert lost["values"]["sigkill"], lost
    barrier = _finding(data, "spark-barrier-stage-failed")  # task 0 too when on that executor
    assert barrier["values"]["partition"] in ("0", "1"), barrier
    _finding(data, "spark-executor-lost-failure")


def _spark_error(fn: Any) -> BaseException:
    try:
        fn()
    except Exception as exc:  # Py4J / captured Spark errors: the text is what matters
        return exc
    raise AssertionError("expected the job to fail")


def _barrier_job(spark: Any, partitions: int) -> Any:
    rdd = spark.sparkContext.parallelize(range(partitions), partitions)
    return lambda: rdd.barrier().mapPartitions(lambda it: it).collect()


@pytest.mark.slow  # waits out Spark's barrier-slot check (about 20 s)
@pytest.mark.spark
@pytest.mark.own_session
def test_a_barrier_stage_asking_more_slots_than_exist(spark_factory: Any, tmp_path: Path) -> None:
    spark = spark_factory.get(
        **{
            "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "1",
            "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
        }
    )
    offset = _driver_log_offset()
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
        # The driver log has Spark's retried check (WARN) and "Job N failed" (INFO, never an
        # error line): Spark raises the check's message to the caller without logging it.
        log = _driver_log_since(offset, tmp_path)
        data = _doctor_json(log)
        assert _finding(data, "spark-barrier-slots-wait")["values"]["needed"] == "40"
        assert _finding(data, "gpuspark-not-enough-slots")["values"]["tasks"] == "64"
        assert not any(" INFO " in e["text"] for e in data["error_lines"])
    finally:
        spark_factory.stop()


@pytest.mark.slow  # two session rebuilds (~60 s); the refusal itself is in test_preflight
@pytest.mark.spark
@pytest.mark.own_session
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
