"""``gpuspark render monitoring``: every Prometheus/Alertmanager file for a cluster spec.

:func:`render_monitoring` returns relative path -> content (printable before anything is
written); :func:`write_monitoring` writes them atomically; :func:`check_commands` are the
``promtool``/``amtool`` lines that check the written files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from gpuspark.cluster.conf import write_rendered_tree
from gpuspark.monitor.alertmanager import alertmanager_yml
from gpuspark.monitor.dashboards import render_dashboards
from gpuspark.monitor.prometheus import prometheus_yml
from gpuspark.monitor.rule_tests import TESTS_FILE, alert_rule_tests
from gpuspark.monitor.rules import RULES_FILE, alert_rules

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = [
    "ALERTMANAGER_FILE",
    "PROMETHEUS_FILE",
    "RUNBOOK_FILE",
    "check_commands",
    "render_monitoring",
    "runbook_text",
    "write_monitoring",
]

PROMETHEUS_FILE = "prometheus.yml"
ALERTMANAGER_FILE = "alertmanager.yml"
RUNBOOK_FILE = "runbook.md"


def runbook_text() -> str:
    """The alert runbook (``docs/runbook.md``), shipped with the package."""
    from importlib.resources import files

    return (files("gpuspark.monitor") / RUNBOOK_FILE).read_text(encoding="utf-8")


def render_monitoring(
    spec: ClusterSpec, *, targets_dir: str | os.PathLike[str] | None = None
) -> dict[str, str]:
    """Relative path -> content: ``prometheus.yml``, ``rules/gpuspark-alerts.yml``,
    ``tests/gpuspark-alerts.test.yml`` (promtool unit tests of the rules),
    ``alertmanager.yml``, ``runbook.md`` and the Grafana dashboards with their provisioning
    files under ``grafana/``.

    ``targets_dir`` is the file_sd directory as the Prometheus server sees it, written as
    given (default: the spec's ``[monitoring] targets_dir``, else ``targets/`` relative to
    ``prometheus.yml``): nothing of the rendering machine's paths goes into the files.
    """

    files = {
        PROMETHEUS_FILE: prometheus_yml(spec, targets_dir=targets_dir),
        f"rules/{RULES_FILE}": alert_rules(spec),
        f"tests/{TESTS_FILE}": alert_rule_tests(spec),
        ALERTMANAGER_FILE: alertmanager_yml(spec),
        RUNBOOK_FILE: runbook_text(),
    }
    files.update(render_dashboards(spec))
    return files


def write_monitoring(files: Mapping[str, str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write ``files`` (relative path -> content) under ``out_dir``, each atomically."""
    return write_rendered_tree(files, out_dir)


def check_commands(out_dir: str | os.PathLike[str]) -> list[str]:
    """Shell lines that check the files :func:`write_monitoring` wrote to ``out_dir``."""

    out = Path(out_dir)
    return [
        f"promtool check config {out / PROMETHEUS_FILE}",
        f"promtool check rules {out / 'rules' / RULES_FILE}",
        f"promtool test rules {out / 'tests' / TESTS_FILE}",
        f"amtool check-config {out / ALERTMANAGER_FILE}",
    ]
