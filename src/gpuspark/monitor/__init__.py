"""Monitoring: the training ranks' Prometheus metrics, run discovery, and what is rendered for
Prometheus, Alertmanager and Grafana from the cluster spec; ``gpuspark monitor`` and ``top``.

Metric and label names live in :mod:`gpuspark.monitor.names`; the alert runbook ships as
``runbook.md`` next to this file.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuspark.cluster.discovery import list_targets, remove_targets, write_targets
    from gpuspark.cluster.monitor_dirs import monitor_dir, targets_dir
    from gpuspark.monitor.alertmanager import alertmanager_yml
    from gpuspark.monitor.dashboards import dashboard_expressions, render_dashboards
    from gpuspark.monitor.exporter import RankMetrics, current, serve
    from gpuspark.monitor.local import MonitorState, down, running, status, up
    from gpuspark.monitor.prometheus import EmbeddedScrape, prometheus_yml
    from gpuspark.monitor.rank_settings import check_team
    from gpuspark.monitor.render import render_monitoring, runbook_text, write_monitoring
    from gpuspark.monitor.rule_tests import alert_rule_tests
    from gpuspark.monitor.rules import ALERTS, AlertInfo, alert_rules, rule_expressions
    from gpuspark.monitor.top import RankRow, from_endpoints, from_prometheus

_LAZY = {
    "ALERTS": "gpuspark.monitor.rules",
    "AlertInfo": "gpuspark.monitor.rules",
    "EmbeddedScrape": "gpuspark.monitor.prometheus",
    "MonitorState": "gpuspark.monitor.local",
    "RankMetrics": "gpuspark.monitor.exporter",
    "RankRow": "gpuspark.monitor.top",
    "alert_rule_tests": "gpuspark.monitor.rule_tests",
    "alert_rules": "gpuspark.monitor.rules",
    "alertmanager_yml": "gpuspark.monitor.alertmanager",
    "check_team": "gpuspark.monitor.rank_settings",
    "current": "gpuspark.monitor.exporter",
    "dashboard_expressions": "gpuspark.monitor.dashboards",
    "down": "gpuspark.monitor.local",
    "from_endpoints": "gpuspark.monitor.top",
    "from_prometheus": "gpuspark.monitor.top",
    "list_targets": "gpuspark.cluster.discovery",
    "monitor_dir": "gpuspark.cluster.monitor_dirs",
    "prometheus_yml": "gpuspark.monitor.prometheus",
    "remove_targets": "gpuspark.cluster.discovery",
    "render_dashboards": "gpuspark.monitor.dashboards",
    "render_monitoring": "gpuspark.monitor.render",
    "rule_expressions": "gpuspark.monitor.rules",
    "runbook_text": "gpuspark.monitor.render",
    "running": "gpuspark.monitor.local",
    "serve": "gpuspark.monitor.exporter",
    "status": "gpuspark.monitor.local",
    "targets_dir": "gpuspark.cluster.monitor_dirs",
    "up": "gpuspark.monitor.local",
    "write_monitoring": "gpuspark.monitor.render",
    "write_targets": "gpuspark.cluster.discovery",
}
"""Where each public name lives, loaded on first use: a rank that imports
:mod:`~gpuspark.monitor.exporter` or :mod:`~gpuspark.monitor.rank_settings` does not load the
renderers (dashboards, rules, Prometheus) first."""

__all__ = [
    "ALERTS",
    "AlertInfo",
    "EmbeddedScrape",
    "MonitorState",
    "RankMetrics",
    "RankRow",
    "alert_rule_tests",
    "alert_rules",
    "alertmanager_yml",
    "check_team",
    "current",
    "dashboard_expressions",
    "down",
    "from_endpoints",
    "from_prometheus",
    "list_targets",
    "monitor_dir",
    "prometheus_yml",
    "remove_targets",
    "render_dashboards",
    "render_monitoring",
    "rule_expressions",
    "runbook_text",
    "running",
    "serve",
    "status",
    "targets_dir",
    "up",
    "write_monitoring",
    "write_targets",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuspark.monitor' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
