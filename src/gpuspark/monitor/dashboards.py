"""Grafana dashboards and provisioning files rendered from the cluster spec.

:func:`render_dashboards` returns every file as text, keyed by its path relative to the
monitoring directory:

- ``grafana/dashboards/gpuspark-<name>.json`` for ``gpus``, ``network``, ``spark``,
  ``training`` and ``teams`` (Grafana's classic dashboard JSON model, importable through the UI);
- ``grafana/provisioning/dashboards/gpuspark.yaml``: a file provider that loads those JSON
  files from :data:`DASHBOARDS_PATH` (copy them there, or change ``options.path``);
- ``grafana/provisioning/datasources/prometheus.yaml``: the Prometheus datasource, uid
  :data:`DATASOURCE_UID`, the default of every dashboard's ``datasource`` variable.

Thresholds come from ``[monitoring]``, team rows from ``[[teams]]``. Output is deterministic:
the same spec renders the same bytes. :func:`dashboard_expressions` lists every PromQL query
with Grafana's variables replaced, for ``promtool`` or a live Prometheus to check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuspark.monitor import names
from gpuspark.monitor.dashboards_cluster import gpus_dashboard, network_dashboard
from gpuspark.monitor.dashboards_jobs import spark_dashboard, training_dashboard
from gpuspark.monitor.grafana import (
    Grid,
    concrete_promql,
    dashboard,
    datasource_variable,
    expressions,
    query_variable,
)

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec, Team

__all__ = [
    "DASHBOARDS_DIR",
    "DASHBOARDS_PATH",
    "DASHBOARD_NAMES",
    "DATASOURCE_FILE",
    "DATASOURCE_UID",
    "PROMETHEUS_URL",
    "PROVIDER_FILE",
    "build_dashboards",
    "dashboard_expressions",
    "render_dashboards",
]

DASHBOARD_NAMES = ("gpus", "network", "spark", "training", "teams")
DASHBOARDS_DIR = "grafana/dashboards"
"""Where the dashboard JSON files sit among the rendered files."""
PROVIDER_FILE = "grafana/provisioning/dashboards/gpuspark.yaml"
DATASOURCE_FILE = "grafana/provisioning/datasources/prometheus.yaml"
DASHBOARDS_PATH = "/var/lib/grafana/dashboards/gpuspark"
"""Folder on the Grafana server the provider reads (``options.path``): adjust to taste."""
DATASOURCE_UID = "gpuspark-prometheus"
PROMETHEUS_URL = "http://localhost:9090"

_IN_USE = names.CUDA_ALLOCATED
_NO_TEAM = "(none)"


def _gpus_by_team(selector: str) -> str:
    """GPUs in use per team: ranks that export CUDA memory (each such rank holds one GPU)."""
    counted = f"count by (team) ({_IN_USE}{{{selector}}})"
    return f'label_replace({counted}, "team", "{_NO_TEAM}", "team", "")'


GPUS_IN_USE_NOTE = (
    "Ranks exporting gpuspark_cuda_memory_allocated_bytes, i.e. ranks training on a GPU; "
    "gpuspark DDP runs one rank per GPU, so this is GPUs in use. CPU-only ranks are not "
    "counted here (see Ranks). Runs without a team show as (none)."
)


def _team_overview(g: Grid, spec: ClusterSpec) -> None:
    total = spec.total_gpus
    g.row("Cluster")
    g.panel(
        "gauge",
        "GPUs in use",
        [(f"count({_IN_USE}) or vector(0)", "")],
        unit="short",
        width=6,
        height=8,
        min_value=0,
        max_value=total,
        thresholds=((None, "green"), (0.8 * total, "yellow"), (total, "red")),
        description=f"{GPUS_IN_USE_NOTE} Cluster total from the spec: {total} GPUs.",
        options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
    )
    g.timeseries(
        "GPUs in use per team",
        [(_gpus_by_team('team=~"$team"'), "{{team}}")],
        unit="short",
        stacking="normal",
        width=18,
        description=GPUS_IN_USE_NOTE,
    )
    ranks = f'label_replace(count by (team) ({names.WORLD_SIZE}{{team=~"$team"}}), '
    ranks += f'"team", "{_NO_TEAM}", "team", "")'
    g.panel(
        "bargauge",
        "Ranks per team",
        [(ranks, "{{team}}")],
        unit="short",
        width=12,
        description="Training ranks per team on any device (CPU runs included): one "
        "gpuspark_train_world_size series per rank.",
        options={"displayMode": "basic", "orientation": "horizontal"},
    )
    runs = f'count by (team) (count by (team, run_id) ({names.WORLD_SIZE}{{team=~"$team"}}))'
    g.panel(
        "bargauge",
        "Runs per team",
        [(f'label_replace({runs}, "team", "{_NO_TEAM}", "team", "")', "{{team}}")],
        unit="short",
        width=12,
        description="Distinct run_id values per team.",
        options={"displayMode": "basic", "orientation": "horizontal"},
    )


def _team_row(g: Grid, team: Team) -> None:
    sel = f'team="{team.name}"'
    g.row(f"Team {team.name}: guaranteed {team.guaranteed_gpus}, max {team.max_gpus} GPUs")
    note = (
        f"{GPUS_IN_USE_NOTE} From [[teams]]: guaranteed_gpus={team.guaranteed_gpus}, "
        f"max_gpus={team.max_gpus} (thresholds; quota series come with the quota work)."
    )
    steps = ((None, "green"), (team.guaranteed_gpus + 1, "yellow"), (team.max_gpus, "red"))
    g.panel(
        "gauge",
        f"{team.name}: GPUs in use",
        [(f"count({_IN_USE}{{{sel}}}) or vector(0)", "")],
        unit="short",
        width=6,
        min_value=0,
        max_value=team.max_gpus,
        thresholds=steps,
        description=note,
        options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
    )
    g.timeseries(
        f"{team.name}: GPUs in use over time",
        [(f"count({_IN_USE}{{{sel}}}) or vector(0)", "GPUs in use")],
        unit="short",
        width=18,
        threshold_line=team.max_gpus,
        min_value=0,
        description=note + " The red line is max_gpus.",
    )


def teams_dashboard(spec: ClusterSpec) -> dict[str, Any]:
    """Teams: GPUs in use per team (all teams, then one row per ``[[teams]]`` entry)."""
    g = Grid()
    _team_overview(g, spec)
    for team in spec.teams:
        _team_row(g, team)
    variable = query_variable("team", f"label_values({names.WORLD_SIZE}, team)", label="Team")
    listed = ", ".join(t.name for t in spec.teams) or "none"
    return dashboard(
        f"gpuspark-{spec.name}-teams",
        f"gpuspark {spec.name} / Teams",
        g,
        [variable],
        tags=["gpuspark", spec.name, "teams"],
        description=f"GPUs in use per team; teams in the spec: {listed}.",
    )


_BUILDERS: dict[str, Callable[[ClusterSpec], dict[str, Any]]] = {
    "gpus": gpus_dashboard,
    "network": network_dashboard,
    "spark": spark_dashboard,
    "training": training_dashboard,
    "teams": teams_dashboard,
}


def build_dashboards(spec: ClusterSpec) -> dict[str, dict[str, Any]]:
    """Each dashboard's JSON model by name (:data:`DASHBOARD_NAMES`), ``datasource`` first
    among its variables."""
    built = {}
    for name in DASHBOARD_NAMES:
        model = _BUILDERS[name](spec)
        model["templating"]["list"].insert(0, datasource_variable(DATASOURCE_UID))
        built[name] = model
    return built


def _provider_yaml(dashboards_path: str) -> str:
    import yaml

    provider = {
        "apiVersion": 1,
        "providers": [
            {
                "name": "gpuspark",
                "orgId": 1,
                "folder": "gpuspark",
                "folderUid": "gpuspark",
                "type": "file",
                "disableDeletion": False,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 30,
                "options": {"path": dashboards_path, "foldersFromFilesStructure": False},
            }
        ],
    }
    head = (
        "# Grafana dashboard provider for gpuspark: copy this file into Grafana's\n"
        "# provisioning/dashboards/ and the gpuspark-*.json dashboards into options.path\n"
        f"# ({dashboards_path}; change it to where you put them).\n"
    )
    return head + yaml.safe_dump(provider, sort_keys=False)


def _datasource_yaml(spec: ClusterSpec, prometheus_url: str) -> str:
    import yaml

    source = {
        "apiVersion": 1,
        "datasources": [
            {
                "name": f"gpuspark {spec.name}",
                "type": "prometheus",
                "uid": DATASOURCE_UID,
                "access": "proxy",
                "url": prometheus_url,
                "isDefault": False,
                "editable": True,
                "jsonData": {"timeInterval": f"{spec.monitoring.scrape_interval_s}s"},
            }
        ],
    }
    head = (
        "# Grafana datasource for gpuspark's Prometheus: copy into Grafana's\n"
        "# provisioning/datasources/; the dashboards default to its uid.\n"
    )
    return head + yaml.safe_dump(source, sort_keys=False)


def render_dashboards(
    spec: ClusterSpec,
    *,
    prometheus_url: str = PROMETHEUS_URL,
    dashboards_path: str = DASHBOARDS_PATH,
) -> dict[str, str]:
    """Every Grafana file for ``spec``: relative path -> content (JSON or YAML text).

    ``prometheus_url`` is the datasource's URL as Grafana reaches it; ``dashboards_path`` is
    the folder on the Grafana server the provider loads the JSON files from.
    """
    files = {
        f"{DASHBOARDS_DIR}/gpuspark-{name}.json": json.dumps(model, indent=2) + "\n"
        for name, model in build_dashboards(spec).items()
    }
    files[PROVIDER_FILE] = _provider_yaml(dashboards_path)
    files[DATASOURCE_FILE] = _datasource_yaml(spec, prometheus_url)
    return files


def dashboard_expressions(spec: ClusterSpec) -> list[str]:
    """Every PromQL expression of every dashboard (panels and variable queries), with
    Grafana's macros and variables replaced by plain PromQL (``$__rate_interval`` -> ``1m``,
    ``$run`` -> ``.*``), in dashboard order, duplicates dropped."""
    seen: dict[str, None] = {}
    for model in build_dashboards(spec).values():
        for expr in expressions(model):
            seen.setdefault(concrete_promql(expr), None)
    return list(seen)
