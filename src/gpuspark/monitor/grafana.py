"""Builders for Grafana's dashboard JSON model (classic model, ``schemaVersion`` 39).

Plain functions that return plain dicts: a panel is data, so a dashboard can be printed, diffed
and checked before any Grafana sees it. :class:`Grid` hands out panel ids and ``gridPos``
(a 24-column grid, filled left to right, one full-width line per row), so no two panels share
an id or overlap. Every panel and query reads the ``${datasource}`` template variable.

:func:`expressions` lists the PromQL a dashboard runs and :func:`concrete_promql` swaps
Grafana's variables and macros for plain PromQL, so the queries can be checked by ``promtool``
or evaluated by a real Prometheus.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "DATASOURCE",
    "GRID_COLUMNS",
    "MACROS",
    "SCHEMA_VERSION",
    "Grid",
    "concrete_promql",
    "dashboard",
    "datasource_variable",
    "expressions",
    "query_variable",
    "target",
    "value_map",
]

SCHEMA_VERSION = 39
GRID_COLUMNS = 24
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
"""The datasource of every panel and query: the dashboard's ``datasource`` variable."""

MACROS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}
"""Grafana's macros and a plain-PromQL stand-in for each (used by :func:`concrete_promql`)."""

_VARIABLE = re.compile(r"\$\{[A-Za-z_]\w*(?::\w+)?\}|\$[A-Za-z_]\w*")
"""A Grafana variable reference (``$run``, ``${run}``, ``${run:regex}``); not ``$1``."""
_WRAPPED = re.compile(r"^\s*(?:label_values|query_result)\((.*)\)\s*$", re.DOTALL)


def target(expr: str, legend: str = "", *, ref: str = "A", instant: bool = False) -> dict[str, Any]:
    """One Prometheus query of a panel (``legend`` is Grafana's ``{{label}}`` template)."""
    query: dict[str, Any] = {
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend or "__auto",
        "range": not instant,
        "instant": instant,
        "refId": ref,
    }
    if instant:
        query["format"] = "table"
    return query


def _targets(queries: Sequence[tuple[str, str]], instant: bool) -> list[dict[str, Any]]:
    return [
        target(expr, legend, ref=chr(ord("A") + i), instant=instant)
        for i, (expr, legend) in enumerate(queries)
    ]


def _thresholds(steps: Sequence[tuple[float | None, str]]) -> dict[str, Any]:
    return {
        "mode": "absolute",
        "steps": [{"color": color, "value": value} for value, color in steps],
    }


