"""What a session is built from, as plain data: :class:`SessionPlan` (printable as a
``spark-submit`` line before anything starts) and the settings every single-machine session
starts from (:func:`local_defaults`)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from gpuspark.cluster.security import redact
from gpuspark.schedulers.connect import redact_url

__all__ = ["SessionPlan", "local_defaults"]


@dataclass
class SessionPlan:
    """Everything a SparkSession is built from: master, app name, conf and environment."""

    master: str
    app_name: str
    conf: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    master_ui: str | None = None
    """A standalone master's web UI when known (the embedded cluster's), else ``None``."""
    remote: bool = False
    """A Spark Connect client session (``master`` is ``sc://…``)."""
    notes: list[str] = field(default_factory=list)
    """One line each, said when the session starts (what goes where, what does not apply)."""

    def materialize(self) -> str:
        """The equivalent ``spark-submit`` command line (a dry run)."""
        parts = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        where = ["--remote", redact_url(self.master)] if self.remote else ["--master", self.master]
        parts += ["spark-submit", where[0], shlex.quote(where[1])]
        parts += ["--name", shlex.quote(self.app_name)]

        for key, value in sorted(redact(self.conf).items()):
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
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
    }
