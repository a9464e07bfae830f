"""systemd units of a Spark standalone GPU cluster: the Spark master, workers and history
server, dcgm-exporter and node_exporter.

The Spark daemons run in the foreground under ``bin/spark-class`` (``Type=simple``): systemd
watches the JVM itself (``spark-class`` ends in ``exec java``), with no PID file and no
``sbin/`` scripts (the ``pyspark`` wheel ships none of ``start-master.sh``/``start-worker.sh``).
``spark-class`` reads ``$SPARK_CONF_DIR/spark-env.sh``, so one unit serves every host: what
differs per host (bind address, cores, memory, GPUs, local dirs, NCCL's network) is in that
host's ``spark-env.sh``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DCGM_UNIT",
    "HISTORY_UNIT",
    "MASTER_UNIT",
    "NODE_UNIT",
    "WORKER_UNIT",
    "InstallPaths",
    "render_units",
]

MASTER_UNIT = "spark-master.service"
WORKER_UNIT = "spark-worker.service"
HISTORY_UNIT = "spark-history-server.service"
DCGM_UNIT = "dcgm-exporter.service"
NODE_UNIT = "node-exporter.service"

_JVM_SIGTERM = 143
"""A JVM stopped by SIGTERM exits 128 + 15: a clean stop, not a failure."""


@dataclass(frozen=True)
class InstallPaths:
    """Where things are installed on the hosts."""

    spark_home: str = "/opt/spark"
    conf_dir: str | None = None
    """``$SPARK_CONF_DIR``; default ``<spark_home>/conf``."""
    discovery_script: str | None = None
    """``getGpusResources.sh``; default the spec's ``spark.discovery_script``."""
    user: str = "spark"
    """The user the Spark daemons run as."""
    dcgm_exporter: str = "/usr/bin/dcgm-exporter"
    node_exporter: str = "/usr/bin/prometheus-node-exporter"
    """Debian's and Ubuntu's package; upstream's release is ``node_exporter``."""
    counters_csv: str = "/etc/dcgm-exporter/gpuspark-counters.csv"

    @property
    def home(self) -> str:
        """``spark_home`` without a trailing ``/``."""
        return self.spark_home.rstrip("/") or "/"

    @property
    def conf(self) -> str:
        """``$SPARK_CONF_DIR``: ``conf_dir`` or ``<spark_home>/conf``."""
        return self.conf_dir or f"{self.home.rstrip('/')}/conf"


def _unit(description: str, also: str = "", extra: str = "") -> str:
    """The ``[Unit]`` section: after the network is up (and ``also``), wanting both."""
    targets = f"network-online.target {also}".strip()
    return f"[Unit]\nDescription={description}\nAfter={targets}\nWants={targets}\n{extra}"


def _install() -> str:
    return "\n[Install]\nWantedBy=multi-user.target\n"


def _spark(header: str, description: str, p: InstallPaths, main: str, extra: str = "") -> str:
    return (
        header + _unit(description) + "\n[Service]\n"
        "Type=simple\n"
        f"User={p.user}\n"
        f"Group={p.user}\n"
        f"Environment=SPARK_HOME={p.home}\n"
        f"Environment=SPARK_CONF_DIR={p.conf}\n"
        f"ExecStart={p.home}/bin/spark-class {main}\n"
        f"{extra}"
        "Restart=on-failure\n"
        "RestartSec=10\n"
        f"SuccessExitStatus={_JVM_SIGTERM}\n"
        "LimitNOFILE=1048576\n" + _install()
    )


def _header(cluster: str, where: str) -> str:
    return (
        f"# For cluster '{cluster}', rendered by gpuspark from its spec; install on {where}.\n"
        "# Edit the spec and render again rather than editing this file.\n"
    )


def render_units(
    cluster: str, master_url: str, p: InstallPaths, node_port: int, dcgm_port: int
) -> dict[str, str]:
    """Unit file name -> content. Workers register with ``master_url``."""
    worker_extra = (
        "# NCCL registers GPU and host memory with the InfiniBand adapters: executors and\n"
        "# their training ranks inherit this limit.\n"
        "LimitMEMLOCK=infinity\n"
    )
    return {
        MASTER_UNIT: _spark(
            _header(cluster, "the master host(s)"),
            f"Spark master of cluster {cluster} (gpuspark)",
            p,
            "org.apache.spark.deploy.master.Master",
        ),
        WORKER_UNIT: _spark(
            _header(cluster, "every worker host"),
            f"Spark worker of cluster {cluster} (gpuspark)",
            p,
            f"org.apache.spark.deploy.worker.Worker {master_url}",
            worker_extra,
        ),
        HISTORY_UNIT: _spark(
            _header(cluster, "the first master host"),
            f"Spark history server of cluster {cluster} (gpuspark)",
            p,
            "org.apache.spark.deploy.history.HistoryServer",
        ),
        DCGM_UNIT: _dcgm(cluster, p, dcgm_port),
        NODE_UNIT: _node(cluster, p, node_port),
    }


def _dcgm(cluster: str, p: InstallPaths, port: int) -> str:
    return (
        _header(cluster, "every worker host")
        + "# Runs as root, as the unit NVIDIA packages with dcgm-exporter does.\n"
        + _unit(
            "NVIDIA dcgm-exporter: GPU metrics for Prometheus (gpuspark counters)",
            also="nvidia-dcgm.service",
        )
        + "\n[Service]\n"
        "Type=simple\n"
        f"ExecStart={p.dcgm_exporter} -f {p.counters_csv} -a :{port}\n"
        "Restart=on-failure\n"
        "RestartSec=10\n" + _install()
    )


def _node(cluster: str, p: InstallPaths, port: int) -> str:
    return (
        _header(cluster, "every worker host")
        + _unit(
            "Prometheus node_exporter with the InfiniBand collector (gpuspark)",
            extra="Conflicts=prometheus-node-exporter.service\n",
        )
        + "\n[Service]\n"
        "Type=simple\n"
        "DynamicUser=yes\n"
        f"ExecStart={p.node_exporter} --collector.infiniband --web.listen-address=:{port}\n"
        "Restart=on-failure\n"
        "RestartSec=10\n" + _install()
    )
