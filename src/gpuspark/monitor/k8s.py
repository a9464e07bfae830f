"""Monitoring on Kubernetes: the same scrape jobs, alert rules and dashboards as
``render monitoring``, as objects of the Prometheus operator (``monitoring.coreos.com/v1``)
and ConfigMaps for Grafana's dashboard sidecar.

- ``PodMonitor`` ``gpuspark-ranks``: the training ranks' ``/metrics`` in executor pods (the
  ports the executor pod template declares, one per local rank), job ``gpuspark-runs``;
- ``PodMonitor`` ``gpuspark-spark-drivers``: each driver's UI port, ``/metrics/prometheus``
  (job ``spark-apps``) and ``/metrics/executors/prometheus`` (job ``spark-executors``);
- ``ServiceMonitor`` ``gpuspark-dcgm`` and ``gpuspark-node``: dcgm-exporter as the NVIDIA GPU
  operator deploys it and node_exporter as kube-prometheus-stack does, jobs ``dcgm``/``node``;
- ``PrometheusRule`` ``gpuspark-alerts``: :func:`gpuspark.monitor.rules.rule_groups`.

The rules and dashboards select on the job names of ``prometheus.yml``
(:mod:`gpuspark.monitor.names`), so every monitor sets ``job`` by relabelling: the operator's
own job name would be ``<namespace>/<monitor>``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gpuspark.monitor import names
from gpuspark.monitor.dashboards import build_dashboards
from gpuspark.monitor.rules import rule_groups
from gpuspark.schedulers.kubernetes.pods import PART_OF, SPARK_ROLE, SPARK_UI_PORT, rank_ports
from gpuspark.schedulers.kubernetes.render import Manifest

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = [
    "DASHBOARD_LABEL",
    "DCGM_SELECTOR",
    "MONITORING_API",
    "NODE_EXPORTER_SELECTOR",
    "dashboard_configmaps",
    "k8s_manifests",
    "monitors",
    "prometheus_rule",
]

MONITORING_API = "monitoring.coreos.com/v1"
DASHBOARD_LABEL = {"grafana_dashboard": "1"}
"""The label Grafana's sidecar (kube-prometheus-stack's default) loads dashboards from."""
DCGM_SELECTOR = ({"app": "nvidia-dcgm-exporter"}, "gpu-metrics")
"""(Service labels, port name) of dcgm-exporter as the NVIDIA GPU operator deploys it."""
NODE_EXPORTER_SELECTOR = ({"app.kubernetes.io/name": "prometheus-node-exporter"}, "http-metrics")
"""(Service labels, port name) of node_exporter as kube-prometheus-stack deploys it."""


def _job(name: str) -> list[dict[str, str]]:
    """Relabel the target's ``job`` to ``name`` (the rules and dashboards select on it)."""
    return [{"action": "replace", "targetLabel": "job", "replacement": name}]


def _meta(spec: ClusterSpec, name: str) -> dict[str, Any]:
    labels = {**PART_OF, **spec.kubernetes.monitoring_labels}
    return {"name": name, "namespace": spec.kubernetes.namespace, "labels": labels}


def _pod_monitor(
    spec: ClusterSpec, name: str, role: str, endpoints: list[dict[str, Any]], namespaces: list[str]
) -> dict[str, Any]:
    return {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": _meta(spec, name),
        "spec": {
            "selector": {"matchLabels": {**PART_OF, SPARK_ROLE: role}},
            "namespaceSelector": {"matchNames": namespaces},
            "podMetricsEndpoints": endpoints,
        },
    }


def _service_monitor(spec: ClusterSpec, name: str, job: str, found: Any) -> dict[str, Any]:
    labels, port = found
    interval = f"{spec.monitoring.scrape_interval_s}s"
    return {
        "apiVersion": MONITORING_API,
        "kind": "ServiceMonitor",
        "metadata": _meta(spec, name),
        "spec": {
            "selector": {"matchLabels": labels},
            "namespaceSelector": {"any": True},
            "endpoints": [{"port": port, "interval": interval, "relabelings": _job(job)}],
        },
    }


