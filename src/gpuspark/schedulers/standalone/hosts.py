"""The hosts of a Spark standalone cluster from its spec: the master host(s) of
``spark.master`` and the node groups' GPU servers, each with its bind address."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuspark.errors import SpecError
from gpuspark.spec.network import host_address, node_group_for

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec, NodeGroup

__all__ = ["HostPlan", "masters", "standalone_hosts"]

_HOST_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")


@dataclass(frozen=True)
class HostPlan:
    """One host of the cluster and what runs on it."""

    host: str
    address: str
    """What its daemons bind to: the spec's address for it, else its name."""
    group: NodeGroup | None
    """Its node group; ``None`` for a master host that is not a GPU server."""
    master: tuple[str, int] | None = None
    """(host as ``spark.master`` names it, port) when a Spark master runs here."""
    history: bool = False
    """The history server runs here (the first master host)."""


def masters(spec: ClusterSpec) -> list[tuple[str, int]]:
    """(host, port) of each master in ``spark.master`` (``spark://h1:7077,h2:7077``); a
    :class:`SpecError` for a master that is not a standalone one."""
    master = spec.spark.master
    if not master.startswith("spark://"):
        raise SpecError(
            f"spark.master={master!r}: render standalone is for a Spark standalone cluster",
            remedy='set [spark] master = "spark://<master host>:7077" in the spec',
        )
    pairs = []
    for part in master.removeprefix("spark://").split(","):
        host, _, port = part.rpartition(":")
        pairs.append((host.strip("[]"), int(port)))
    return pairs


def _node_host(spec: ClusterSpec, host: str) -> str | None:
    """The ``hosts`` entry that ``host`` (a name or an address in the master URL) stands for."""
    group = node_group_for(spec, host)
    if group is None:
        return None
    for i, name in enumerate(group.hosts):
        if host == name or (group.addresses and group.addresses[i] == host):
            return name
    short = host.split(".", 1)[0].lower()
    return next(h for h in group.hosts if h.split(".", 1)[0].lower() == short)


def standalone_hosts(spec: ClusterSpec) -> list[HostPlan]:
    """Every host: the master hosts of ``spark.master`` first (those that are not GPU servers),
    then the node groups' hosts, in the spec's order."""
    by_host: dict[str, tuple[str, int]] = {}
    for host, port in masters(spec):
        by_host.setdefault(_node_host(spec, host) or host, (host, port))
    first = next(iter(by_host))
    plans = [
        HostPlan(host, host, None, master, host == first)
        for host, master in by_host.items()
        if node_group_for(spec, host) is None
    ]
    for group in spec.nodes:
        for host in group.hosts:
            plans.append(
                HostPlan(host, host_address(group, host), group, by_host.get(host), host == first)
            )
    for plan in plans:
        if not _HOST_NAME.match(plan.host) or plan.host in (".", ".."):
            raise SpecError(
                f"host {plan.host!r} cannot name a folder",
                remedy="write host names as the network knows them, e.g. dgx01",
            )
    return plans
