"""Grafana dashboards rendered from the spec: structure, names, and PromQL that a real
Prometheus accepts and answers.

Grafana itself does not run here; the JSON is checked against the dashboard model's rules
(datasource variable, current panel types, ids, grid, units), and every expression is parsed by
``promtool`` and evaluated by a real ``prometheus`` over a TSDB built with
``promtool tsdb create-blocks-from openmetrics``. The Spark series in that TSDB are the ones a
real Spark 4.3 driver and master exposed (``spark_metrics/*.prom``); the dcgm-exporter,
node_exporter and training series are FAKE (no GPU, no InfiniBand, no exporter run here), built
from the names in :mod:`gpuspark.monitor.names` with the exporters' label sets.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuspark.monitor import names
from gpuspark.monitor.dashboards import (
    DASHBOARD_NAMES,
    DASHBOARDS_PATH,
    DATASOURCE_FILE,
    DATASOURCE_UID,
    PROVIDER_FILE,
    build_dashboards,
    dashboard_expressions,
    render_dashboards,
)
from gpuspark.monitor.grafana import GRID_COLUMNS, Grid, concrete_promql
from gpuspark.spec import ClusterSpec, load_spec

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = Path(__file__).resolve().parent / "spark_metrics"
PANEL_TYPES = {"row", "timeseries", "stat", "gauge", "bargauge", "table", "state-timeline"}
KNOWN = {
    *names.TRAINING_METRICS,
    *(f"{names.STEP_SECONDS}_{s}" for s in ("bucket", "sum", "count")),
    *names.DCGM.values(),
    *names.NODE.values(),
    *names.SPARK.values(),
    "up",
}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


@pytest.fixture(scope="module")
def spec() -> ClusterSpec:
    return load_spec(ROOT / "examples" / "cluster.toml")


@pytest.fixture(scope="module")
def models(spec: ClusterSpec) -> dict[str, dict[str, Any]]:
    files = render_dashboards(spec)
    return {
        name: json.loads(files[f"grafana/dashboards/gpuspark-{name}.json"])
        for name in DASHBOARD_NAMES
    }


def _panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    return list(model["panels"])


def _exprs(panel: dict[str, Any]) -> list[str]:
    return [t["expr"] for t in panel.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    """Metric identifiers of a PromQL expression (strings, matchers, ranges, grouping gone)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    found = re.findall(r"(?<![\w.])([A-Za-z_:][\w:]*)(?!\s*[\w(])", text)
    return {name for name in found if name.lower() not in _KEYWORDS}


# -- files ---------------------------------------------------------------------------------


def test_render_gives_five_dashboards_and_two_provisioning_files(spec: ClusterSpec) -> None:
    files = render_dashboards(spec)
    expected = {f"grafana/dashboards/gpuspark-{n}.json" for n in DASHBOARD_NAMES}
    assert set(files) == expected | {PROVIDER_FILE, DATASOURCE_FILE}
    assert set(DASHBOARD_NAMES) == {"gpus", "network", "spark", "training", "teams"}


def test_render_is_deterministic(spec: ClusterSpec) -> None:
    assert render_dashboards(spec) == render_dashboards(spec)


def test_dashboard_uids_are_stable_and_distinct(models: dict[str, dict[str, Any]]) -> None:
    uids = [m["uid"] for m in models.values()]
    assert len(set(uids)) == len(uids)
    assert all(len(uid) <= 40 for uid in uids), "Grafana rejects uids over 40 characters"
    assert all(m["uid"].endswith(f"-{name}") for name, m in models.items())
    assert all(m["schemaVersion"] >= 39 and m["id"] is None for m in models.values())


def test_provisioning_yaml_points_at_the_dashboards(spec: ClusterSpec) -> None:
    files = render_dashboards(spec)
    provider = yaml.safe_load(files[PROVIDER_FILE])
    assert provider["apiVersion"] == 1
    (entry,) = provider["providers"]
    assert entry["type"] == "file"
    assert entry["options"]["path"] == DASHBOARDS_PATH
    moved = render_dashboards(spec, dashboards_path="/srv/grafana/gpuspark")
    assert yaml.safe_load(moved[PROVIDER_FILE])["providers"][0]["options"]["path"] == (
        "/srv/grafana/gpuspark"
    )
    source = yaml.safe_load(files[DATASOURCE_FILE])
    (ds,) = source["datasources"]
    assert (ds["type"], ds["uid"]) == ("prometheus", DATASOURCE_UID)
    assert ds["jsonData"]["timeInterval"] == f"{spec.monitoring.scrape_interval_s}s"
    other = render_dashboards(spec, prometheus_url="http://prom.example:9090")
    assert yaml.safe_load(other[DATASOURCE_FILE])["datasources"][0]["url"] == (
        "http://prom.example:9090"
    )


