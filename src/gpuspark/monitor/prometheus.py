"""``prometheus.yml`` rendered from a cluster spec.

Scrape jobs (names from :mod:`gpuspark.monitor.names`):

- ``dcgm`` and ``node``: dcgm-exporter (``:9400``) and node_exporter (``:9100``) on every host of
  the spec's ``[[nodes]]``, labelled with their node group;
- ``spark-master`` (``/metrics/master/prometheus``) and ``spark-master-apps``
  (``/metrics/applications/prometheus``): the standalone master's web UI, from ``spark.master``
  (``spark://host:7077`` -> ``host:8080``) and from the file_sd files under ``spark-master/``;
- ``spark-apps`` (``/metrics/prometheus``) and ``spark-executors``
  (``/metrics/executors/prometheus``): every running driver's UI, from ``spark-apps/``;
- ``gpuspark-runs`` (``/metrics``): every training rank, from ``runs/``. The ranks' own
  ``run_id``/``rank``/``host``/``team`` labels are kept as exported (``honor_labels``).

:class:`EmbeddedScrape` gives the variant ``gpuspark monitor up`` runs next to the embedded
cluster: no dcgm, node_exporter only where one is given, everything else through file_sd.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath
from typing import TYPE_CHECKING, Any

from gpuspark._util.yamltext import dump_yaml
from gpuspark.errors import SpecError
from gpuspark.monitor import names
from gpuspark.schedulers import backend_for
from gpuspark.schedulers.standalone import MASTER_UI_PORT

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = [
    "ALERTMANAGER_ADDRESS",
    "JOB_SPARK_MASTER_APPS",
    "RENDERED_TARGETS",
    "EmbeddedScrape",
    "prometheus_yml",
    "rendered_targets",
    "scrape_configs",
]

JOB_SPARK_MASTER_APPS = "spark-master-apps"
"""The standalone master's ``/metrics/applications/prometheus`` (per-application gauges)."""
ALERTMANAGER_ADDRESS = "localhost:9093"
"""Where the rendered ``prometheus.yml`` sends alerts (Alertmanager's default port)."""
RENDERED_TARGETS = "targets"
"""The file_sd folder of a rendered ``prometheus.yml`` when neither ``--targets-dir`` nor
``[monitoring] targets_dir`` names one: relative, so Prometheus reads it beside the file
(relative ``file_sd_configs`` paths are relative to the configuration file's folder)."""

_PATHS = {
    names.JOB_SPARK_MASTER: "/metrics/master/prometheus",
    JOB_SPARK_MASTER_APPS: "/metrics/applications/prometheus",
    names.JOB_SPARK_APPS: "/metrics/prometheus",
    names.JOB_SPARK_EXECUTORS: "/metrics/executors/prometheus",
    names.JOB_RUNS: "/metrics",
}
_KINDS = {  # job -> the targets sub-directory (monitor.discovery.KINDS) it reads
    names.JOB_SPARK_MASTER: "spark-master",
    JOB_SPARK_MASTER_APPS: "spark-master",
    names.JOB_SPARK_APPS: "spark-apps",
    names.JOB_SPARK_EXECUTORS: "spark-apps",
    names.JOB_RUNS: "runs",
}


@dataclass(frozen=True)
class EmbeddedScrape:
    """The embedded-cluster variant of ``prometheus.yml`` (``gpuspark monitor up``)."""

    node_exporter: str | None = None
    """``host:port`` of a local node_exporter to scrape (e.g. ``127.0.0.1:9100``); none: no
    ``node`` job."""
    scrape_interval_s: int = 5
    rule_files: Sequence[str] = ()
    """Rule files to load (paths as Prometheus reads them); none by default."""


def _master_targets(spec: ClusterSpec) -> list[str]:
    """``host:8080`` for every master of a ``spark://`` URL (HA lists several)."""
    master = spec.spark.master
    port = spec.spark.conf.get("spark.master.ui.port", str(MASTER_UI_PORT))
    return [f"{host}:{port}" for host in backend_for(master).master_ui_hosts(master)]


def _file_sd(targets_dir: PurePath, job: str) -> dict[str, Any]:
    return {"files": [(targets_dir / _KINDS[job] / "*.json").as_posix()]}


def _discovered(job: str, targets_dir: PurePath, static: list[str] | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"job_name": job, "metrics_path": _PATHS[job]}
    if job == names.JOB_RUNS:
        config["honor_labels"] = True
    if static:
        config["static_configs"] = [{"targets": static}]
    config["file_sd_configs"] = [_file_sd(targets_dir, job)]
    return config


def _per_node(spec: ClusterSpec, job: str, port: int) -> dict[str, Any]:
    groups = [
        {"targets": [f"{host}:{port}" for host in g.hosts], "labels": {"node_group": g.name}}
        for g in spec.nodes
    ]
    return {"job_name": job, "static_configs": groups}


