"""The ports a Spark standalone GPU cluster's hosts open to each other, as an nftables file.

Its own table (``inet gpuspark``) turns every source but the cluster's hosts away from the
named ports and leaves all other traffic to the host's own rules. Its ``define``s name the
hosts and ports, so a host whose firewall drops by default can ``include`` the file and
accept ``$gpuspark_tcp`` from ``$gpuspark_hosts_v4`` in its own chain.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuspark.schedulers.standalone import MASTER_UI_PORT

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = [
    "EPHEMERAL_PORTS",
    "HISTORY_UI_PORT",
    "RANK_PORT_TRIES",
    "WORKER_PORT",
    "WORKER_UI_PORT",
    "Port",
    "cluster_ports",
    "conf_port",
    "nftables_file",
]

WORKER_PORT = 7078
"""``SPARK_WORKER_PORT`` of the rendered workers (Spark's default is a random port)."""
WORKER_UI_PORT = 8081
"""The worker web UI (``spark.worker.ui.port``'s default)."""
HISTORY_UI_PORT = 18080
"""The history server (``spark.history.ui.port``'s default)."""
EPHEMERAL_PORTS = (32768, 60999)
"""Linux's default ``net.ipv4.ip_local_port_range``: where torch.distributed's rendezvous, NCCL
and gloo sockets and Spark's unfixed driver and block manager ports listen."""
RANK_PORT_TRIES = 64
"""Ports a rank's ``/metrics`` tries from its preferred one (``gpuspark.monitor.exporter``)."""
_DRIVER_UI_PORT = 4040
_PORT_RETRIES = 16
_FIXABLE = ("spark.driver.port", "spark.blockManager.port", "spark.driver.blockManager.port")


@dataclass(frozen=True)
class Port:
    """A TCP port or range, and what listens there."""

    name: str
    first: int
    last: int

    @property
    def text(self) -> str:
        """nftables' form: ``7077`` or ``4040-4056``."""
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


def conf_port(spec: ClusterSpec, key: str, default: int) -> int:
    """The port ``[spark.conf]`` sets for ``key``, else ``default``."""
    value = spec.spark.conf.get(key)
    return int(value) if value is not None and value.strip().isdigit() else default


def _one(name: str, port: int) -> Port:
    return Port(name, port, port)


def _spark_ports(spec: ClusterSpec, masters: Sequence[tuple[str, int]]) -> list[Port]:
    retries = conf_port(spec, "spark.port.maxRetries", _PORT_RETRIES)
    ports = [_one(f"Spark master {host}:{port}", port) for host, port in masters]
    ports += [
        _one("Spark master web UI", conf_port(spec, "spark.master.ui.port", MASTER_UI_PORT)),
        _one("Spark worker (SPARK_WORKER_PORT)", WORKER_PORT),
        _one("Spark worker web UI", conf_port(spec, "spark.worker.ui.port", WORKER_UI_PORT)),
        _one("Spark history server", conf_port(spec, "spark.history.ui.port", HISTORY_UI_PORT)),
    ]
    driver_ui = conf_port(spec, "spark.ui.port", _DRIVER_UI_PORT)
    ports.append(Port("Spark application (driver) web UIs", driver_ui, driver_ui + retries))
    for key in _FIXABLE:
        first = conf_port(spec, key, 0)
        if first:
            ports.append(Port(f"Spark {key}", first, min(first + retries, 65535)))
    return ports


def cluster_ports(
    spec: ClusterSpec, masters: Sequence[tuple[str, int]], dcgm_port: int, node_port: int
) -> list[Port]:
    """The named ports: Spark master(s) at ``masters`` (host, port), the UIs, the worker,
    the history server, ports ``[spark.conf]`` fixes, dcgm-exporter at ``dcgm_port``,
    node_exporter at ``node_port``, the training ranks' ``/metrics``."""
    ports = _spark_ports(spec, masters)
    ports += [
        Port("dcgm-exporter", dcgm_port, dcgm_port),
        Port("node_exporter", node_port, node_port),
    ]
    base = spec.monitoring.metrics_port
    if base:
        ranks = max(g.gpus_per_node for g in spec.nodes)
        last = min(base + ranks - 1 + RANK_PORT_TRIES - 1, 65535)
        ports.append(Port("gpuspark training ranks' /metrics", base, last))
    return ports


def _merged(ports: Sequence[Port]) -> list[tuple[int, int]]:
    """The ports' ranges, sorted, overlapping and adjacent ones merged (an nftables set
    refuses overlapping elements)."""
    spans: list[tuple[int, int]] = []
    for first, last in sorted((p.first, p.last) for p in ports):
        if spans and first <= spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], max(last, spans[-1][1]))
        else:
            spans.append((first, last))
    return spans


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def _families(addresses: Sequence[str]) -> tuple[list[str], list[str]]:
    """(IPv4, IPv6) sources, addresses or networks; a host name goes with IPv4 (nftables
    resolves it on loading)."""
    v4: list[str] = []
    v6: list[str] = []
    for item in addresses:
        try:
            version = ipaddress.ip_network(item, strict=False).version
        except ValueError:
            version = 4
        (v6 if version == 6 else v4).append(item)
    return v4, v6


