"""The spec's ``[kubernetes]`` table: what ``gpuspark render k8s`` and a ``k8s://`` session put
into the pods, templates and objects (image, namespace, service account, GPU nodes, ``/dev/shm``,
RDMA, tolerations, local dirs), each value checked against Kubernetes' own name rules."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from gpuspark.spec.base import SpecModel

__all__ = ["KubernetesSettings", "Toleration"]

_Model = SpecModel

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE])?$")
_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")


def _checked(value: str, form: re.Pattern[str], what: str, limit: int = 63) -> str:
    """``value`` when it matches ``form`` within ``limit`` characters; else ``must be what``."""
    if len(value) > limit or not form.match(value):
        raise ValueError(f"must be {what}")
    return value


class Toleration(_Model):
    """One pod toleration (Kubernetes ``tolerations[]``), e.g. of the taint the GPU operator
    or the administrator puts on GPU nodes."""

    key: str | None = None
    """The taint key; none with ``operator = "Exists"`` tolerates every taint."""
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    """The taint value, with ``operator = "Equal"``."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """The taint effect tolerated; none: every effect."""

    @field_validator("key")
    @classmethod
    def _key_form(cls, value: str | None) -> str | None:
        form = "a label key such as nvidia.com/gpu"
        return value if value is None else _checked(value, _LABEL_KEY, form, 316)

    @field_validator("value")
    @classmethod
    def _value_form(cls, value: str | None) -> str | None:
        return value if value is None else _checked(value, _LABEL_VALUE, "a label value")

    @model_validator(mode="after")
    def _value_needs_equal(self) -> Toleration:
        if self.value is not None and self.operator == "Exists":
            raise ValueError('a value needs operator = "Equal"')
        return self


def _installed(package: str, fallback: str) -> str:
    """The installed version of ``package`` (its metadata: nothing is imported)."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return fallback


class KubernetesSettings(_Model):
    """``[kubernetes]``: what ``gpuspark render k8s`` puts into the pods, templates and
    objects it renders (Spark on Kubernetes, with the spec's Kueue/Volcano/YuniKorn flavour).
    Every field has a default, so the table is optional."""

    image: str = "gpuspark:latest"
    """The gpuspark container image (built from the ``Containerfile``), e.g.
    ``registry.example.com/gpuspark:0.1.0-cuda``: the driver's and executors' image."""
    namespace: str = "gpuspark"
    """Namespace of the shared objects (monitoring, dashboards) and of jobs without a team;
    each team's jobs run in the team's own namespace (``--namespace-prefix`` + team)."""
    service_account: str = "spark"
    """The Spark driver's service account in every job namespace (a Role lets it manage its
    executor pods, services, config maps and volume claims)."""
    gpu_product: str | None = None
    """Value of the node label ``nvidia.com/gpu.product`` (GPU feature discovery), e.g.
    ``NVIDIA-A100-SXM4-80GB``: executors are placed on such nodes. None: any GPU node."""
    shm_size: str | None = None
    """Size of the memory-backed ``/dev/shm`` of executors (NCCL, data loader workers), a
    Kubernetes quantity such as ``16Gi``. It counts against the executor pod's memory limit
    (heap + ``spark.executor.memoryOverhead``), so the default is the executors' memory
    overhead (``[spark.conf] spark.executor.memoryOverhead``, else Spark's ``max(384m, 10%)``):
    raise the overhead to give NCCL more room."""
    rdma_resource: str = "rdma/rdma_shared_device_a"
    """The RDMA device plugin's resource (the NVIDIA network operator's shared device plugin
    by default): one per executor, with the ``IPC_LOCK`` capability, when
    ``[networks.compute] kind = "infiniband"``."""
    tolerations: list[Toleration] = Field(
        default_factory=lambda: [
            Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        ]
    )
    """Tolerations of the driver and executor pods; default: the ``nvidia.com/gpu``
    NoSchedule taint of GPU nodes. ``tolerations = []`` for none."""
    local_dirs: list[str] = Field(default_factory=list)
    """Absolute paths of the nodes' NVMe scratch, mounted into executors (``hostPath``) as
    Spark's local dirs (``spark-local-dir-1``, ...: shuffle, spill, the shard cache).
    Empty: Spark's own ``emptyDir``."""
    spark_version: str = Field(default_factory=lambda: _installed("pyspark", "4.3.0"))
    """Spark version in the image (``SparkApplication`` ``spec.sparkVersion``); default: the
    pyspark installed here, which ``make image`` puts into the image."""
    monitoring_labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels of the rendered PodMonitors, ServiceMonitors and PrometheusRule, so that
    the Prometheus operator's selectors pick them (kube-prometheus-stack: ``release =
    "<its Helm release>"``)."""

    @field_validator("image")
    @classmethod
    def _image_form(cls, value: str) -> str:
        if not value or any(c.isspace() for c in value):
            raise ValueError("must be an image name such as registry.example.com/gpuspark:0.1.0")
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace_form(cls, value: str) -> str:
        return _checked(value, _DNS_LABEL, "a namespace name: lower case letters, digits, '-'")

    @field_validator("service_account")
    @classmethod
    def _account_form(cls, value: str) -> str:
        form = "a service account name: lower case letters, digits, '-', '.'"
        return _checked(value, _DNS_SUBDOMAIN, form, 253)

    @field_validator("gpu_product")
    @classmethod
    def _product_form(cls, value: str | None) -> str | None:
        form = "a label value such as NVIDIA-A100-SXM4-80GB (letters, digits, '-', '_', '.')"
        return value if value is None else _checked(value, _LABEL_VALUE, form)

    @field_validator("shm_size")
    @classmethod
    def _shm_form(cls, value: str | None) -> str | None:
        form = "a Kubernetes quantity such as 16Gi or 512Mi"
        return value if value is None else _checked(value, _QUANTITY, form)

    @field_validator("rdma_resource")
    @classmethod
    def _rdma_form(cls, value: str) -> str:
        form = "an extended resource name such as rdma/rdma_shared_device_a"
        return _checked(value, _RESOURCE, form, 253)

    @field_validator("spark_version")
    @classmethod
    def _version_form(cls, value: str) -> str:
        return _checked(value, _VERSION, "a Spark version such as 4.0.1")

    @field_validator("local_dirs")
    @classmethod
    def _dirs_form(cls, value: list[str]) -> list[str]:
        for path in value:
            if not path.startswith("/") or any(c.isspace() for c in path):
                raise ValueError(f"{path!r} must be an absolute path on the nodes")
        seen = [d.rstrip("/") or "/" for d in value]
        if len(set(seen)) != len(seen):
            raise ValueError("lists a directory twice")
        if "/dev/shm" in seen:
            raise ValueError("/dev/shm is the memory-backed volume: pick another path")
        return value

    @field_validator("monitoring_labels")
    @classmethod
    def _label_form(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if len(key) > 316 or not _LABEL_KEY.match(key):
                raise ValueError(f"{key!r} is not a label key (such as release)")
            if len(item) > 63 or not _LABEL_VALUE.match(item):
                raise ValueError(f"{item!r} is not a label value (letters, digits, '-_.')")
        return value