# -- dashboard model rules -------------------------------------------------------------------


def test_datasource_variable_used_by_every_panel_and_query(
    models: dict[str, dict[str, Any]],
) -> None:
    for name, model in models.items():
        variables = model["templating"]["list"]
        first = variables[0]
        assert (first["name"], first["type"], first["query"]) == (
            "datasource",
            "datasource",
            "prometheus",
        ), name
        assert first["current"]["value"] == DATASOURCE_UID
        for panel in _panels(model):
            if panel["type"] == "row":
                continue
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], f"{name}: {panel['title']} has no query"
            for query in panel["targets"]:
                assert query["datasource"]["uid"] == "${datasource}"
        for variable in variables[1:]:
            assert variable["datasource"]["uid"] == "${datasource}", variable["name"]


def test_only_current_panel_types(models: dict[str, dict[str, Any]]) -> None:
    for name, model in models.items():
        kinds = {p["type"] for p in _panels(model)}
        assert kinds <= PANEL_TYPES, f"{name}: {kinds - PANEL_TYPES}"
        assert "graph" not in kinds


def test_ids_unique_and_grid_without_overlaps(models: dict[str, dict[str, Any]]) -> None:
    for name, model in models.items():
        panels = _panels(model)
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)), name
        boxes = []
        for p in panels:
            pos = p["gridPos"]
            assert pos["x"] >= 0 and pos["w"] >= 1 and pos["h"] >= 1
            assert pos["x"] + pos["w"] <= GRID_COLUMNS, f"{name}: {p['title']}"
            boxes.append((pos["x"], pos["y"], pos["x"] + pos["w"], pos["y"] + pos["h"]))
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                overlap = a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
                assert not overlap, f"{name}: panels at {a} and {b} overlap"


def test_every_panel_has_a_unit_and_description(models: dict[str, dict[str, Any]]) -> None:
    for name, model in models.items():
        for panel in _panels(model):
            if panel["type"] == "row":
                continue
            assert panel["fieldConfig"]["defaults"]["unit"], f"{name}: {panel['title']}"
            assert panel["description"], f"{name}: {panel['title']}"


def test_grid_rejects_a_panel_wider_than_the_grid() -> None:
    grid = Grid()
    with pytest.raises(ValueError, match="width 25"):
        grid.stat("x", "up", unit="short", description="d", width=25)


def test_grid_wraps_instead_of_overlapping() -> None:
    grid = Grid()
    grid.row("r")
    a = grid.stat("a", "up", unit="short", description="d", width=16)
    b = grid.stat("b", "up", unit="short", description="d", width=16)
    assert a["gridPos"]["y"] == 1 and b["gridPos"] == {"h": 4, "w": 16, "x": 0, "y": 5}
    assert [p["id"] for p in grid.panels] == [1, 2, 3]


# -- expressions -------------------------------------------------------------------------------


def test_metric_name_parser_finds_names_and_ignores_the_rest() -> None:
    expr = (
        'sum by (run_id) (rate(foo_total{a="b:c"}[5m])) / on(run_id) group_left() '
        'label_replace(bar, "x", "$1", "y", "(.+)") > 1e3 or vector(0)'
    )
    assert metric_names(expr) == {"foo_total", "bar"}


def test_every_metric_name_is_a_known_exporter_name(spec: ClusterSpec) -> None:
    unknown = {n for e in dashboard_expressions(spec) for n in metric_names(e)} - KNOWN
    assert not unknown, f"not in gpuspark.monitor.names: {sorted(unknown)}"


def test_expressions_cover_panels_and_variables(
    spec: ClusterSpec, models: dict[str, dict[str, Any]]
) -> None:
    exprs = dashboard_expressions(spec)
    assert all("$" not in e.replace('"$1"', "") for e in exprs), "unsubstituted variable"
    panel_exprs = {
        concrete_promql(e) for m in models.values() for p in _panels(m) for e in _exprs(p)
    }
    assert panel_exprs <= set(exprs) and len(panel_exprs) > 50
    assert any(e.startswith("count by (node)") for e in exprs), "node variable query missing"
    assert f"{names.WORLD_SIZE}" in exprs, "label_values(<metric>, label) -> <metric>"


def test_concrete_promql_replaces_variables_and_macros_only() -> None:
    expr = (
        'rate(x{a=~"$run", b=~"${rank}", c=~"${team:regex}"}[$__rate_interval])'
        ' + label_replace(y, "n", "$1", "m", "(.+)")'
    )
    assert concrete_promql(expr) == (
        'rate(x{a=~".*", b=~".*", c=~".*"}[1m]) + label_replace(y, "n", "$1", "m", "(.+)")'
    )