class Grid:
    """Places panels on the 24-column grid and numbers them (ids start at 1, never reused)."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self._x = 0
        self._y = 0
        self._line_height = 0

    def _place(self, width: int, height: int) -> dict[str, int]:
        if not 1 <= width <= GRID_COLUMNS:
            raise ValueError(f"panel width {width} is not within 1..{GRID_COLUMNS}")
        if self._x + width > GRID_COLUMNS:
            self._newline()
        pos = {"h": height, "w": width, "x": self._x, "y": self._y}
        self._x += width
        self._line_height = max(self._line_height, height)
        return pos

    def _newline(self) -> None:
        self._y += self._line_height
        self._x = 0
        self._line_height = 0

    def _add(self, panel: dict[str, Any], width: int, height: int) -> dict[str, Any]:
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = self._place(width, height)
        self.panels.append(panel)
        return panel

    def row(self, title: str) -> dict[str, Any]:
        """A full-width, expanded row header; the panels added next sit under it."""
        if self._x:
            self._newline()
        panel = {"collapsed": False, "panels": [], "title": title, "type": "row"}
        added = self._add(panel, GRID_COLUMNS, 1)
        self._newline()
        return added

    def panel(
        self,
        kind: str,
        title: str,
        queries: Sequence[tuple[str, str]],
        *,
        unit: str,
        description: str,
        width: int = 12,
        height: int = 8,
        instant: bool = False,
        custom: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        thresholds: Sequence[tuple[float | None, str]] = ((None, "green"),),
        min_value: float | None = None,
        max_value: float | None = None,
        mappings: Sequence[dict[str, Any]] = (),
    ) -> dict[str, Any]:
        """Any panel type: ``queries`` are ``(expr, legend)`` pairs; ``unit`` is required."""
        defaults: dict[str, Any] = {
            "custom": dict(custom or {}),
            "mappings": list(mappings),
            "thresholds": _thresholds(thresholds),
            "unit": unit,
        }
        if min_value is not None:
            defaults["min"] = min_value
        if max_value is not None:
            defaults["max"] = max_value
        panel = {
            "datasource": DATASOURCE,
            "description": description,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": dict(options or {}),
            "targets": _targets(queries, instant),
            "title": title,
            "type": kind,
        }
        return self._add(panel, width, height)

    def timeseries(
        self,
        title: str,
        queries: Sequence[tuple[str, str]],
        *,
        unit: str,
        description: str,
        stacking: str = "none",
        threshold_line: float | None = None,
        **kw: Any,
    ) -> dict[str, Any]:
        """A ``timeseries`` panel; ``stacking`` is ``none``, ``normal`` or ``percent``;
        ``threshold_line`` draws a red dashed line at that value."""
        custom = {
            "drawStyle": "line",
            "fillOpacity": 30 if stacking != "none" else 10,
            "lineWidth": 1,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"group": "A", "mode": stacking},
            "thresholdsStyle": {"mode": "off" if threshold_line is None else "dashed"},
        }
        if threshold_line is not None:
            kw["thresholds"] = ((None, "transparent"), (threshold_line, "red"))
        options = {
            "legend": {"calcs": ["mean", "max"], "displayMode": "table", "placement": "bottom"},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
        return self.panel(
            "timeseries",
            title,
            queries,
            unit=unit,
            description=description,
            custom=custom,
            options=options,
            **kw,
        )

    def stat(
        self, title: str, expr: str, *, unit: str, description: str, legend: str = "", **kw: Any
    ) -> dict[str, Any]:
        """A ``stat`` panel showing the last value of one query."""
        kw.setdefault("width", 4)
        kw.setdefault("height", 4)
        options = {
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "auto",
        }
        return self.panel(
            "stat",
            title,
            [(expr, legend)],
            unit=unit,
            description=description,
            options=options,
            **kw,
        )

    def table(
        self, title: str, expr: str, *, unit: str, description: str, **kw: Any
    ) -> dict[str, Any]:
        """A ``table`` of one instant query (one row per series, labels as columns)."""
        options = {"showHeader": True, "cellHeight": "sm"}
        # an instant query in table format: one column per label, the value last; no time
        transformations = [{"id": "organize", "options": {"excludeByName": {"Time": True}}}]
        panel = self.panel(
            "table",
            title,
            [(expr, "")],
            unit=unit,
            description=description,
            instant=True,
            options=options,
            **kw,
        )
        panel["transformations"] = transformations
        return panel

    def state_timeline(
        self,
        title: str,
        queries: Sequence[tuple[str, str]],
        *,
        unit: str,
        description: str,
        mappings: Sequence[dict[str, Any]],
        **kw: Any,
    ) -> dict[str, Any]:
        """A ``state-timeline``: one lane per series, coloured by value ``mappings``."""
        options = {"mergeValues": True, "showValue": "auto", "rowHeight": 0.9}
        return self.panel(
            "state-timeline",
            title,
            queries,
            unit=unit,
            description=description,
            options=options,
            mappings=mappings,
            **kw,
        )


def value_map(values: dict[int, tuple[str, str]]) -> dict[str, Any]:
    """A Grafana value mapping ``{value: (text, colour)}``."""
    return {
        "type": "value",
        "options": {
            str(v): {"index": i, "text": text, "color": color}
            for i, (v, (text, color)) in enumerate(sorted(values.items()))
        },
    }


def datasource_variable(default_uid: str) -> dict[str, Any]:
    """The ``datasource`` variable: any Prometheus datasource, the provisioned one first."""
    return {
        "current": {"selected": False, "text": default_uid, "value": default_uid},
        "hide": 0,
        "includeAll": False,
        "label": "Prometheus",
        "multi": False,
        "name": "datasource",
        "options": [],
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "type": "datasource",
    }


def query_variable(
    name: str, query: str, *, label: str, regex: str = "", include_all: bool = True
) -> dict[str, Any]:
    """A multi-value query variable; "All" sends ``.*`` (use it as ``label=~"$name"``)."""
    return {
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": DATASOURCE,
        "definition": query,
        "hide": 0,
        "includeAll": include_all,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": {"qryType": 5, "query": query, "refId": "PrometheusVariableQueryEditor"},
        "refresh": 2,
        "regex": regex,
        "sort": 1,
        "type": "query",
    }


def dashboard(
    uid: str,
    title: str,
    grid: Grid,
    variables: Iterable[dict[str, Any]],
    *,
    tags: Sequence[str],
    description: str,
    refresh: str = "30s",
) -> dict[str, Any]:
    """A complete dashboard (classic JSON model) around the panels of ``grid``."""
    return {
        "annotations": {"list": []},
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [],
        "panels": grid.panels,
        "refresh": refresh,
        "schemaVersion": SCHEMA_VERSION,
        "tags": list(tags),
        "templating": {"list": list(variables)},
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": title,
        "uid": uid,
        "version": 1,
    }


def _variable_promql(variable: dict[str, Any]) -> str | None:
    if variable.get("type") != "query":
        return None
    query = variable["query"]
    text = query["query"] if isinstance(query, dict) else str(query)
    inner = _WRAPPED.match(text)
    if inner is None:
        return text
    body = inner.group(1)
    if text.lstrip().startswith("label_values"):
        # label_values(<series selector>, <label>): the selector is the PromQL part
        body = body.rsplit(",", 1)[0] if "," in body else ""
    return body.strip() or None


def expressions(model: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard: panel queries, then variable queries (raw)."""
    found = [t["expr"] for p in model["panels"] for t in p.get("targets", [])]
    for variable in model["templating"]["list"]:
        expr = _variable_promql(variable)
        if expr:
            found.append(expr)
    return found


def concrete_promql(expr: str) -> str:
    """``expr`` with Grafana's macros (:data:`MACROS`) and variables (``.*``) substituted."""
    for macro, value in MACROS.items():
        expr = expr.replace(macro, value)
    return _VARIABLE.sub(".*", expr)
