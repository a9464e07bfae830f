"""Monitoring: the training ranks' Prometheus metrics, run discovery, and what is rendered for
Prometheus, Alertmanager and Grafana from the cluster spec; ``gpuspark monitor`` and ``top``.

Metric and label names live in :mod:`gpuspark.monitor.names`; the alert runbook ships as
``runbook.md`` next to this file.
"""

from __future__ import annotations

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