def test_promtool_parses_every_expression(spec: ClusterSpec, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (make setup installs it)")
    exprs = dashboard_expressions(spec)
    rules = [{"record": f"gpuspark:dashboard:expr{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout


def test_promtool_catches_a_broken_expression(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    path = tmp_path / "rules.yml"
    broken = {"groups": [{"name": "d", "rules": [{"record": "a:b", "expr": "sum by (x (up)"}]}]}
    path.write_text(yaml.safe_dump(broken))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode != 0


# -- topics --------------------------------------------------------------------------------------


def _all_exprs(model: dict[str, Any]) -> str:
    return "\n".join(e for p in _panels(model) for e in _exprs(p))


def _panel_with(model: dict[str, Any], *needles: str, kind: str = "") -> dict[str, Any]:
    for panel in _panels(model):
        text = "\n".join(_exprs(panel))
        if all(n in text for n in needles) and panel["type"] == (kind or panel["type"]):
            return panel
    raise AssertionError(f"no panel of {model['title']} queries all of {needles}")


def test_gpu_dashboard_topics(models: dict[str, dict[str, Any]], spec: ClusterSpec) -> None:
    gpus = models["gpus"]
    for key in ("util", "fb_used", "temp", "power", "xid"):
        assert names.DCGM[key] in _all_exprs(gpus), key
    _panel_with(gpus, f"changes({names.DCGM['xid']}")  # XID shown as changes of the last value
    for panel in _panels(gpus):
        if names.DCGM["xid"] in str(_exprs(panel)):
            assert "last XID (a code), not a count" in panel["description"], panel["title"]
    for expr in _exprs(_panel_with(gpus, names.DCGM["temp"])):
        assert "Hostname" in expr and "hostname" in expr, "both dcgm host labels handled"
    temp = _panel_with(gpus, "max by (node, gpu)", names.DCGM["temp"])
    steps = temp["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert {"color": "red", "value": spec.monitoring.gpu_temp_c} in steps


def test_network_dashboard_topics(models: dict[str, dict[str, Any]]) -> None:
    net = _all_exprs(models["network"])
    for key in ("ib_rx", "ib_tx", "ib_state", "ib_symbol_errors", "ib_rcv_errors"):
        assert names.NODE[key] in net, key
    assert names.DCGM["nvlink_bw"] in net
    kinds = {
        p["type"] for p in _panels(models["network"]) if names.NODE["ib_state"] in str(_exprs(p))
    }
    assert "state-timeline" in kinds, "port state over time"


def test_spark_dashboard_topics(models: dict[str, dict[str, Any]]) -> None:
    spark = models["spark"]
    for key in ("executor_cores", "executor_active_tasks", "executor_failed_tasks"):
        assert "application_id, application_name" in "\n".join(
            _exprs(_panel_with(spark, names.SPARK[key]))
        ), f"{key} per application"
    assert names.SPARK["master_alive_workers"] in _all_exprs(spark)


def test_training_dashboard_topics(models: dict[str, dict[str, Any]], spec: ClusterSpec) -> None:
    train = models["training"]
    per_rank = _panel_with(train, names.SAMPLES, "run_id, rank")
    assert per_rank["type"] == "timeseries"
    breakdown = _panel_with(train, f"sum by (phase) (rate({names.STEP_PHASE}")
    assert breakdown["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    assert _panel_with(train, names.LOSS)["type"] == "timeseries"
    grads = _panel_with(train, names.GRAD_SENT, names.GRAD_UNCOMPRESSED, kind="timeseries")
    assert grads["fieldConfig"]["defaults"]["unit"] == "Bps"
    wait = _panel_with(train, 'phase="data_wait"')
    steps = wait["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert any(s["value"] == spec.monitoring.data_wait_pct / 100 for s in steps)
    assert [v["name"] for v in train["templating"]["list"]] == [
        "datasource",
        "team",
        "run",
        "rank",
    ]


def test_teams_dashboard_has_team_gpus_and_a_row_per_team(
    models: dict[str, dict[str, Any]], spec: ClusterSpec
) -> None:
    teams = models["teams"]
    per_team = _panel_with(teams, f"count by (team) ({names.CUDA_ALLOCATED}")
    assert "one rank per GPU" in per_team["description"]
    rows = [p["title"] for p in _panels(teams) if p["type"] == "row"]
    for team in spec.teams:
        assert any(team.name in r and f"max {team.max_gpus}" in r for r in rows), team.name
        gauge = _panel_with(teams, f'team="{team.name}"')
        assert gauge["fieldConfig"]["defaults"]["max"] == team.max_gpus


def test_spec_without_teams_still_renders(spec: ClusterSpec) -> None:
    bare = spec.model_copy(update={"teams": []})
    teams = build_dashboards(bare)["teams"]
    assert [p for p in _panels(teams) if p["type"] == "row"] == [_panels(teams)[0]]


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
