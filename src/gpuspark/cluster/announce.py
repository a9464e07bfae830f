"""Prometheus targets of the Spark processes gpuspark starts: an application's driver UI
(driver and executor metrics) and the embedded cluster's master.

Each is a file_sd file (:mod:`gpuspark.cluster.discovery`) written when the process starts and
removed when it stops, so a Prometheus rendered by ``gpuspark render monitoring`` or started
by ``gpuspark monitor up`` finds them without configuration. Failures to write are logged and
never stop a job: monitoring is an observer.
"""

from __future__ import annotations

import atexit
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from gpuspark.cluster.discovery import remove_targets, write_targets
from gpuspark.cluster.monitor_dirs import targets_dir

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = ["announce_app", "announce_master", "withdraw_app", "withdraw_master"]

log = logging.getLogger(__name__)


def _dir(spec: ClusterSpec | None) -> Any:

    return targets_dir(spec)


def announce_app(spark: Any, spec: ClusterSpec | None = None) -> str | None:
    """Write the target file of ``spark``'s driver UI; return the app id (``None``: no UI)."""

    sc = spark.sparkContext
    url = sc.uiWebUrl
    if not url:
        return None
    app_id = str(sc.applicationId)
    where = urlparse(url)
    labels = {"spark_app": str(sc.appName), "spark_app_id": app_id}
    try:
        write_targets(_dir(spec), "spark-apps", app_id, [([where.netloc], labels)])
    except OSError as exc:
        log.warning("could not write the Prometheus target of %s: %s", app_id, exc)
        return None
    atexit.register(withdraw_app, app_id, spec)
    return app_id


def withdraw_app(app_id: str, spec: ClusterSpec | None = None) -> None:
    """Remove the target file :func:`announce_app` wrote (no error if it is gone)."""

    try:
        remove_targets(_dir(spec), "spark-apps", app_id)
    except OSError as exc:
        log.warning("could not remove the Prometheus target of %s: %s", app_id, exc)


def announce_master(name: str, host: str, webui_port: int, spec: ClusterSpec | None) -> None:
    """Write the target file of a standalone master's web UI (``/metrics/master/prometheus``)."""

    try:
        labels = {"spark_cluster": name}
        write_targets(_dir(spec), "spark-master", name, [([f"{host}:{webui_port}"], labels)])
    except OSError as exc:
        log.warning("could not write the Prometheus target of the master: %s", exc)


def withdraw_master(name: str, spec: ClusterSpec | None) -> None:
    """Remove the master's target file."""

    try:
        remove_targets(_dir(spec), "spark-master", name)
    except OSError as exc:
        log.warning("could not remove the Prometheus target of the master: %s", exc)
