"""An executor shape no standalone worker can hold is refused before the session starts.

The worker lists are the real Spark master's ``/json/`` format: a page captured from an
embedded cluster (``tests/quota/data/standalone_master.json``) and, marked ``spark``, the
live page of the tests' cluster.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cluster.fit import ExecutorNeed, check_fits, master_workers, unfit_reason
from gpuspark.errors import ClusterError

PAGE = Path(__file__).parents[1] / "quota" / "data" / "standalone_master.json"


def _workers() -> list[dict[str, Any]]:
    return list(json.loads(PAGE.read_text())["workers"])  # 2 x (8 cores, 4096 MB, 2 GPUs)


def test_need_from_conf_reads_cores_memory_and_gpus() -> None:
    conf = {
        "spark.executor.cores": "8",
        "spark.executor.memory": "16g",
        "spark.executor.resource.gpu.amount": "2",
    }
    assert ExecutorNeed.from_conf(conf) == ExecutorNeed(cores=8, memory_mb=16384, gpus=2)
    assert ExecutorNeed.from_conf({}) == ExecutorNeed(cores=0, memory_mb=1024, gpus=0)


@pytest.mark.parametrize(
    ("need", "words"),
    [
        (ExecutorNeed(8, 4096, 3), "3 GPUs"),
        (ExecutorNeed(9, 1024, 0), "9 cores"),
        (ExecutorNeed(2, 4097, 1), "4097 MB"),
    ],
)
def test_a_shape_above_every_worker_is_named(need: ExecutorNeed, words: str) -> None:
    reason = unfit_reason(need, _workers())
    assert reason is not None and words in reason
    assert "127.0.0.1:42129 8 cores, 4096 MB, 2 GPUs" in reason


def test_a_busy_worker_still_fits_its_totals_count() -> None:
    # the first worker's cores and GPUs are all used now: waiting for them is standalone's queue
    workers = _workers()
    workers[1]["state"] = "DEAD"
    assert workers[0]["coresfree"] == 0
    assert unfit_reason(ExecutorNeed(8, 4096, 2), workers) is None


def test_dead_workers_do_not_count_and_none_alive_is_left_to_spark() -> None:
    workers = _workers()
    big = copy.deepcopy(workers[0])
    big.update(state="DEAD", cores=64, memory=1 << 20)
    assert unfit_reason(ExecutorNeed(64, 8192, 0), [*workers, big]) is not None
    for w in workers:
        w["state"] = "DEAD"
    assert unfit_reason(ExecutorNeed(64, 8192, 9), workers) is None


def test_unreadable_or_foreign_page_skips_the_check() -> None:
    # nothing listens on port 9 of localhost; a high-availability URL is not probed
    assert master_workers("spark://127.0.0.1:7077", "http://127.0.0.1:9") is None
    assert master_workers("spark://a:7077,b:7077", None) is None
    assert master_workers("yarn", None) is None
    check_fits("spark://127.0.0.1:7077", {"spark.executor.cores": "999"}, "http://127.0.0.1:9")


@pytest.mark.spark
def test_live_master_page_refuses_and_names_the_fix(local_cluster: Any) -> None:
    ui = f"http://{local_cluster.state.host}:{local_cluster.state.webui_port}"
    url = local_cluster.master_url
    workers = master_workers(url, ui)
    assert workers and all(w["state"] == "ALIVE" for w in workers)
    check_fits(url, {"spark.executor.cores": "4", "spark.executor.resource.gpu.amount": "2"}, ui)
    with pytest.raises(ClusterError) as err:
        check_fits(url, {"spark.executor.memory": "64g"}, ui)
    assert "65536 MB" in str(err.value)
    assert "spark.executor.memory <= 4096m" in str(err.value.remedy)
    # the page of one master does not answer for another master's URL
    assert master_workers("spark://127.0.0.1:1", ui) is None


def _driver(code: str, cluster: Any, timeout: float) -> subprocess.CompletedProcess[str]:
    """``code`` as a new driver process (argv[1]: the cluster's state dir), console as a user's."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env.pop("GPUSPARK_SPEC", None)
    env.pop("GPUSPARK_SPARK_CONSOLE_LEVEL", None)
    argv = [sys.executable, "-c", code, str(cluster.state_dir)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def _driver_until(code: str, cluster: Any, text: str, timeout: float) -> str:
    """Run ``code`` as :func:`_driver` does, reading its console until ``text`` appears (or
    ``timeout``), then close its stdin (the code's cue to stop); its whole console."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env.pop("GPUSPARK_SPEC", None)
    env.pop("GPUSPARK_SPARK_CONSOLE_LEVEL", None)
    argv = [sys.executable, "-c", code, str(cluster.state_dir)]
    proc = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stderr is not None
    lines: list[str] = []
    timer = threading.Timer(timeout, proc.stdin.close)  # gives up: the code stops
    timer.start()
    try:
        for line in proc.stderr:
            lines.append(line)
            if text in line:
                break
        proc.stdin.close()
        lines.append(proc.stderr.read())
        proc.wait(60)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
    return "".join(lines)


@pytest.mark.spark
def test_session_refuses_in_seconds_instead_of_waiting(local_cluster: Any) -> None:
    """A new driver (its own process: no active session) asking for more memory per executor
    than any worker has fails before Spark starts; before the check it waited for ever."""
    code = (
        "import sys\n"
        "from gpuspark.cluster.session import session\n"
        "from gpuspark.errors import ClusterError\n"
        "try:\n"
        f"    session(master={local_cluster.master_url!r}, state_dir=sys.argv[1],\n"
        "            spark_executor_memory='64g')\n"
        "except ClusterError as exc:\n"
        "    print('refused:', exc, '|', exc.remedy)\n"
        "    sys.exit(3)\n"
    )
    t0 = time.monotonic()
    out = _driver(code, local_cluster, timeout=120)
    took = time.monotonic() - t0
    assert out.returncode == 3, out.stdout + out.stderr
    assert "can never start this job's executors" in out.stdout
    assert "spark.executor.memory <= 4096m" in out.stdout
    assert took < 30, took


@pytest.mark.slow  # waits for Spark's 15 s starvation warning
@pytest.mark.spark
def test_a_job_waiting_on_a_busy_cluster_says_so(spark: Any, local_cluster: Any) -> None:
    """The shared session holds every core; a second driver's shape fits the workers, so it is
    not refused: it queues, and Spark's starvation warning reaches its console (the driver log
    shows only errors there otherwise)."""
    assert spark.sparkContext.defaultParallelism > 0  # holds the cluster's cores meanwhile
    code = (
        "import sys, threading, time\n"
        "from gpuspark.cluster.session import session\n"
        f"s = session(master={local_cluster.master_url!r}, state_dir=sys.argv[1], **{{\n"
        "    'spark.scheduler.maxRegisteredResourcesWaitingTime': '1s',\n"
        "    'spark.starvation.timeout': '2s'})\n"
        "threading.Thread(target=lambda: s.range(4).count(), daemon=True).start()\n"
        "sys.stdin.readline()  # the test has seen the warning (or gave up)\n"
        "s.sparkContext.cancelAllJobs()\n"
        "s.stop()\n"
    )
    stderr = _driver_until(code, local_cluster, "Initial job has not accepted any resources", 180)
    assert "Initial job has not accepted any resources" in stderr, stderr[-3000:]
    assert " WARN " not in stderr.replace("WARN TaskSchedulerImpl", ""), stderr[-3000:]


@pytest.mark.spark
def test_an_active_session_on_another_master_is_not_handed_out(spark: Any) -> None:
    """Spark's ``getOrCreate`` would return the cluster session for ``local[2]`` and run the
    job there (its log's "Using an existing Spark session" is all it says)."""
    from gpuspark.cluster.session import session

    with pytest.raises(ClusterError) as err:
        session(master="local[2]")
    assert spark.sparkContext.master in str(err.value) and "local[2]" in str(err.value)
    assert session(master=spark.sparkContext.master) is spark  # the same master is reused


def test_the_page_is_read_at_the_specs_master_ui_port() -> None:
    """A standalone master's UI on another port than 8080 (``spark.master.ui.port`` in the
    spec's ``[spark.conf]``). The page served is the captured master page, on a local HTTP
    server standing in for the master's web UI."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    body = PAGE.read_bytes()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server calls it by this name
            self.send_response(200 if self.path == "/json/" else 404)
            self.end_headers()
            self.wfile.write(body if self.path == "/json/" else b"")

        def log_message(self, *_: Any) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    master = json.loads(body)["url"]  # spark://127.0.0.1:40037, the host the page names
    try:
        port = str(server.server_port)
        check_fits(master, {"spark.master.ui.port": port, "spark.executor.memory": "4g"})
        with pytest.raises(ClusterError, match="65536 MB"):
            check_fits(master, {"spark.master.ui.port": port, "spark.executor.memory": "64g"})
        # the same page does not answer for another master
        check_fits(
            "spark://127.0.0.1:7077", {"spark.master.ui.port": port, "spark.executor.memory": "64g"}
        )
    finally:
        server.shutdown()
