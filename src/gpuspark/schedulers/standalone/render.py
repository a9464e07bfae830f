"""``gpuspark render standalone``: every file a bare-metal Spark standalone GPU cluster needs,
from its spec.

One folder per host (``hosts/<host>/spark-env.sh``: bind address, worker cores, memory, GPUs
and discovery script, local dirs, NCCL's and gloo's network), the cluster's ``workers`` file
and ``$SPARK_CONF_DIR`` files, systemd units (:mod:`.units`), dcgm-exporter's counters
(:mod:`.dcgm`) and the ports between the hosts as nftables (:mod:`.firewall`).

What lives above the schedulers (the Spark configuration of :mod:`gpuspark.cluster.conf`, the
DCGM fields of the monitoring rules and dashboards, the exporters' ports) comes in as
:class:`Inputs`; the output is deterministic and printable before anything is written.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from gpuspark.errors import SpecError
from gpuspark.schedulers.shares import executor_memory_mib
from gpuspark.schedulers.standalone.dcgm import counters_csv
from gpuspark.schedulers.standalone.firewall import cluster_ports, nftables_file
from gpuspark.schedulers.standalone.hosts import HostPlan, masters, standalone_hosts
from gpuspark.schedulers.standalone.spark_env import spark_env, worker_memory_mib
from gpuspark.schedulers.standalone.units import (
    DCGM_UNIT,
    HISTORY_UNIT,
    MASTER_UNIT,
    NODE_UNIT,
    WORKER_UNIT,
    InstallPaths,
    render_units,
)

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = [
    "NFT_FILE",
    "WORKERS_FILE",
    "HostPlan",
    "Inputs",
    "InstallPaths",
    "Rendered",
    "render_standalone",
    "spark_env",
    "standalone_hosts",
    "worker_memory_mib",
]

WORKERS_FILE = "workers"
NFT_FILE = "nftables/gpuspark.nft"


@dataclass(frozen=True)
class Inputs:
    """What the layers above the schedulers give the renderer."""

    conf_files: Mapping[str, str]
    """``$SPARK_CONF_DIR`` files: :func:`gpuspark.cluster.conf.render_spark`."""
    dcgm_fields: frozenset[str]
    """Every ``DCGM_FI_*`` name the rendered alert rules and dashboards read."""
    dcgm_port: int
    node_exporter_port: int


@dataclass
class Rendered:
    """The files of ``render standalone``: relative path -> content, the paths each host
    needs, and what to tell the administrator."""

    files: dict[str, str]
    hosts: dict[str, list[str]]
    notes: list[str] = field(default_factory=list)


def _heap_mib(text: str) -> int:
    """A ``spark.executor.memory`` (checked by the spec: digits and one unit) in MiB."""
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2, "p": 1024**3}
    unit = text[-1].lower() if text[-1].isalpha() else "m"
    return max(1, int(int(text.rstrip("kmgtpKMGTP")) * units[unit]))


def _workers_file(spec: ClusterSpec) -> str:
    hosts = [h for g in spec.nodes for h in g.hosts]
    return (
        f"# Spark workers of cluster '{spec.name}', rendered by gpuspark from its spec.\n"
        + "".join(f"{h}\n" for h in hosts)
    )


def _notes(spec: ClusterSpec, plans: list[HostPlan]) -> list[str]:
    notes = [
        f"nodes[{i}] ({g.name}) gives no addresses: SPARK_LOCAL_IP and the firewall use the host"
        " names (nft resolves them when it loads the file); set addresses = [...] to pin them"
        for i, g in enumerate(spec.nodes)
        if g.addresses is None
    ]
    s = spec.spark
    each = executor_memory_mib(s.executor_memory, s.conf.get("spark.executor.memoryOverhead"))
    for g in spec.nodes:
        by_gpu = g.gpus_per_node // s.executor_gpus
        by_memory = worker_memory_mib(g) // _heap_mib(s.executor_memory)
        if by_memory < by_gpu:
            notes.append(
                f"node group {g.name}: SPARK_WORKER_MEMORY holds {by_memory} executors of"
                f" {s.executor_memory}, fewer than the {by_gpu} its GPUs allow"
            )
        elif by_gpu * each > g.ram_gb * 1024:
            notes.append(
                f"node group {g.name}: {by_gpu} executors of {each} MiB (heap and overhead)"
                f" need more than its {g.ram_gb:g} GB of memory"
            )
    if not s.event_log:
        notes.append("spark.event_log is off: the history server will list no application")
    notes += [
        f"{p.host} is a master host outside [[nodes]]: its spark-env.sh holds master settings"
        for p in plans
        if p.group is None
    ]
    return notes


def _allowed(allow: Sequence[str]) -> list[str]:
    for item in allow:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise SpecError(
                f"--allow {item!r} is not an address or network",
                remedy="give an IP address or a network such as 192.0.2.10 or 10.1.0.0/16",
            ) from None
    return list(dict.fromkeys(allow))


def render_standalone(
    spec: ClusterSpec,
    inputs: Inputs,
    paths: InstallPaths | None = None,
    allow: Sequence[str] = (),
) -> Rendered:
    """Every file of ``gpuspark render standalone`` for ``spec`` (a ``spark://`` master);
    ``allow``: addresses or networks besides the cluster's hosts that the firewall lets in
    (the Prometheus server, the admins' network)."""
    paths = paths or InstallPaths()
    extra = _allowed(allow)
    plans = standalone_hosts(spec)
    master_list = masters(spec)
    units = render_units(
        spec.name, spec.spark.master, paths, inputs.node_exporter_port, inputs.dcgm_port
    )
    ports = cluster_ports(spec, master_list, inputs.dcgm_port, inputs.node_exporter_port)
    counters = f"dcgm-exporter/{PurePosixPath(paths.counters_csv).name}"
    files = dict(inputs.conf_files)
    files[WORKERS_FILE] = _workers_file(spec)
    files[counters] = counters_csv(spec.name, inputs.dcgm_fields)
    sources = list(dict.fromkeys([p.address for p in plans] + extra))
    files[NFT_FILE] = nftables_file(spec.name, sources, ports)
    files.update({f"systemd/{name}": text for name, text in units.items()})
    hosts: dict[str, list[str]] = {}
    for plan in plans:
        env = f"hosts/{plan.host}/spark-env.sh"
        files[env] = spark_env(spec, plan, paths)
        hosts[plan.host] = [env, *inputs.conf_files, WORKERS_FILE, NFT_FILE]
        hosts[plan.host] += [f"systemd/{u}" for u in _host_units(plan)]
        if plan.group is not None:
            hosts[plan.host].append(counters)
    return Rendered(files, hosts, _notes(spec, plans))


def _host_units(plan: HostPlan) -> list[str]:
    units = [MASTER_UNIT] if plan.master is not None else []
    units += [HISTORY_UNIT] if plan.history else []
    if plan.group is not None:
        units += [WORKER_UNIT, DCGM_UNIT, NODE_UNIT]
    return units
