"""``alertmanager.yml`` rendered from a cluster spec: one receiver per ``[[teams]]`` entry,
routed by the alerts' ``team`` label, and a default receiver for everything else (node and
exporter alerts, runs without a team)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuspark._util.yamltext import dump_yaml

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["DEFAULT_RECEIVER", "alertmanager_yml", "receiver_name"]

DEFAULT_RECEIVER = "default"
"""Receiver of every alert no team route matches."""


def receiver_name(team: str) -> str:
    """The receiver of ``team``'s alerts: ``team-<name>``."""
    return f"team-{team}"


def _document(spec: ClusterSpec) -> dict[str, Any]:
    routes = [
        {"receiver": receiver_name(t.name), "matchers": [f'team="{t.name}"']} for t in spec.teams
    ]
    route: dict[str, Any] = {
        "receiver": DEFAULT_RECEIVER,
        "group_by": ["alertname", "team"],
        "group_wait": "30s",
        "group_interval": "5m",
        "repeat_interval": "4h",
    }
    if routes:
        route["routes"] = routes
    receivers = [{"name": DEFAULT_RECEIVER}] + [{"name": r["receiver"]} for r in routes]
    inhibit = [
        {  # a port that is down explains its error counters
            "source_matchers": ['alertname="InfinibandPortNotActive"'],
            "target_matchers": ['alertname="InfinibandErrorsRising"'],
            "equal": ["instance", "device", "port"],
        },
    ]
    return {
        "global": {"resolve_timeout": "5m"},
        "route": route,
        "receivers": receivers,
        "inhibit_rules": inhibit,
    }


def alertmanager_yml(spec: ClusterSpec) -> str:
    """Content of ``alertmanager.yml`` (check it: ``amtool check-config``)."""

    header = (
        f"# Alertmanager configuration for cluster '{spec.name}', rendered by gpuspark from its\n"
        "# spec: alerts carrying a team label go to that team's receiver, the rest to\n"
        f"# '{DEFAULT_RECEIVER}'. The receivers have no notifier yet: add email_configs,\n"
        "# slack_configs, webhook_configs, ... to each (until then its alerts are only shown\n"
        "# in Alertmanager's UI).\n"
    )
    return header + dump_yaml(_document(spec))
