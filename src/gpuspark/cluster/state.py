"""What the embedded cluster records (``cluster.json``) and what ``status`` reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ClusterState", "ClusterStatus", "WorkerState", "WorkerStatus"]


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

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterState:
        workers = [WorkerState(**w) for w in data.pop("workers", [])]
        return cls(workers=workers, **data)


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
