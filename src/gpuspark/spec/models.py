"""The cluster spec's models: plain data (pydantic v2, unknown keys forbidden, frozen).

The cross-field rules (:mod:`gpuspark.spec.rules`) run when a :class:`ClusterSpec` is built, so
a spec in hand is always consistent.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gpuspark.spec.base import SpecModel
from gpuspark.spec.kubernetes import KubernetesSettings, Toleration
from gpuspark.spec.rules import rule_violations
from gpuspark.spec.values import flatten_table

__all__ = [
    "DEFAULT_DISCOVERY_SCRIPT",
    "DEFAULT_LOCAL_DIR",
    "MANAGED_CONF",
    "NAME_RULE",
    "ClusterSpec",
    "ComputeNetwork",
    "KubernetesSettings",
    "Monitoring",
    "Networks",
    "NodeGroup",
    "RuleViolations",
    "SparkSettings",
    "StorageNetwork",
    "StorageSettings",
    "Team",
    "Toleration",
    "Training",
]

DEFAULT_DISCOVERY_SCRIPT = "/opt/gpuspark/getGpusResources.sh"

_NAME = r"^[A-Za-z][A-Za-z0-9_.-]*$"
NAME_RULE = (
    "must start with an ASCII letter (A-Z, a-z) and use only ASCII letters, digits, '_', '-' "
    "and '.': names become YARN queues and Kubernetes objects, whose names are ASCII"
)
"""What :data:`_NAME` asks of a name (cluster, node group, team), and why: ASCII only, the
characters every renderer can carry (``radiología`` is refused, not mangled)."""
_MEMORY = re.compile(r"^[1-9][0-9]*[kmgtp]?$", re.IGNORECASE)
_HOST_PORT = r"[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}"
_MASTER_FORMS = (
    re.compile(r"^local-cluster$"),
    re.compile(r"^local(\[([1-9][0-9]*|\*)\])?$"),
    re.compile(rf"^spark://{_HOST_PORT}(,{_HOST_PORT})*$"),
    re.compile(r"^yarn$"),
    re.compile(r"^k8s://(https?://)?[A-Za-z0-9_.\-]+(:[0-9]{1,5})?/?$"),
)
_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
"""A Linux interface name (``IFNAMSIZ`` is 16 with the final NUL)."""
_HCA = re.compile(r"^[A-Za-z0-9_.-]+(:[1-9][0-9]*)?$")
DEFAULT_LOCAL_DIR = "/var/lib/spark/local"
"""A node group's ``local_dirs`` when the spec names none."""
MAX_GID_INDEX = 1023
"""An upper bound on ``roce_gid_index``, to catch typos."""

# Spark properties owned by typed fields: setting them in [spark.conf] would bypass the checks.
MANAGED_CONF = {
    "spark.executor.resource.gpu.amount": "executor_gpus",
    "spark.task.resource.gpu.amount": "task_gpu_amount",
    "spark.executor.cores": "executor_cores",
    "spark.task.cpus": "task_cpus",
    "spark.executor.memory": "executor_memory",
    "spark.dynamicAllocation.enabled": "dynamic_allocation",
    "spark.master": "master",
}


_Model = SpecModel


Name = Annotated[str, Field(pattern=_NAME, max_length=64)]
PositiveInt = Annotated[int, Field(gt=0)]
Positive = Annotated[float, Field(gt=0)]
Percent = Annotated[float, Field(gt=0, le=100)]
BelowFull = Annotated[float, Field(gt=0, lt=100)]
"""A threshold on a share that alerts when the share is above it: at 100 the alert could never
fire (a share never exceeds 100), so it must be below."""


