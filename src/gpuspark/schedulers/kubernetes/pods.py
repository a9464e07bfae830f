"""The driver and executor pod templates of Spark on Kubernetes, from the spec's
``[kubernetes]`` table (``spark.kubernetes.{driver,executor}.podTemplateFile``, and inline in
each ``SparkApplication``).

Spark merges a template with the pod it builds: it keeps the template's volumes, tolerations,
node selector, security context and the extra resources of the container it names
(``spark.kubernetes.*.podTemplateContainerName``), and adds its own image, command, cpu,
memory and ``nvidia.com/gpu`` (from ``spark.executor.resource.gpu.*``). So the templates hold
only what Spark cannot know:

- the GPU nodes' taint tolerations and, when set, a ``nvidia.com/gpu.product`` node selector;
- executors: a memory-backed ``/dev/shm`` sized for NCCL, the nodes' NVMe scratch as volumes
  named ``spark-local-dir-N`` (Spark uses volumes of that prefix as its local dirs), the
  ranks' metrics ports, and on InfiniBand the RDMA device resource plus ``IPC_LOCK`` (NCCL
  registers pinned memory with the HCA).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuspark.schedulers.kubernetes.kueue import GPU_LABEL
from gpuspark.schedulers.shares import executor_memory_mib

if TYPE_CHECKING:
    from gpuspark.spec.models import ClusterSpec

__all__ = [
    "DRIVER_CONTAINER",
    "EXECUTOR_CONTAINER",
    "LOCAL_DIR_PREFIX",
    "PART_OF",
    "SHM_VOLUME",
    "SPARK_ROLE",
    "SPARK_UI_PORT",
    "driver_template",
    "executor_template",
    "infiniband",
    "rank_ports",
    "shm_size",
]

DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
"""Spark's own container names, named again in ``spark.kubernetes.*.podTemplateContainerName``
so that Spark edits the template's container rather than adding one."""
LOCAL_DIR_PREFIX = "spark-local-dir-"
"""Spark's prefix for volumes it uses as local dirs (``LocalDirsFeatureStep``)."""
SHM_VOLUME = "dshm"
PART_OF = {"app.kubernetes.io/part-of": "gpuspark"}
"""The label every rendered object and gpuspark's pods carry (monitors select on it)."""
SPARK_ROLE = "spark-role"
"""The label Spark puts on its pods: ``driver`` or ``executor``."""
SPARK_UI_PORT = "spark-ui"
"""The name Spark gives the driver container's UI port (``/metrics/...`` are served there)."""


def infiniband(spec: ClusterSpec) -> bool:
    """Whether the GPUs talk over InfiniBand (RDMA device and ``IPC_LOCK`` in executors)."""
    return spec.networks.compute.kind == "infiniband"


def shm_size(spec: ClusterSpec) -> str:
    """``/dev/shm`` of an executor: ``[kubernetes] shm_size``, else the executors' memory
    overhead (the part of the pod's memory limit that is not JVM heap)."""
    if spec.kubernetes.shm_size:
        return spec.kubernetes.shm_size
    s = spec.spark
    total = executor_memory_mib(s.executor_memory, s.conf.get("spark.executor.memoryOverhead"))
    heap = executor_memory_mib(s.executor_memory, "1m") - 1  # the heap alone, parsed the same way
    return f"{total - heap}Mi"


def rank_ports(spec: ClusterSpec) -> list[tuple[str, int]]:
    """``(name, port)`` of each training rank's ``/metrics`` in an executor (one rank per GPU,
    port = ``[monitoring] metrics_port`` + local rank); none when metrics are off."""
    base = spec.monitoring.metrics_port
    if base == 0:
        return []
    count = min(spec.spark.executor_gpus, 65535 - base + 1)
    return [(f"rank-{i}", base + i) for i in range(count)]


def _tolerations(spec: ClusterSpec) -> list[dict[str, Any]]:
    return [t.model_dump(exclude_none=True) for t in spec.kubernetes.tolerations]


def _pod(role: str, spec_body: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": {**PART_OF, "gpuspark/role": role}},
        "spec": spec_body,
    }


def driver_template(spec: ClusterSpec) -> dict[str, Any]:
    """The driver's pod template: the GPU nodes' tolerations (a driver may land on a GPU node
    where there is no other kind); no GPU, no node selector."""
    body: dict[str, Any] = {"containers": [{"name": DRIVER_CONTAINER}]}
    tolerations = _tolerations(spec)
    if tolerations:
        body["tolerations"] = tolerations
    return _pod("driver", body)


def executor_template(spec: ClusterSpec) -> dict[str, Any]:
    """The executors' pod template (see the module's description)."""
    k = spec.kubernetes
    container: dict[str, Any] = {"name": EXECUTOR_CONTAINER}
    ports = [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in rank_ports(spec)]
    if ports:
        container["ports"] = ports
    mounts = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(spec)}}
    ]
    for i, path in enumerate(k.local_dirs, start=1):
        name = f"{LOCAL_DIR_PREFIX}{i}"
        mounts.append({"name": name, "mountPath": path})
        volumes.append({"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}})
    container["volumeMounts"] = mounts
    if infiniband(spec):
        container["resources"] = {"limits": {k.rdma_resource: 1}}
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    body: dict[str, Any] = {"containers": [container], "volumes": volumes}
    tolerations = _tolerations(spec)
    if tolerations:
        body["tolerations"] = tolerations
    if k.gpu_product:
        body["nodeSelector"] = {GPU_LABEL: k.gpu_product}
    return _pod("executor", body)
