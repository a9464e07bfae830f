"""Large Spark driver logs for speed tests: the line shapes of a real Spark 4 driver log
(``tests/doctor/logs/spark-*``, captured from provoked runs), with varied figures, mostly INFO,
with failed tasks and their Python tracebacks now and then, as a busy ETL job writes them."""

from __future__ import annotations

import random
from pathlib import Path

__all__ = ["write_driver_log"]

_TRACEBACK = [
    "org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown "
    "from the Python worker: Traceback (most recent call last):",
    '  File "/opt/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/'
    'worker.py", line 4327, in invoke_udf',
    "    run_process()",
    '  File "/opt/jobs/etl.py", line 41, in parse',
    "ValueError: bad record at offset {off}",
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException"
    "(PythonRunner.scala:702)",
    "\tat org.apache.spark.api.python.PythonRunner$$anon$3.read(PythonRunner.scala:1052)",
    "\tat org.apache.spark.scheduler.ResultTask.runTask(ResultTask.scala:93)",
    "\tat org.apache.spark.executor.Executor$TaskRunner.run(Executor.scala:668)",
    "\tat java.base/java.lang.Thread.run(Thread.java:840)",
]


def _stamp(t: int) -> str:
    return f"26/12/02 {t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}"


def _task_lines(rng: random.Random, stage: int, tid: int, t: int) -> list[str]:
    host, ex, part = f"10.0.{rng.randrange(8)}.{rng.randrange(2, 250)}", rng.randrange(16), tid % 64
    ts = _stamp(t)
    lines = [
        f"{ts} INFO TaskSetManager: Starting task {part}.0 in stage {stage}.0 (TID {tid}) "
        f"({host},executor {ex}, partition {part}, PROCESS_LOCAL, 9668 bytes) "
        "taskResourceAssignments Map(gpu -> Map(0 -> 2500000000000000))",
        f"{ts} INFO BlockManagerInfo: Added rdd_{stage}_{part} in memory on {host}:4{ex:04d} "
        f"(size: {rng.randrange(1, 900)}.{rng.randrange(10)} KiB, free: 434.4 MiB)",
    ]
    if rng.random() < 0.01:
        lines.append(
            f"{ts} WARN TaskSetManager: Lost task {part}.0 in stage {stage}.0 (TID {tid}) "
            f"({host} executor {ex}): " + _TRACEBACK[0]
        )
        lines += [ln.format(off=rng.randrange(10**6)) for ln in _TRACEBACK[1:]]
    else:
        lines.append(
            f"{ts} INFO TaskSetManager: Finished task {part}.0 in stage {stage}.0 (TID {tid}) "
            f"in {rng.randrange(50, 20000)} ms on {host} (executor {ex}) ({part + 1}/64)"
        )
    return lines


def _stage_lines(stage: int, t: int) -> list[str]:
    ts = _stamp(t)
    return [
        f"{ts} INFO DAGScheduler: Submitting ResultStage {stage} (PythonRDD[{stage * 3}] at "
        "collect at /opt/jobs/etl.py:88), which has no missing parents",
        f"{ts} INFO MemoryStore: Block broadcast_{stage} stored as values in memory "
        "(estimated size 14.4 KiB, free 434.4 MiB)",
        f"{ts} INFO TaskSchedulerImpl: Adding task set {stage}.0 with 64 tasks resource profile 0",
        f"{ts} INFO DAGScheduler: ResultStage {stage} (collect at /opt/jobs/etl.py:88) "
        "finished in 2952 ms",
        f"{ts} INFO DAGScheduler: running: HashSet()",
        f"{ts} INFO DAGScheduler: failed: HashSet()",
    ]


def write_driver_log(path: Path, size: int, seed: int = 0) -> int:
    """Write a driver log of about ``size`` bytes at ``path``; return its line count."""
    rng = random.Random(seed)
    written = lines = tid = 0
    stage = t = 0
    with path.open("w", encoding="utf-8") as fh:
        while written < size:
            stage += 1
            chunk = _stage_lines(stage, t)
            for _ in range(64):
                tid += 1
                t += rng.randrange(2)
                chunk += _task_lines(rng, stage, tid, t)
            text = "\n".join(chunk) + "\n"
            fh.write(text)
            written += len(text)
            lines += len(chunk)
    return lines
