"""Monitoring: the training ranks' Prometheus metrics, run discovery, and what is rendered for
Prometheus, Alertmanager and Grafana from the cluster spec; ``gpuspark monitor`` and ``top``.

Metric and label names live in :mod:`gpuspark.monitor.names`.
"""

from __future__ import annotations

from gpuspark.monitor.paths import monitor_dir, targets_dir

__all__ = ["monitor_dir", "targets_dir"]
