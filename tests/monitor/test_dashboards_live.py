"""Dashboard queries against real services: the Spark names against a live Spark (and the
captures it produced), every expression evaluated by a real ``prometheus``.

The TSDB ``prometheus`` serves is built with ``promtool tsdb create-blocks-from openmetrics``.
Its Spark series are the ones a real Spark 4.3 driver and master exposed
(``spark_metrics/*.prom``); its dcgm-exporter, node_exporter and training series are FAKE (no
GPU, no InfiniBand, no exporter run here), built from the names in
:mod:`gpuspark.monitor.names` with the exporters' label sets.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuspark.monitor import names
from gpuspark.monitor.dashboards import dashboard_expressions
from gpuspark.spec import ClusterSpec, load_spec

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = Path(__file__).resolve().parent / "spark_metrics"


@pytest.fixture(scope="module")
def spec() -> ClusterSpec:
    return load_spec(ROOT / "examples" / "cluster.toml")


# -- Spark names checked against real Spark output -----------------------------------------------


def _series_names(text: str) -> set[str]:
    return {
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_spark_names_are_what_spark_exposes() -> None:
    """SPARK holds names read from a live Spark 4.3 (captures in spark_metrics/)."""
    exposed = {
        "executor": _series_names((CAPTURES / "executors.prom").read_text()),
        "driver": _series_names((CAPTURES / "driver.prom").read_text()),
        "master": _series_names((CAPTURES / "master.prom").read_text()),
    }
    for key, metric in names.SPARK.items():
        assert metric in exposed[key.split("_")[0]], f"SPARK[{key!r}] = {metric}"


@pytest.mark.spark
@pytest.mark.own_session
def test_spark_names_on_a_live_driver(spark_factory: Any) -> None:
    """The driver and executor names, read again from a running application."""
    spark = spark_factory.get(
        **{
            "spark.ui.enabled": "true",
            "spark.ui.prometheus.enabled": "true",
            "spark.metrics.namespace": names.SPARK_NAMESPACE,
            "spark.metrics.conf.*.sink.prometheusServlet.class": (
                "org.apache.spark.metrics.sink.PrometheusServlet"
            ),
            "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
        }
    )
    try:
        assert spark.sparkContext.parallelize(range(100), 4).sum() == 4950
        ui = spark.sparkContext.uiWebUrl
        driver = urllib.request.urlopen(f"{ui}/metrics/prometheus", timeout=10).read().decode()
        execs = urllib.request.urlopen(f"{ui}/metrics/executors/prometheus", timeout=10).read()
        exposed = _series_names(driver) | _series_names(execs.decode())
        dynamic = spark.conf.get("spark.dynamicAllocation.enabled") == "true"
    finally:
        spark_factory.stop()
    wanted = {
        k: v
        for k, v in names.SPARK.items()
        if k.startswith(("executor_", "driver_")) and (dynamic or k != "driver_executors")
    }
    missing = {k: v for k, v in wanted.items() if v not in exposed}
    assert not missing


# -- evaluated by a real Prometheus ----------------------------------------------------------------

START = 1_700_000_000
STEP_S, SAMPLES_N = 15, 160  # 40 minutes of scrapes


def _fake_series() -> Iterator[tuple[str, dict[str, str], bool]]:
    """(name, labels, is_counter): FAKE exporter and rank series with their real label sets."""
    d, n = names.DCGM, names.NODE
    for i, host_label in enumerate(names.DCGM_HOST_LABELS):  # old and new dcgm-exporter
        for gpu in ("0", "1"):
            labels = {host_label: f"gpu{i}", "gpu": gpu, "UUID": f"GPU-{i}{gpu}",
                      "device": f"nvidia{gpu}", "modelName": "NVIDIA H100 80GB HBM3",
                      "job": names.JOB_DCGM, "instance": f"gpu{i}:{names.DCGM_PORT}"}  # fmt: skip
            for key, metric in d.items():
                yield metric, labels, key == "nvlink_bw"
        yield "up", {"job": names.JOB_DCGM, "instance": f"gpu{i}:{names.DCGM_PORT}"}, False
    for host in ("gpu0", "gpu1"):
        labels = {"device": "mlx5_0", "port": "1", "job": names.JOB_NODE, "instance": host}
        for key, metric in n.items():
            if key.startswith("ib_"):
                yield metric, labels, key != "ib_state"
        yield "up", labels, False
    for run, team in (("run-a", "vision"), ("run-b", "")):
        for rank in ("0", "1"):
            labels = {"run_id": run, "rank": rank, "host": "gpu0", "team": team,
                      "job": names.JOB_RUNS, "instance": f"gpu0:970{rank}"}  # fmt: skip
            yield from _rank_series(labels)


def _rank_series(labels: dict[str, str]) -> Iterator[tuple[str, dict[str, str], bool]]:
    gauges = {names.LOSS, names.LEARNING_RATE, names.EPOCH, names.LAST_STEP, names.WORLD_SIZE,
              names.CUDA_ALLOCATED, names.CUDA_RESERVED}  # fmt: skip
    for metric in names.TRAINING_METRICS:
        if metric == names.STEP_PHASE:
            for phase in names.PHASES:
                yield metric, {**labels, "phase": phase}, True
        elif metric == names.STEP_SECONDS:
            for le in ("0.1", "0.5", "1", "+Inf"):
                yield f"{metric}_bucket", {**labels, "le": le}, True
            yield f"{metric}_sum", labels, True
            yield f"{metric}_count", labels, True
        elif metric == names.RUN_INFO:
            yield metric, {**labels, "recipe": "mnist", "backend": "nccl", "device": "cuda"}, False
        else:
            yield metric, labels, metric not in gauges
    yield "up", labels, False


def _captured_spark() -> Iterator[tuple[str, dict[str, str], bool]]:
    """The REAL Spark series of spark_metrics/*.prom, with the scrape job labels added."""
    jobs = {"driver": names.JOB_SPARK_APPS, "executors": names.JOB_SPARK_EXECUTORS,
            "master": names.JOB_SPARK_MASTER}  # fmt: skip
    line_re = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+\S+$")
    for capture, job in jobs.items():
        target = {"job": job, "instance": "127.0.0.1:4040"}
        for line in (CAPTURES / f"{capture}.prom").read_text().splitlines():
            match = line_re.match(line)
            if match is None:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
            name = match.group(1)
            yield name, {**labels, **target}, name.endswith(("_total", "_Count"))
        yield "up", target, False


def _openmetrics() -> str:
    by_name: dict[str, list[tuple[dict[str, str], bool]]] = {}
    for name, labels, counter in [*_fake_series(), *_captured_spark()]:
        by_name.setdefault(name, []).append((labels, counter))
    lines = []
    for name, series in by_name.items():
        for labels, counter in series:
            text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            for i in range(SAMPLES_N):
                t = START + i * STEP_S
                value = i * 3.0 if counter else _gauge_value(name, t)
                lines.append(f"{name}{{{text}}} {value} {t}")
    return "\n".join(lines) + "\n# EOF\n"


def _gauge_value(name: str, t: int) -> float:
    if name == names.LAST_STEP:
        return float(t)
    if name == names.DCGM["xid"]:
        return 79.0 if t > START + 1200 else 0.0  # a GPU fell off the bus half-way
    if name == names.NODE["ib_state"]:
        return 4.0
    return 50.0 if name.startswith("DCGM") else 1.0


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus is None or promtool is None:
        pytest.skip("prometheus/promtool not installed (make setup installs them)")
    work = tmp_path_factory.mktemp("prometheus")
    (work / "series.om").write_text(_openmetrics())
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "series.om", "data"],
        cwd=work, check=True, capture_output=True,
    )  # fmt: skip
    (work / "prometheus.yml").write_text("global: {}\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [prometheus, "--config.file=prometheus.yml", "--storage.tsdb.path=data",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100000d"],
        cwd=work, stdout=subprocess.DEVNULL, stderr=(work / "log").open("w"),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "prometheus exited"
        try:
            urllib.request.urlopen(f"{url}/-/ready", timeout=2)
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError("prometheus did not become ready")


def _query(url: str, expr: str) -> dict[str, Any]:
    at = START + (SAMPLES_N - 1) * STEP_S
    body = urllib.parse.urlencode({"query": expr, "time": str(at)}).encode()
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query", data=body, timeout=30) as resp:
            return dict(json.load(resp))
    except urllib.error.HTTPError as exc:
        return dict(json.load(exc))


def test_prometheus_evaluates_every_expression_with_data(
    spec: ClusterSpec, prometheus_url: str
) -> None:
    failed, empty = {}, []
    for expr in dashboard_expressions(spec):
        answer = _query(prometheus_url, expr)
        if answer.get("status") != "success":
            failed[expr] = answer.get("error")
        elif not answer["data"]["result"]:
            empty.append(expr)
    assert not failed, json.dumps(failed, indent=1)
    assert not empty, "no data for:\n" + "\n".join(empty)


def test_prometheus_answer_catches_a_bad_join(prometheus_url: str) -> None:
    """The live check can fail: a many-to-many division is an evaluation error."""
    bad = f"{names.DCGM['util']} / on(gpu) {names.DCGM['temp']}"
    assert _query(prometheus_url, bad)["status"] == "error"
