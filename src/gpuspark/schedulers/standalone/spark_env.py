"""``spark-env.sh`` of each host: what differs per host of a Spark standalone GPU cluster
(bind address, the worker's cores, memory, GPUs and discovery script, local dirs, ports, the
network variables of NCCL and gloo). ``bin/spark-class`` sources it from ``$SPARK_CONF_DIR``
with ``set -a``, so every line exports."""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING

from gpuspark.schedulers.standalone.firewall import WORKER_PORT, WORKER_UI_PORT, conf_port
from gpuspark.schedulers.standalone.hosts import HostPlan
from gpuspark.schedulers.standalone.units import InstallPaths
from gpuspark.spec.network import group_network_env

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec, NodeGroup

__all__ = ["OS_SHARE", "spark_env", "worker_memory_mib"]

OS_SHARE = 0.1
"""Share of a server's memory left to the operating system, the page cache and the memory
outside executors' heaps; Spark's standalone worker counts heaps only."""


def worker_memory_mib(group: NodeGroup) -> int:
    """``SPARK_WORKER_MEMORY`` in MiB: the server's memory less :data:`OS_SHARE`."""
    return max(1, math.floor(group.ram_gb * 1024 * (1 - OS_SHARE)))


def _memory(mib: int) -> str:
    return f"{mib // 1024}g" if mib % 1024 == 0 or mib >= 10 * 1024 else f"{mib}m"


def _export(name: str, value: str, comment: str = "") -> str:
    quoted = shlex.quote(value)
    if quoted == value and value.startswith("="):
        quoted = f"'{value}'"
    line = f"export {name}={quoted}"
    return f"{line:<48} # {comment}\n" if comment else line + "\n"


def _worker_lines(spec: ClusterSpec, group: NodeGroup, script: str) -> list[str]:
    opts = (
        f"-Dspark.worker.resource.gpu.amount={group.gpus_per_node}"
        f" -Dspark.worker.resource.gpu.discoveryScript={script}"
    )
    dirs = group.local_dirs
    ui_port = conf_port(spec, "spark.worker.ui.port", WORKER_UI_PORT)
    return [
        f"\n# Worker: node group '{group.name}'\n",
        _export("SPARK_WORKER_CORES", str(group.cpu_cores), "cpu_cores"),
        _export("SPARK_WORKER_MEMORY", _memory(worker_memory_mib(group)), "ram_gb less 10 %"),
        _export("SPARK_WORKER_PORT", str(WORKER_PORT)),
        _export("SPARK_WORKER_WEBUI_PORT", str(ui_port)),
        _export("SPARK_WORKER_OPTS", opts),
        _export("SPARK_LOCAL_DIRS", ",".join(dirs), "local_dirs: shuffle, spill, cache"),
        _export("SPARK_WORKER_DIR", f"{dirs[0].rstrip('/')}/work", "applications' logs"),
    ]


def _master_lines(spec: ClusterSpec, master: tuple[str, int], history: bool) -> list[str]:
    lines = [
        "\n# Master\n",
        _export("SPARK_MASTER_HOST", master[0], "as spark.master names it"),
        _export("SPARK_MASTER_PORT", str(master[1])),
    ]
    if history:
        opts = f"-Dspark.history.fs.logDirectory={spec.event_log_dir}"
        lines += ["\n# History server\n", _export("SPARK_HISTORY_OPTS", opts)]
    return lines


def spark_env(spec: ClusterSpec, plan: HostPlan, paths: InstallPaths) -> str:
    """``spark-env.sh`` of one host (sourced by ``bin/spark-class`` from ``$SPARK_CONF_DIR``)."""
    group = plan.group
    where = f"node group '{group.name}'" if group else "master only"
    lines = [
        f"# spark-env.sh of {plan.host} ({where}) in cluster '{spec.name}', rendered by gpuspark\n",
        "# from its spec. Edit the spec and render again rather than editing this file.\n",
        f"# Install as {paths.conf}/spark-env.sh on {plan.host}.\n\n",
        _export("SPARK_LOCAL_IP", plan.address, "bind address of the daemons and executors"),
    ]
    if plan.master is not None:
        lines += _master_lines(spec, plan.master, plan.history)
    if group is not None:
        lines += _worker_lines(spec, group, paths.discovery_script or spec.spark.discovery_script)
        env = group_network_env(group)
        if env:
            lines.append("\n# Network for NCCL and gloo (inherited by executors and their ranks)\n")
            lines += [_export(name, value) for name, value in env.items()]
    return "".join(lines)
