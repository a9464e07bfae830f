"""The commented example spec (``gpuspark init``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gpuspark.errors import SpecError

__all__ = ["example_spec", "write_example"]


def example_spec() -> str:
    """A commented example spec: the seed's cluster of two DGX A100 servers and three teams."""
    return _EXAMPLE


def write_example(path: str | Path, *, force: bool = False) -> Path:
    """Write :func:`example_spec` to ``path`` atomically; refuse to overwrite unless ``force``."""
    path = Path(path)
    if path.exists() and not force:
        raise SpecError(f"{path} already exists", remedy="pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(_EXAMPLE)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


_EXAMPLE = """\
# gpuspark cluster spec. Check it with `gpuspark validate --spec cluster.toml`;
# render Spark's configuration with `gpuspark render spark --spec cluster.toml -o conf/`,
# a bare-metal cluster's files and services with `gpuspark render standalone`.
name = "dgx-a100"

# One [[nodes]] table per group of identical servers.
[[nodes]]
name = "dgx"
hosts = ["dgx01", "dgx02"]
gpus_per_node = 8
gpu_model = "A100-SXM4-80GB"
gpu_memory_gb = 80
nvlink_gbytes_per_s = 600    # NVLink, gigaBYTES per second per GPU (NVIDIA's figure)
cpu_cores = 128              # 2 x AMD EPYC 7763, 64 cores each
ram_gb = 2048
nvme_tb = 30                 # local NVMe scratch (data cache, shuffle)
# local_dirs = ["/raid/spark"]            # Spark's scratch on the NVMe (SPARK_LOCAL_DIRS)
# addresses = ["10.0.0.11", "10.0.0.12"]  # each host's IP: bind address, firewall sources
# socket_ifname = "ens1f0"                # NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME
# ib_hca = ["mlx5_0:1", "mlx5_1:1"]       # NCCL_IB_HCA, exact names as ibstat shows them
# roce_gid_index = 3                      # NCCL_IB_GID_INDEX (RoCE)
# ib_rate_gbps = 100                      # the Rate ibstat should show on those ports

[networks.compute]           # gradients and shuffle
kind = "infiniband"          # infiniband | ethernet
gbps = 100                   # gigaBITS per second per node (HDR100)
latency_us = 1.0

[networks.storage]
kind = "ethernet"
gbps = 25

[storage]
root = "hdfs://namenode:8020/gpuspark"   # or a local path, s3a://bucket/prefix, ...

[spark]
master = "spark://dgx01:7077"  # local-cluster (embedded) | spark://host:port | yarn | k8s://...
executor_gpus = 1              # spark.executor.resource.gpu.amount
task_gpu_amount = 0.25         # spark.task.resource.gpu.amount: 4 data tasks share a GPU
executor_cores = 16            # 16 cores / task_cpus 4 = 4 task slots = 4 GPU shares
task_cpus = 4
executor_memory = "200g"
dynamic_allocation = true      # training jobs turn it off (barrier stages need that)
discovery_script = "/opt/gpuspark/getGpusResources.sh"

[spark.conf]                   # any other Spark property, applied last
"spark.executor.memoryOverhead" = "24g"
"spark.sql.shuffle.partitions" = "512"

# Teams share the GPUs: a guaranteed share, a ceiling when others are idle, a priority.
[[teams]]
name = "radiology"
guaranteed_gpus = 8
max_gpus = 16
priority = 2
members = ["alice", "bob"]
# root = "/shared/radiology"   # its datasets; other teams' jobs may not write here
#                              # (default: <storage.root>/teams/radiology)
# group = "radiology"          # Unix group owning the team's output folders (mode 2750)

[[teams]]
name = "vision"
guaranteed_gpus = 4
max_gpus = 12
priority = 1
members = ["carol", "dan"]

[[teams]]
name = "research"
guaranteed_gpus = 4
max_gpus = 8
priority = 0
members = ["erin"]

[monitoring]                   # alert thresholds
gpu_memory_pct = 95
gpu_temp_c = 85
gpu_util_low_pct = 10
idle_allocated_minutes = 30
data_wait_pct = 25
nvme_free_pct = 10
executor_lost_per_hour = 3
stall_minutes = 10             # no training step finished for this long
scrape_interval_s = 15
metrics_port = 9700            # ranks serve /metrics on 9700 + local rank; 0 turns it off
metrics_host = "0.0.0.0"       # the ranks' /metrics listen for a Prometheus on another host
# targets_dir = "/shared/prometheus/gpuspark-targets"   # file_sd directory Prometheus reads
runbook_url = "https://wiki.example.com/gpuspark/runbook"

[training]                     # the ranks of `gpuspark launch` and `gpuspark train`
collective_timeout_s = 600     # a rank waits this long for a peer in one collective, then fails

[security]                     # Spark authentication and encryption (`render spark --secure`)
enabled = false                # true: every daemon and application shares the secret below
secret_file = "~/.gpuspark/spark-secret"   # mode 600, the same on every node; made if missing
network_crypto = true          # AES on all Spark RPC traffic
io_encryption = true           # shuffle and spill files encrypted on local disks
acls = true                    # UI ACLs: admins view and modify, the teams' members view
admins = ["alice"]

# Spark on Kubernetes (`gpuspark render k8s --spec cluster.toml -o k8s/`): every key is optional.
# [kubernetes]
# image = "registry.example.com/gpuspark:0.1.0-cuda"  # the gpuspark image (Containerfile)
# namespace = "gpuspark"       # shared objects (monitoring, dashboards); teams get their own
# service_account = "spark"    # the Spark driver's account, with the Role it needs
# gpu_product = "NVIDIA-A100-SXM4-80GB"   # node label nvidia.com/gpu.product of executors
# shm_size = "24Gi"            # /dev/shm for NCCL (default: spark.executor.memoryOverhead)
# rdma_resource = "rdma/rdma_shared_device_a"   # per executor on InfiniBand, with IPC_LOCK
# local_dirs = ["/raid/spark"] # NVMe scratch on the nodes: Spark's local dirs (hostPath)
# tolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
# monitoring_labels = { release = "kube-prometheus-stack" }   # for the Prometheus operator
"""


_DEFAULT = """\
# The built-in spec gpuspark uses when none is given (`--spec` / GPUSPARK_SPEC): the embedded
# cluster on this machine, 2 workers with 2 GPU slots each (simulated without NVIDIA GPUs).
name = "embedded"

[[nodes]]
name = "local"
hosts = ["worker-0", "worker-1"]
gpus_per_node = 2
gpu_model = "any"
gpu_memory_gb = 16
cpu_cores = 8
ram_gb = 8

[networks.compute]
kind = "ethernet"
gbps = 10
latency_us = 50

[networks.storage]
gbps = 10

[storage]
root = "gpuspark-data"

[spark]
master = "local-cluster"
executor_gpus = 2              # one executor per worker holds both GPU slots
task_gpu_amount = 0.5          # 2 data tasks share a GPU (16 Python tasks would crowd 2 cores)
executor_cores = 4             # 4 task slots = 4 GPU shares
task_cpus = 1
executor_memory = "1g"
dynamic_allocation = false     # one application can prepare data and train
event_log = false
"""


def default_spec_text() -> str:
    """The TOML of the built-in spec (the embedded cluster's shape)."""
    return _DEFAULT