def scrape_configs(
    spec: ClusterSpec, targets_dir: PurePath, embedded: EmbeddedScrape | None = None
) -> list[dict[str, Any]]:
    """The ``scrape_configs`` list of :func:`prometheus_yml`, as data."""
    jobs: list[dict[str, Any]] = []
    if embedded is None:
        jobs.append(_per_node(spec, names.JOB_DCGM, names.DCGM_PORT))
        jobs.append(_per_node(spec, names.JOB_NODE, names.NODE_EXPORTER_PORT))
    elif embedded.node_exporter:
        jobs.append(
            {"job_name": names.JOB_NODE, "static_configs": [{"targets": [embedded.node_exporter]}]}
        )
    masters = _master_targets(spec) if embedded is None else []
    for job in (names.JOB_SPARK_MASTER, JOB_SPARK_MASTER_APPS):
        jobs.append(_discovered(job, targets_dir, masters))
    for job in (names.JOB_SPARK_APPS, names.JOB_SPARK_EXECUTORS, names.JOB_RUNS):
        jobs.append(_discovered(job, targets_dir))
    return jobs


def _document(
    spec: ClusterSpec, targets_dir: PurePath, embedded: EmbeddedScrape | None
) -> dict[str, Any]:
    interval = spec.monitoring.scrape_interval_s if embedded is None else embedded.scrape_interval_s
    doc: dict[str, Any] = {
        "global": {
            "scrape_interval": f"{interval}s",
            "evaluation_interval": f"{interval}s",
            "external_labels": {"cluster": spec.name},
        }
    }
    if embedded is None:
        doc["rule_files"] = ["rules/*.yml"]
        doc["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": [ALERTMANAGER_ADDRESS]}]}]
        }
    elif embedded.rule_files:
        doc["rule_files"] = list(embedded.rule_files)
    doc["scrape_configs"] = scrape_configs(spec, targets_dir, embedded)
    return doc


def rendered_targets(
    spec: ClusterSpec, targets_dir: str | os.PathLike[str] | None = None
) -> PurePath:
    """The file_sd folder a rendered ``prometheus.yml`` names, exactly as given: ``targets_dir``,
    else the spec's ``[monitoring] targets_dir``, else :data:`RENDERED_TARGETS` (relative to the
    file). Never made absolute or user-expanded here: the file is read on the Prometheus
    server, so no path of the machine that renders it belongs in it; a leading ``~`` is
    refused (:class:`~gpuspark.errors.SpecError`)."""
    if targets_dir is not None:
        folder: PurePath = PurePath(targets_dir)
    else:
        folder = PurePosixPath(spec.monitoring.targets_dir or RENDERED_TARGETS)
    if folder.parts and folder.parts[0].startswith("~"):
        raise SpecError(
            f"file_sd folder {folder.as_posix()!r} starts with '~': Prometheus does not expand"
            " it, and this machine's home is not the server's",
            remedy="set [monitoring] targets_dir or --targets-dir to the path as the Prometheus"
            " server sees it",
        )
    return folder


def prometheus_yml(
    spec: ClusterSpec,
    *,
    targets_dir: str | os.PathLike[str] | None = None,
    embedded: EmbeddedScrape | None = None,
) -> str:
    """Content of ``prometheus.yml`` (check it: ``promtool check config``).

    ``targets_dir`` is the file_sd directory as the Prometheus server sees it (default
    :func:`rendered_targets`: the spec's ``[monitoring] targets_dir``, else ``targets/``
    beside the file). ``embedded`` selects the embedded-cluster variant; by default the
    production one: the spec's nodes, the rule files under ``rules/`` and Alertmanager at
    :data:`ALERTMANAGER_ADDRESS`.
    """

    folder = rendered_targets(spec, targets_dir)
    text = dump_yaml(_document(spec, folder, embedded))
    what = "embedded cluster" if embedded is not None else f"cluster '{spec.name}'"
    header = (
        f"# Prometheus configuration for {what}, rendered by gpuspark from its spec.\n"
        "# Edit the spec and render again rather than editing this file.\n"
        f"# Runs and Spark applications appear as file_sd targets under {folder.as_posix()}"
    )
    if folder.is_absolute():
        header += ".\n"
    else:
        header += (
            "/ beside this file.\n"
            "# The drivers write them into [monitoring] targets_dir: make that the same folder\n"
            "# (shared with the Prometheus server), or render with --targets-dir PATH.\n"
        )
    note = (
        "# Alertmanager (alertmanager.yml, rendered alongside) on its default port; change the\n"
        "# address if it runs elsewhere.\n"
    )
    return header + text.replace("\nalerting:\n", f"\n{note}alerting:\n", 1)
