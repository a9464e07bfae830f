"""What the embedded cluster records (``cluster.json``) and what ``status`` reports."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuspark._util.procs import pid_alive
from gpuspark.errors import ClusterError

__all__ = [
    "ClusterState",
    "ClusterStatus",
    "ConnectState",
    "NetnsHost",
    "NetnsState",
    "WorkerState",
    "WorkerStatus",
    "read_state",
    "write_state",
]


@dataclass
class WorkerState:
    """One worker process as started by ``up``."""

    index: int
    pid: int
    port: int
    webui_port: int
    cores: int
    memory: str
    gpus: list[str]
    log: str
    host: str = ""
    """The address the worker (and its executors) bind to ("": the cluster's host)."""


@dataclass
class ConnectState:
    """The Spark Connect server started by ``up --connect``: one more child daemon, a Spark
    application on the cluster that holds its executors."""

    url: str
    """``sc://host:port`` clients connect to (no token: that stays in ``token_file``)."""
    pid: int
    port: int
    log: str
    token_file: str = ""
    """With ``--secure``: the file (mode 600) holding the token clients authenticate with."""
    log_offset: int = 0
    """Where this start's lines begin in ``log`` (earlier starts' lines come before)."""

    @property
    def alive(self) -> bool:
        """Whether the server process runs."""
        return pid_alive(self.pid)


@dataclass
class NetnsHost:
    """One host of ``up --netns``: its network namespace and its link to the bridge."""

    namespace: str
    """``gpuspark-<id>-h<i>``: where its worker, executors and ranks run."""
    veth: str
    """The veth's end on the bridge, in the root namespace (``gs-<id>-h<i>``)."""
    ifname: str
    """The veth's end inside the namespace: the spec's ``socket_ifname`` for the host."""
    address: str
    """Its address (198.18.0.0/15): ``SPARK_LOCAL_IP`` of its worker and executors."""


@dataclass
class NetnsState:
    """The network ``up --netns`` made: ``down`` removes every name listed here."""

    cluster_id: str
    bridge: str
    gateway: str
    """The bridge's address: the master's and the driver's."""
    prefix: int
    link_rate: str = ""
    """``tc`` rate of every host's link, both directions (``""``: not shaped)."""
    hosts: list[NetnsHost] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NetnsState:
        hosts = [NetnsHost(**h) for h in data.pop("hosts", [])]
        return cls(hosts=hosts, **data)


@dataclass
class ClusterState:
    """What ``up`` wrote to ``cluster.json``: enough for ``status`` and ``down``."""

    master_url: str
    host: str
    master_pid: int
    master_port: int
    webui_port: int
    gpus_simulated: bool
    workers: list[WorkerState] = field(default_factory=list)
    master_log: str = ""
    started_at: float = 0.0
    shape: dict[str, Any] = field(default_factory=dict)
    """The :class:`~gpuspark.cluster.shape.EmbeddedShape` it was started with."""
    secure: bool = False
    """Started with ``--secure``: Spark authentication and RPC encryption are on."""
    secret_file: str = ""
    """The shared secret's file (mode 600) when ``secure``."""
    hosts: int = 0
    """Distinct worker addresses (``--hosts``); 0: every worker on ``host``."""
    connect: ConnectState | None = None
    """The Spark Connect server (``--connect``), when one was started."""
    netns: NetnsState | None = None
    """The hosts' namespaces, veths and bridge (``--netns``), when made."""

    def pids(self) -> list[int]:
        """The process groups ``up`` started: the Connect server's, the workers', the master's."""
        server = [self.connect.pid] if self.connect is not None else []
        return server + [w.pid for w in self.workers] + [self.master_pid]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterState:
        workers = [WorkerState(**w) for w in data.pop("workers", [])]
        connect = data.pop("connect", None)
        server = ConnectState(**connect) if connect else None
        net = data.pop("netns", None)
        netns = NetnsState.from_json(net) if net else None
        return cls(workers=workers, connect=server, netns=netns, **data)


@dataclass
class WorkerStatus:
    """One worker as ``status`` sees it: its process and the master's view of it."""

    index: int
    pid: int
    alive: bool
    state: str
    """``ALIVE`` when registered with the master, ``DEAD`` when its process is gone."""
    cores: int
    cores_used: int
    memory: str
    gpus: list[str]
    gpus_simulated: bool
    log: str
    host: str = ""
    """The address the worker and its executors bind to: Spark's host name for them."""
    namespace: str = ""
    """Its network namespace (``--netns``; ``""``: this machine's)."""
    link_rate: str = ""
    """Its link's ``tc`` rate (``--netns``): a rate, ``unshaped``, or ``""`` without netns."""


@dataclass
class ClusterStatus:
    """The embedded cluster as ``gpuspark cluster status`` shows it."""

    running: bool
    state_dir: str
    master_url: str = ""
    web_ui: str = ""
    master_pid: int = 0
    master_alive: bool = False
    gpus_simulated: bool = False
    workers: list[WorkerStatus] = field(default_factory=list)
    active_apps: int = 0
    shape: dict[str, Any] = field(default_factory=dict)
    """The :class:`~gpuspark.cluster.shape.EmbeddedShape` it was started with, as data."""
    secure: bool = False
    """Spark authentication (shared secret in ``secret_file``) and RPC encryption on."""
    secret_file: str = ""
    connect_url: str = ""
    """The Spark Connect server's ``sc://`` URL (``""``: none was started)."""
    connect_pid: int = 0
    connect_alive: bool = False
    connect_log: str = ""
    netns: NetnsState | None = None
    """The namespace hosts' network (bridge, gateway, link rate), when ``--netns``."""

    @classmethod
    def of(
        cls,
        state: ClusterState,
        state_dir: str,
        info: dict[str, Any],
        workers: list[WorkerStatus],
    ) -> ClusterStatus:
        """The status of the cluster ``state`` records, with the master's ``/json/`` page
        ``info`` (``{}``: it did not answer) and its ``workers`` as seen now."""
        server = state.connect
        return cls(
            running=pid_alive(state.master_pid),
            state_dir=state_dir,
            master_url=state.master_url,
            web_ui=f"http://{state.host}:{state.webui_port}",
            master_pid=state.master_pid,
            master_alive=bool(info),
            gpus_simulated=state.gpus_simulated,
            workers=workers,
            active_apps=len(info.get("activeapps", [])),
            shape=state.shape,
            secure=state.secure,
            secret_file=state.secret_file,
            connect_url=server.url if server is not None else "",
            connect_pid=server.pid if server is not None else 0,
            connect_alive=server is not None and server.alive,
            connect_log=server.log if server is not None else "",
            netns=state.netns,
        )

    @property
    def alive_workers(self) -> int:
        """Workers registered with the master."""
        return sum(w.state == "ALIVE" for w in self.workers)

    @property
    def hosts(self) -> list[str]:
        """The distinct worker hosts, in worker order."""
        return list(dict.fromkeys(w.host for w in self.workers))

    @property
    def gpu_addresses(self) -> list[str]:
        """Every worker's GPU addresses."""
        return [a for w in self.workers for a in w.gpus]

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        data = asdict(self)
        data["alive_workers"] = self.alive_workers
        data["gpu_addresses"] = self.gpu_addresses
        data["hosts"] = self.hosts
        return data


def read_state(path: Path) -> ClusterState | None:
    """The state ``up`` wrote to ``path``; ``None`` when there is none."""
    try:
        return ClusterState.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise ClusterError(
            f"{path}: unreadable cluster state ({exc})",
            remedy="stop any leftover Spark processes and delete that file",
        ) from exc


def write_state(path: Path, state: ClusterState) -> None:
    """Write ``state`` to ``path`` atomically (a temporary file renamed into place)."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2))
    os.replace(tmp, path)