class NodeGroup(_Model):
    """A group of identical GPU servers."""

    name: Name
    """Group name, e.g. ``dgx-a100``."""
    hosts: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    """Host names of the servers in the group."""
    gpus_per_node: PositiveInt
    gpu_model: Annotated[str, Field(min_length=1)]
    """GPU model as ``nvidia-smi`` names it, e.g. ``A100-SXM4-80GB``."""
    gpu_memory_gb: Positive
    """Memory of one GPU, GB."""
    nvlink_gbytes_per_s: Annotated[float, Field(ge=0)] = 0.0
    """NVLink bandwidth per GPU, gigaBYTES per second as NVIDIA quotes it (A100: 600); 0: none."""
    cpu_cores: PositiveInt
    """Physical CPU cores per server (all sockets)."""
    ram_gb: Positive
    """Host memory per server, GB."""
    nvme_tb: Annotated[float, Field(ge=0)] = 0.0
    """Local NVMe scratch per server, TB."""
    local_dirs: Annotated[list[str], Field(min_length=1)] = Field(
        default_factory=lambda: [DEFAULT_LOCAL_DIR]
    )
    """Spark's scratch on each server (``SPARK_LOCAL_DIRS``: shuffle, spill, the shard cache),
    absolute paths: the NVMe mount points, one per drive or RAID (DGX: ``/raid/spark``).
    Default: ``/var/lib/spark/local``."""
    addresses: list[str] | None = None
    """The IP address of each host on the cluster network, in the order of ``hosts``: what
    its Spark daemons bind to (``SPARK_LOCAL_IP``) and what the rendered firewall lets in.
    Default: the host names, resolved by each tool."""
    socket_ifname: str | None = None
    """The network interface NCCL's and gloo's sockets use (``NCCL_SOCKET_IFNAME``,
    ``GLOO_SOCKET_IFNAME``), e.g. ``ens1f0`` or ``bond0``; several as ``eth0,eth1``. Exact
    names: gpuspark gives NCCL its exact-match form (``=eth0``). Default: NCCL and gloo pick."""
    ib_hca: list[str] | None = None
    """The InfiniBand/RoCE adapters NCCL uses (``NCCL_IB_HCA``, matched exactly), as ``ibstat``
    names them, each with an optional port: ``["mlx5_0", "mlx5_1:1"]`` or NCCL's own
    ``"mlx5_0:1,mlx5_1:1"``. Default: NCCL uses every adapter it finds."""
    roce_gid_index: Annotated[int, Field(ge=0, le=MAX_GID_INDEX)] | None = None
    """``NCCL_IB_GID_INDEX``: the GID table entry of the HCA ports NCCL uses on RoCE (RoCE v2
    over IPv4 is often 3; ``show_gids`` lists them). Default: NCCL's choice."""
    ib_rate_gbps: Positive | None = None
    """The rate ``ibstat`` should show for each port in ``ib_hca`` (``Rate: 200``), Gb/s;
    ``gpuspark doctor`` warns when a port is slower. Default: ``networks.compute.gbps``."""

    @property
    def gpus(self) -> int:
        """GPUs in the whole group."""
        return len(self.hosts) * self.gpus_per_node

    @field_validator("local_dirs")
    @classmethod
    def _local_dirs_form(cls, value: list[str]) -> list[str]:
        for path in value:
            if not path.startswith("/") or any(c.isspace() or c == "," for c in path):
                raise ValueError(
                    f"{path!r} must be an absolute path on the servers (no spaces or commas)"
                )
        if len({d.rstrip("/") or "/" for d in value}) != len(value):
            raise ValueError("lists a directory twice")
        return value

    @field_validator("addresses")
    @classmethod
    def _addresses_form(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        hosts = info.data.get("hosts")
        if value is not None and hosts is not None and len(value) != len(hosts):
            raise ValueError(
                f"has {len(value)} entries for {len(hosts)} hosts: give one address per host,"
                " in the order of hosts"
            )
        for item in value or []:
            try:
                ipaddress.ip_address(item)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address such as 10.0.0.11") from None
        if value is not None and len(set(value)) != len(value):
            raise ValueError("lists an address twice")
        return value

    @field_validator("socket_ifname")
    @classmethod
    def _ifname_form(cls, value: str | None) -> str | None:
        if value is not None and not all(_IFNAME.match(n) for n in value.split(",")):
            raise ValueError(
                "must name interfaces exactly, e.g. 'ens1f0' or 'eth0,eth1' (up to 15 letters,"
                " digits, '_', '.', '-' each; no NCCL '^'/'=' prefix: gpuspark adds '=')"
            )
        return value

    @field_validator("ib_hca", mode="before")
    @classmethod
    def _hca_list(cls, value: Any) -> Any:
        if isinstance(value, str):  # NCCL's own form, "=mlx5_0:1,mlx5_1:1" or without the "="
            return [item.strip() for item in value.removeprefix("=").split(",")]
        return value

    @field_validator("ib_hca")
    @classmethod
    def _hca_form(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("must name at least one HCA, e.g. ['mlx5_0']; leave it out for all")
        bad = [item for item in value if not _HCA.match(item)]
        if bad:
            raise ValueError(
                f"{bad[0]!r} is not an HCA as ibstat names it, with an optional"
                " port: e.g. 'mlx5_0' or 'mlx5_0:1'"
            )
        if len(set(value)) != len(value):
            raise ValueError("lists an HCA twice")
        return value


class ComputeNetwork(_Model):
    """The network the GPUs talk over (gradient all-reduce, shuffle)."""

    kind: Literal["infiniband", "ethernet"]
    gbps: Positive
    """Link speed per node, gigaBITS per second."""
    latency_us: Positive
    """One-way latency, microseconds."""


class StorageNetwork(_Model):
    """The network to the shared storage."""

    kind: Literal["infiniband", "ethernet"] = "ethernet"
    gbps: Positive
    """Link speed per node, gigaBITS per second."""


class Networks(_Model):
    """Compute and storage networks."""

    compute: ComputeNetwork
    storage: StorageNetwork


def _path_or_url(value: str) -> str:
    """``value`` when it is a local path or a ``scheme://`` URL; a ``ValueError`` otherwise."""
    if "://" in value and not _URL_SCHEME.match(value):
        raise ValueError("must be a local path or a URL like hdfs://host/path or s3a://bucket/")
    return value


class StorageSettings(_Model):
    """Where datasets, checkpoints and Spark event logs live."""

    root: Annotated[str, Field(min_length=1)] = "gpuspark-data"
    """A local path or a URL (``hdfs://``, ``s3a://``, ``gs://``, ``abfs://``, ``file://``)."""

    @field_validator("root")
    @classmethod
    def _root_form(cls, value: str) -> str:
        return _path_or_url(value)


class SparkSettings(_Model):
    """How Spark applications are placed on the cluster."""

    master: str = "local-cluster"
    """``local-cluster`` (the embedded cluster), ``spark://host:port``, ``yarn``, ``k8s://…``."""
    executor_gpus: PositiveInt = 1
    """``spark.executor.resource.gpu.amount``."""
    task_gpu_amount: Positive = 0.25
    """``spark.task.resource.gpu.amount``: a fraction in (0, 1] or a whole number."""
    executor_cores: PositiveInt = 4
    task_cpus: PositiveInt = 1
    executor_memory: str = "4g"
    """JVM memory string, e.g. ``4g`` or ``512m``."""
    dynamic_allocation: bool = True
    """On for data preparation; training (barrier stages) turns it off per application."""
    event_log: bool = True
    event_log_dir: str | None = None
    """Default: ``<storage.root>/spark-events``."""
    discovery_script: str = DEFAULT_DISCOVERY_SCRIPT
    """Where ``getGpusResources.sh`` is installed on every node."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Extra Spark properties, applied last. Quote dotted keys or nest tables; both work."""

    @field_validator("master")
    @classmethod
    def _master_form(cls, value: str) -> str:
        if not any(form.match(value) for form in _MASTER_FORMS):
            raise ValueError(
                "must be local-cluster, local[N], spark://host:port, yarn or k8s://https://host:port"
            )
        return value

    @field_validator("task_gpu_amount")
    @classmethod
    def _task_amount(cls, value: float) -> float:
        # Spark's rule for custom resources: (0, 1] shares one address, above 1 whole addresses.
        if value > 1 and not float(value).is_integer():
            raise ValueError("must be a fraction in (0, 1] or a whole number, e.g. 0.25 or 2")
        return value

    @field_validator("executor_memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        if not _MEMORY.match(value):
            raise ValueError("must be a JVM memory size like 512m, 4g or 1t")
        return value

    @field_validator("conf", mode="before")
    @classmethod
    def _flatten_conf(cls, value: Any) -> Any:
        return flatten_table(value) if isinstance(value, dict) else value


class Team(_Model):
    """A team sharing the cluster: a guaranteed share, a ceiling, a priority."""

    name: Name
    guaranteed_gpus: Annotated[int, Field(ge=0)]
    max_gpus: PositiveInt
    priority: Annotated[int, Field(ge=0)] = 0
    """Higher runs first when GPUs are contended."""
    members: list[str] = Field(default_factory=list)
    group: str | None = None
    """A Unix group whose members may read the team's data: directories a job of the team
    creates for its output are owned by this group, mode ``2750`` (setgid, so what is written
    inside inherits the group; the group reads and enters, others nothing). Local and shared
    file-system paths only; on HDFS or object stores use the store's own permissions. The
    group must exist on the machine that starts the job. None: plain directories."""
    root: Annotated[str, Field(min_length=1)] | None = None
    """The team's dataset root, a local path or a URL. Default: ``<storage.root>/teams/<name>``
    (see :func:`gpuspark.spec.team_root`); a relative path is relative to the directory a job
    starts in, as ``[storage] root`` is. Jobs of other teams may not write inside it (checked
    before a job starts); two teams' roots may neither be the same nor lie inside each other."""

    @field_validator("group")
    @classmethod
    def _group_form(cls, value: str | None) -> str | None:
        if value is not None and (
            not value or value != value.strip() or any(c in value for c in ":/\n")
        ):
            raise ValueError(
                "must be a Unix group name such as 'radiology' (no ':', '/', newline or"
                " surrounding spaces)"
            )
        return value

    @field_validator("root")
    @classmethod
    def _team_root_form(cls, value: str | None) -> str | None:
        return value if value is None else _path_or_url(value)


class Monitoring(_Model):
    """Alert thresholds for the rendered Prometheus rules and ``gpuspark doctor``."""

    gpu_memory_pct: BelowFull = 95.0
    """Alert when a GPU's framebuffer is fuller than this."""
    gpu_temp_c: Annotated[float, Field(gt=0, le=120)] = 85.0
    """Alert when a GPU runs hotter than this."""
    gpu_util_low_pct: Percent = 10.0
    """A GPU below this utilisation counts as idle."""
    idle_allocated_minutes: Positive = 30.0
    """Alert when an allocated GPU stays idle this long."""
    data_wait_pct: BelowFull = 25.0
    """Alert when a training step spends more than this share waiting for data."""
    nvme_free_pct: Percent = 10.0
    """Alert when local NVMe scratch has less free space than this."""
    executor_lost_per_hour: Annotated[int, Field(ge=1)] = 3
    """Alert when an application loses more executors than this in an hour."""
    stall_minutes: Positive = 10.0
    """Alert when a running training run finishes no step for this long."""
    scrape_interval_s: Annotated[int, Field(ge=1, le=300)] = 15
    """Prometheus scrape interval in the rendered ``prometheus.yml``."""
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 9700
    """Base port of the training ranks' ``/metrics`` (rank's port = base + local rank); 0: off."""
    metrics_host: Annotated[str, Field(min_length=1)] = "127.0.0.1"
    """Address the ranks' ``/metrics`` bind to; ``0.0.0.0`` for a Prometheus on another host."""
    targets_dir: str | None = None
    """Prometheus ``file_sd_configs`` directory for runs (default ``~/.gpuspark/monitor/targets``,
    or ``$GPUSPARK_MONITOR_DIR/targets``); on a real cluster a path Prometheus can read."""
    runbook_url: Annotated[str, Field(min_length=1)] = "docs/runbook.md"
    """Where operators read the runbook; alerts link ``<runbook_url>#<alert section>``."""


class Training(_Model):
    """How training processes (the ranks of ``gpuspark launch`` / ``train``) behave."""

    collective_timeout_s: Positive = 600.0
    """Seconds a rank waits in one collective (all-reduce, barrier, ...) for a peer before it
    fails: the default of ``init_process_group(timeout=...)`` in every rank (gloo's own default
    is 30 minutes). A host cut off mid-training ends the launch within about this long."""


class Security(_Model):
    """``[security]``: Spark authentication, encryption and UI ACLs (off by default; on with
    ``enabled = true`` or ``--secure``). See :mod:`gpuspark.cluster.security`."""

    enabled: bool = False
    """``spark.authenticate`` with a shared secret, plus what is switched on below."""
    secret_file: Annotated[str, Field(min_length=1)] = "~/.gpuspark/spark-secret"
    """The shared secret (mode 0600; generated when missing). Every node and every user who
    submits applications needs the same secret at this path."""
    network_crypto: bool = True
    """``spark.network.crypto.enabled``: AES encryption of all RPC traffic."""
    io_encryption: bool = True
    """``spark.io.encryption.enabled``: shuffle and spill files encrypted on local disks."""
    acls: bool = True
    """UI ACLs: admins view and modify, the teams' members view (``spark.acls.enable``)."""
    admins: list[str] = Field(default_factory=list)
    """Users with view and modify rights on every application (``spark.admin.acls``)."""
    ui_keystore: str | None = None
    """A keystore on every node: the UIs serve HTTPS (``spark.ssl.ui.*``). Its password goes
    in ``spark.ssl.ui.keyStorePassword`` in the nodes' private conf, not in the spec."""
    ui_keystore_type: Annotated[str, Field(min_length=1)] = "JKS"


class ClusterSpec(_Model):
    """A whole cluster: see ``gpuspark init`` for a commented example."""

    name: Name
    nodes: Annotated[list[NodeGroup], Field(min_length=1)]
    networks: Networks
    storage: StorageSettings = Field(default_factory=StorageSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    teams: list[Team] = Field(default_factory=list)
    monitoring: Monitoring = Field(default_factory=Monitoring)
    training: Training = Field(default_factory=Training)
    security: Security = Field(default_factory=Security)
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)

    @property
    def total_gpus(self) -> int:
        """GPUs in all node groups."""
        return sum(group.gpus for group in self.nodes)

    @property
    def total_hosts(self) -> int:
        """Servers in all node groups."""
        return sum(len(group.hosts) for group in self.nodes)

    @property
    def event_log_dir(self) -> str:
        """Where Spark writes event logs (``spark.event_log_dir`` or under the storage root)."""
        return self.spark.event_log_dir or f"{self.storage.root.rstrip('/')}/spark-events"

    @model_validator(mode="after")
    def _rules(self) -> ClusterSpec:

        problems = rule_violations(self)
        if problems:
            raise RuleViolations(problems)
        return self


class RuleViolations(ValueError):
    """Cross-field problems; each is a complete ``path=value what-is-wrong`` line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems
