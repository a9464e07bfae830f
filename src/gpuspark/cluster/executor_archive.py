"""The workload that writes the embedded cluster's executor CDS archive (see :mod:`.jvm`).

Runs in the child process of :func:`gpuspark.cluster.jvm.build_executor_archive`: a temporary
embedded cluster of one worker, a training session whose executor starts exactly as those of
every later session on an embedded cluster do (the same class path, with the empty
``$SPARK_CONF_DIR`` of :func:`~gpuspark.cluster.jvm.executor_conf_dir`), plus
``-XX:ArchiveClassesAtExit``, and the jobs of :func:`~gpuspark.cluster.jvm.exercise_jobs`. The
executor writes the archive when the worker stops it, after the session; the archive is done
when a JVM with that executor's class path maps it (``-Xshare:on``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from gpuspark._util import envvars
from gpuspark.cluster.jvm import LIGHT, exercise_jobs, java_binary
from gpuspark.cluster.local import LocalCluster
from gpuspark.errors import ClusterError

__all__ = ["executor_class_path", "exercise_executor"]

_WRITE_WAIT_S = 120.0
"""How long the executor may take to write the archive once its application ended."""


def exercise_executor(out: str, conf_dir: str) -> None:
    """Have a temporary cluster's executor, with ``conf_dir`` as its ``$SPARK_CONF_DIR`` (the
    parent's :func:`~gpuspark.cluster.jvm.executor_conf_dir`), write its classes to ``out``;
    raise if it did not."""
    conf = {
        "spark.executor.extraJavaOptions": f"-XX:ArchiveClassesAtExit={out} {LIGHT}",
        "spark.executorEnv.SPARK_CONF_DIR": conf_dir,
    }
    with tempfile.TemporaryDirectory(prefix="gpuspark-cds-") as state:
        # its driver log and Prometheus target stay in the temporary folder, not the user's
        os.environ[envvars.LOG_DIR.name] = str(Path(state, "logs"))
        os.environ[envvars.MONITOR_DIR.name] = str(Path(state, "monitor"))
        _run(out, conf, Path(state))


def _run(out: str, conf: dict[str, str], state: Path) -> None:
    with LocalCluster(workers=1, cores=2, gpus=0, state_dir=state / "cluster") as cluster:
        spark = cluster.session("training", **conf)
        try:
            exercise_jobs(spark)
        finally:
            spark.stop()
        _wait_written(Path(out), state / "cluster")


def executor_class_path(state_dir: Path) -> str | None:
    """The class path of the newest executor a cluster in ``state_dir`` started (from the
    first line of its log: ``Spark Executor Command: "java" "-cp" "..." ...``)."""
    logs = sorted(state_dir.glob("worker-*/app-*/*/stderr"), key=lambda p: p.stat().st_mtime)
    if not logs:
        return None
    first = logs[-1].read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
    words = shlex.split(first.partition(":")[2])
    return words[words.index("-cp") + 1] if "-cp" in words[:-1] else None


def _wait_written(out: Path, state_dir: Path) -> None:
    """Until a JVM with the executor's class path maps ``out``: the archive is whole."""
    java = java_binary()
    class_path = executor_class_path(state_dir)
    if java is None or class_path is None:
        raise ClusterError("no executor started on the archive's cluster")
    check = [str(java), f"-XX:SharedArchiveFile={out}", "-Xshare:on", "-cp", class_path]
    deadline = time.monotonic() + _WRITE_WAIT_S
    while time.monotonic() < deadline:
        if out.is_file():
            done = subprocess.run([*check, "-version"], capture_output=True, timeout=60)
            if done.returncode == 0:
                return
        time.sleep(1.0)
    raise ClusterError(f"the executor wrote no usable archive in {_WRITE_WAIT_S:.0f} s")