def monitors(spec: ClusterSpec, namespaces: list[str]) -> list[dict[str, Any]]:
    """The PodMonitors of gpuspark's pods in ``namespaces`` and the ServiceMonitors of the
    exporters (see the module's description)."""
    interval = f"{spec.monitoring.scrape_interval_s}s"
    out = []
    ranks = [
        {
            "port": port_name,
            "path": "/metrics",
            "interval": interval,
            "honorLabels": True,  # the ranks' own run_id, rank, host and team labels
            "relabelings": _job(names.JOB_RUNS),
        }
        for port_name, _ in rank_ports(spec)
    ]
    if ranks:
        out.append(_pod_monitor(spec, "gpuspark-ranks", "executor", ranks, namespaces))
    drivers = [
        {"port": SPARK_UI_PORT, "path": path, "interval": interval, "relabelings": _job(job)}
        for job, path in (
            (names.JOB_SPARK_APPS, "/metrics/prometheus"),
            (names.JOB_SPARK_EXECUTORS, "/metrics/executors/prometheus"),
        )
    ]
    out.append(_pod_monitor(spec, "gpuspark-spark-drivers", "driver", drivers, namespaces))
    out.append(_service_monitor(spec, "gpuspark-dcgm", names.JOB_DCGM, DCGM_SELECTOR))
    out.append(_service_monitor(spec, "gpuspark-node", names.JOB_NODE, NODE_EXPORTER_SELECTOR))
    return out


def prometheus_rule(spec: ClusterSpec) -> dict[str, Any]:
    """The alert rules of ``render monitoring`` as a ``PrometheusRule``."""
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": _meta(spec, "gpuspark-alerts"),
        "spec": {"groups": rule_groups(spec)},
    }


def dashboard_configmaps(spec: ClusterSpec) -> list[dict[str, Any]]:
    """One ConfigMap per Grafana dashboard, labelled for Grafana's sidecar."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"gpuspark-dashboard-{name}",
                "namespace": spec.kubernetes.namespace,
                "labels": {**PART_OF, **DASHBOARD_LABEL},
                "annotations": {"grafana_folder": "gpuspark"},
            },
            "data": {f"gpuspark-{name}.json": json.dumps(model, indent=2) + "\n"},
        }
        for name, model in build_dashboards(spec).items()
    ]


def k8s_manifests(spec: ClusterSpec, namespaces: list[str]) -> list[Manifest]:
    """The monitoring and dashboard manifests ``render k8s`` adds to ``cluster/``;
    ``namespaces``: where gpuspark's jobs run."""
    selectors = (
        "the Prometheus operator picks them when its podMonitorSelector, serviceMonitorSelector"
        " and ruleSelector match their labels ([kubernetes] monitoring_labels)"
    )
    exporters = (
        "gpuspark-dcgm / gpuspark-node scrape dcgm-exporter and node_exporter as jobs 'dcgm'"
        " and 'node' (the rules and dashboards select on them): drop your own monitors of"
        " those exporters, or these, to avoid scraping them twice"
    )
    ranks = "the ranks listen on [monitoring] metrics_host: it must be 0.0.0.0 here"
    return [
        Manifest(
            "monitoring",
            [*monitors(spec, namespaces), prometheus_rule(spec)],
            [
                "PodMonitors, ServiceMonitors and the alert rules (monitoring.coreos.com/v1);",
                selectors,
                exporters,
                ranks,
            ],
        ),
        Manifest(
            "dashboards",
            dashboard_configmaps(spec),
            [
                "Grafana dashboards as ConfigMaps for its sidecar (label grafana_dashboard=1);",
                "the dashboards' datasource variable picks any Prometheus datasource",
            ],
        ),
    ]
