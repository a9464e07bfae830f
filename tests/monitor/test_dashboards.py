"""Grafana dashboards rendered from the spec: files, the dashboard model's rules, PromQL
that ``promtool`` parses, metric names from :mod:`gpuspark.monitor.names`, topics covered.

Grafana itself does not run here; the JSON is checked against the model's rules (datasource
variable, current panel types, ids, grid, units). ``test_dashboards_live.py`` evaluates every
expression in a real Prometheus and reads the Spark names from a live Spark.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
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
