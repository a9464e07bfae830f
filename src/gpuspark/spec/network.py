"""The network settings of one host, from its node group: which interface NCCL's and gloo's
sockets use, which InfiniBand/RoCE adapters NCCL uses, the RoCE GID index.

Pure functions of the spec: the launcher puts :func:`network_env` into every rank's
environment, ``render standalone`` into each host's ``spark-env.sh``, and ``gpuspark doctor``
checks the same fields against the node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuspark.spec.models import ClusterSpec, NodeGroup

__all__ = [
    "NETWORK_ENV_NAMES",
    "group_network_env",
    "hca_ports",
    "host_address",
    "network_env",
    "node_group_for",
]

NETWORK_ENV_NAMES = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
)
"""Every variable :func:`network_env` may set."""


def _short(name: str) -> str:
    return name.split(".", 1)[0].lower()


def node_group_for(spec: ClusterSpec, host: str) -> NodeGroup | None:
    """The node group that lists ``host``: by its name as the spec writes it, by its short
    name (``dgx01.example.com`` is ``dgx01``, case ignored) or by one of the group's
    ``addresses``; ``None`` when no group lists it (the embedded cluster's hosts, a laptop)."""
    for group in spec.nodes:
        if host in group.hosts or host in (group.addresses or []):
            return group
    for group in spec.nodes:
        if any(_short(h) == _short(host) for h in group.hosts):
            return group
    return None


def host_address(group: NodeGroup, host: str) -> str:
    """What ``host`` of ``group`` binds to: its entry in ``addresses``, else its name."""
    if group.addresses is None or host not in group.hosts:
        return host
    return group.addresses[group.hosts.index(host)]


def hca_ports(group: NodeGroup) -> list[tuple[str, int | None]]:
    """``ib_hca`` as (adapter, port or ``None`` for every port) pairs."""
    pairs: list[tuple[str, int | None]] = []
    for item in group.ib_hca or []:
        name, _, port = item.partition(":")
        pairs.append((name, int(port) if port else None))
    return pairs


def group_network_env(group: NodeGroup) -> dict[str, str]:
    """The NCCL/gloo variables of ``group``'s network fields; only those the spec sets.

    NCCL matches names by prefix (``mlx5_1`` would also take ``mlx5_10``), so the lists get
    NCCL's exact-match ``=`` form; gloo takes exact names already."""
    env: dict[str, str] = {}
    if group.socket_ifname is not None:
        env["NCCL_SOCKET_IFNAME"] = "=" + group.socket_ifname
        env["GLOO_SOCKET_IFNAME"] = group.socket_ifname
    if group.ib_hca is not None:
        env["NCCL_IB_HCA"] = "=" + ",".join(group.ib_hca)
    if group.roce_gid_index is not None:
        env["NCCL_IB_GID_INDEX"] = str(group.roce_gid_index)
    return env


def network_env(spec: ClusterSpec, host: str) -> dict[str, str]:
    """The environment variables of ``host``'s node group (see :func:`group_network_env`);
    empty when no group lists the host (:func:`node_group_for`) or its group sets none."""
    group = node_group_for(spec, host)
    return {} if group is None else group_network_env(group)


def hosts_network_env(spec: ClusterSpec) -> dict[str, dict[str, str]]:
    """:func:`network_env` of every host the spec lists, keyed by each of its names: as the
    spec writes it, its short name (lower case) and its address; only hosts whose group sets
    a network field. What the launcher ships to its tasks, which look themselves up."""
    out: dict[str, dict[str, str]] = {}
    for group in spec.nodes:
        env = group_network_env(group)
        if not env:
            continue
        for host in group.hosts:
            for key in (host, _short(host), host_address(group, host)):
                out[key] = env
    return out