def _header(cluster: str) -> str:
    return f"""\
# nftables: ports between the hosts of cluster '{cluster}', rendered by gpuspark from its spec.
# Edit the spec and render again rather than editing this file.
#
# Load it on every host:  nft -f /etc/nftables.d/gpuspark.nft  (and include it from
# /etc/nftables.conf, so it is loaded at boot). Its table turns everyone but the cluster's
# hosts away from the ports below; other traffic is left to the host's own rules. An accept
# here does not undo another table's drop: a host whose firewall drops by default accepts
# $gpuspark_tcp from $gpuspark_hosts_v4 (and _v6) in its own input chain.
# Sources other than the cluster's hosts: `render standalone --allow ADDRESS|NETWORK` (the
# Prometheus server, the admins' network); else reach the web UIs through a host (ssh -L).
"""


def nftables_file(cluster: str, sources: Sequence[str], ports: Sequence[Port]) -> str:
    """The nftables file: ``sources`` (the cluster's hosts, as addresses or names, and other
    addresses or networks let in) may reach ``ports`` and the ephemeral range; every other
    source is dropped at ``ports``."""
    v4, v6 = _families(sources)
    spans = ", ".join(_span(*s) for s in _merged(ports))
    low, high = EPHEMERAL_PORTS
    lines = [_header(cluster)]
    lines += [f"#   {p.text:<11} {p.name}\n" for p in ports]
    lines.append(f"#   {low}-{high} torch.distributed, NCCL/gloo sockets, Spark's random ports\n\n")
    families = [(fam, f"gpuspark_hosts_{tag}", hosts) for fam, tag, hosts in
                (("ip", "v4", v4), ("ip6", "v6", v6)) if hosts]  # fmt: skip
    lines += [f"define {name} = {{ {', '.join(hosts)} }}\n" for _, name, hosts in families]
    lines.append(f"define gpuspark_tcp = {{ {spans}, {low}-{high} }}\n\n")
    lines.append("table inet gpuspark\ndelete table inet gpuspark\n\ntable inet gpuspark {\n")
    lines.append("    chain input {\n")
    lines.append("        type filter hook input priority filter - 10; policy accept;\n")
    lines.append('        iif "lo" accept\n        ct state established,related accept\n')
    for fam, name, _ in families:
        lines += [
            f'        {fam} saddr ${name} tcp dport {p.text} accept comment "{p.name}"\n'
            for p in ports
        ]
        lines.append(
            f"        {fam} saddr ${name} tcp dport {low}-{high} accept"
            ' comment "torch.distributed, NCCL/gloo, Spark random ports"\n'
        )
    lines.append(
        f'        tcp dport {{ {spans} }} drop comment "only the cluster\'s hosts reach these"\n'
    )
    lines.append("    }\n}\n")
    return "".join(lines)
