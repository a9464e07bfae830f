"""Building a ``SparkSession`` for any master with the right Python, Java and GPU settings.

The conf is built as plain data first (:func:`session_plan`), so it can be printed and tested
without starting anything (``yarn`` and ``k8s://`` included); :func:`session` then builds the
session from it.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from gpuspark.errors import ClusterError

__all__ = ["SessionPlan", "local_defaults", "session", "session_plan"]

_LOCAL_PREFIXES = ("local", "spark://127.", "spark://localhost")


@dataclass
class SessionPlan:
    """Everything a SparkSession is built from: master, app name, conf and environment."""

    master: str
    app_name: str
    conf: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def materialize(self) -> str:
        """The equivalent ``spark-submit`` command line (a dry run)."""
        parts = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        parts += ["spark-submit", "--master", shlex.quote(self.master)]
        parts += ["--name", shlex.quote(self.app_name)]
        for key, value in sorted(self.conf.items()):
            parts += ["--conf", shlex.quote(f"{key}={value}")]
        return " ".join(parts)


def local_defaults() -> dict[str, str]:
    """Small memory and quiet, fast settings for a single machine."""
    return {
        "spark.driver.memory": "1g",
        "spark.executor.memory": "1g",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.default.parallelism": "8",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
    }


def _python_conf() -> dict[str, str]:
    # Executors must run the driver's Python, or tasks fail with ModuleNotFoundError.
    return {
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
    }


def _resolve_master(master: str | None, spec: Any) -> str:
    if master is None and spec is not None:
        master = spec.spark.master
    if master in (None, "local-cluster", "embedded"):
        from gpuspark.cluster.local import LocalCluster

        running = LocalCluster.running()
        if running is None:
            raise ClusterError(
                "no Spark master given and the embedded cluster is not running",
                remedy="start it with `gpuspark cluster up`, or pass master='spark://…'",
            )
        return running.master_url
    assert master is not None
    return master


def _check_master(master: str, conf: dict[str, str]) -> None:
    allowed = ("local", "spark://", "yarn", "k8s://")
    if not master.startswith(allowed):
        raise ClusterError(
            f"master={master!r} is not a Spark master URL",
            remedy="use local[*], spark://host:port, yarn or k8s://https://host:port",
        )
    if master == "yarn":
        conf.setdefault("spark.submit.deployMode", "client")
    if master.startswith("k8s://") and "spark.kubernetes.container.image" not in conf:
        raise ClusterError(
            "master=k8s://… needs spark.kubernetes.container.image",
            remedy="pass it as conf or in the spec's [spark.conf] table",
        )


def session_plan(
    master: str | None = None,
    spec: Any = None,
    *,
    app_name: str = "gpuspark",
    **conf: Any,
) -> SessionPlan:
    """Work out master, conf and environment for a session, without starting anything.

    Order of precedence (last wins): local defaults (single-machine masters only), the
    spec's Spark settings, the current Python for driver and executors, ``conf``.
    Keyword names may use ``_`` for ``.`` (``spark_executor_cores=4``).
    """
    resolved = _resolve_master(master, spec)
    merged: dict[str, str] = {}
    if resolved.startswith(_LOCAL_PREFIXES):
        merged.update(local_defaults())
    if spec is not None:
        from gpuspark.cluster.conf import spark_conf

        merged.update(spark_conf(spec))
    merged.update(_python_conf())
    merged.update({_key(k): _value(v) for k, v in conf.items()})
    _check_master(resolved, merged)
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return SessionPlan(master=resolved, app_name=app_name, conf=merged, env=env)


def session(
    master: str | None = None, spec: Any = None, *, app_name: str = "gpuspark", **conf: Any
) -> Any:
    """Build (or reuse) a ``SparkSession`` for ``master`` with gpuspark's settings.

    ``master`` may be ``local[*]``, ``spark://host:port``, ``yarn``, ``k8s://…``, or ``None``
    for the spec's master or the running embedded cluster. See :func:`session_plan`.
    """
    plan = session_plan(master, spec, app_name=app_name, **conf)
    if plan.master == "yarn" and not (
        os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR")
    ):
        raise ClusterError(
            "master=yarn needs the cluster's Hadoop configuration",
            remedy="set HADOOP_CONF_DIR (or YARN_CONF_DIR) to the directory with yarn-site.xml",
        )
    os.environ.update(plan.env)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(plan.master).appName(plan.app_name)
    for key, value in plan.conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("GPUSPARK_SPARK_LOG_LEVEL", "WARN"))
    return spark


def _key(name: str) -> str:
    return name if "." in name else name.replace("_", ".")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
