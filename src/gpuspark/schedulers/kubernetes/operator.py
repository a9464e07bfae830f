"""Objects for the operators around Spark on Kubernetes: a ``SparkApplication`` per team and
job kind for the Kubeflow Spark operator (``sparkoperator.k8s.io/v1beta2``), and the Kueue
``Configuration`` that lets Kueue admit them.

A ``SparkApplication`` carries the pod templates inline (``driver.template``,
``executor.template``: the operator writes them to files for ``spark-submit``, Spark >= 3.0)
and its executors' GPUs as ``executor.gpu``, which is what Kueue's SparkApplication
integration counts against the team's ClusterQueue. Its flavour settings:

- Kueue: the ``kueue.x-k8s.io/queue-name`` label on the SparkApplication itself (not on its
  pods: Kueue's pod integration would admit them a second time), and no dynamic allocation
  (Kueue's webhook refuses it for non-elastic jobs);
- Volcano / YuniKorn: the operator's ``batchScheduler`` with the team's queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuspark.schedulers.kubernetes import kueue
from gpuspark.schedulers.kubernetes.api import GPU_RESOURCE
from gpuspark.schedulers.kubernetes.flavours import flavour, yunikorn_queue
from gpuspark.schedulers.kubernetes.pods import PART_OF, driver_template, executor_template
from gpuspark.schedulers.shares import kube_name

if TYPE_CHECKING:
    from gpuspark.spec.models import ClusterSpec

__all__ = [
    "APP_FILES",
    "DRIVER_MEMORY",
    "JOB_KINDS",
    "KUEUE_FEATURE_GATE",
    "KUEUE_FRAMEWORKS",
    "OPERATOR_API",
    "OPERATOR_OWNS",
    "Job",
    "kueue_configuration",
    "spark_application",
]

OPERATOR_API = "sparkoperator.k8s.io/v1beta2"
JOB_KINDS = ("data", "train")
"""``data``: Spark data jobs (prep, inference; dynamic allocation where the flavour allows);
``train``: a barrier stage of training ranks (fixed executors, dynamic allocation off)."""
APP_FILES = {
    "data": "local:///opt/gpuspark/jobs/data_job.py",
    "train": "local:///opt/gpuspark/jobs/train_job.py",
}
"""``mainApplicationFile`` placeholders: a job script in the image (replace with yours)."""
DRIVER_MEMORY = "1g"
"""Spark's default driver heap; the driver runs no ranks (they run in executors)."""
KUEUE_FRAMEWORKS = ("sparkoperator.k8s.io/sparkapplication", "pod")
"""Kueue integrations gpuspark's jobs need: SparkApplications (admitted whole) and plain
pods (``spark-submit`` without the operator; each pod admitted on its own)."""
KUEUE_FEATURE_GATE = "SparkApplicationIntegration"
"""Alpha in Kueue 0.17-0.19, off by default: the SparkApplication integration needs it."""
OPERATOR_OWNS = (
    "spark.master",
    "spark.kubernetes.namespace",
    "spark.kubernetes.container.image",
    "spark.kubernetes.authenticate.driver.serviceAccountName",
    "spark.kubernetes.driver.podTemplateFile",
    "spark.kubernetes.executor.podTemplateFile",
    "spark.executor.instances",
    "spark.executor.cores",
    "spark.executor.memory",
    "spark.executor.memoryOverhead",
    "spark.dynamicAllocation.",
)
"""Properties (or prefixes, ending in ``.``) a SparkApplication sets through its own fields."""


@dataclass(frozen=True)
class Job:
    """One kind of job of one team (``team`` None: a spec without teams)."""

    team: str | None
    kind: str
    namespace: str
    executors: int
    """Fixed executors (train, and data without dynamic allocation); the cap with it."""
    dynamic: bool
    """Dynamic allocation with shuffle tracking, up to :attr:`executors`."""

    @property
    def name(self) -> str:
        """``TEAM-KIND`` (or ``KIND``): the job's file names and its SparkApplication's."""
        return f"{kube_name(self.team)}-{self.kind}" if self.team else self.kind


def _owned(key: str) -> bool:
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in OPERATOR_OWNS)


def _scheduling(spec: ClusterSpec, job: Job) -> tuple[dict[str, str], dict[str, Any]]:
    """(labels of the SparkApplication, scheduler fields of its spec) for the flavour."""
    kind = flavour(spec)
    if job.team is None:  # no teams: Kueue's one shared queue (kueue_objects), else none
        return ({kueue.QUEUE_LABEL: kueue.SHARED_QUEUE} if kind == "kueue" else {}), {}
    if kind == "volcano":
        return {}, {
            "batchScheduler": "volcano",
            "batchSchedulerOptions": {"queue": kube_name(job.team)},
        }
    if kind == "yunikorn":
        options = {"queue": yunikorn_queue(job.team)}
        return {}, {"batchScheduler": "yunikorn", "batchSchedulerOptions": options}
    name = kube_name(job.team)
    return {kueue.QUEUE_LABEL: name, kueue.PRIORITY_LABEL: f"{name}-priority"}, {}


def spark_application(spec: ClusterSpec, job: Job, conf: Mapping[str, str]) -> dict[str, Any]:
    """The ``SparkApplication`` of ``job``; ``conf``: the Spark properties of the job
    (``spark-defaults.conf`` and the job's own), less what the operator sets itself."""
    s, k = spec.spark, spec.kubernetes
    labels, scheduling = _scheduling(spec, job)
    meta_labels = {**PART_OF, "gpuspark/job-kind": job.kind, **labels}
    if job.team:
        meta_labels["gpuspark/team"] = kube_name(job.team)
    executor: dict[str, Any] = {
        "cores": s.executor_cores,
        "memory": s.executor_memory,
        "gpu": {"name": GPU_RESOURCE, "quantity": s.executor_gpus},
        "template": _template_spec(executor_template(spec)),
    }
    overhead = s.conf.get("spark.executor.memoryOverhead")
    if overhead:
        executor["memoryOverhead"] = overhead
    body: dict[str, Any] = {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": conf.get("spark.kubernetes.container.image", k.image),
        "imagePullPolicy": "IfNotPresent",
        "mainApplicationFile": APP_FILES[job.kind],
        "sparkVersion": k.spark_version,
        "sparkConf": {key: value for key, value in sorted(conf.items()) if not _owned(key)},
        "restartPolicy": {"type": "Never"},
        **scheduling,
        "driver": {
            "cores": 1,
            "memory": DRIVER_MEMORY,
            "serviceAccount": k.service_account,
            "template": _template_spec(driver_template(spec)),
        },
        "executor": executor,
    }
    if job.dynamic:
        body["dynamicAllocation"] = {
            "enabled": True,
            "minExecutors": 0,
            "maxExecutors": job.executors,
            "shuffleTrackingEnabled": True,
        }
    else:
        executor["instances"] = job.executors
    return {
        "apiVersion": OPERATOR_API,
        "kind": "SparkApplication",
        "metadata": {
            "name": f"gpuspark-{job.name}",
            "namespace": job.namespace,
            "labels": meta_labels,
        },
        "spec": body,
    }


def _template_spec(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod template file's Pod as a ``PodTemplateSpec`` (metadata and spec)."""
    return {"metadata": pod["metadata"], "spec": pod["spec"]}


def kueue_configuration(
    spec: ClusterSpec, *, api: str, namespaces: list[str], rdma: bool
) -> dict[str, Any]:
    """The parts of Kueue's ``Configuration`` gpuspark needs (merge into the manager's
    config): the SparkApplication and pod integrations, the feature gate, Kueue managing the
    gpuspark namespaces only, and on InfiniBand the RDMA resource left out of quota."""
    config: dict[str, Any] = {
        "apiVersion": f"config.kueue.x-k8s.io/{api}",
        "kind": "Configuration",
        "managedJobsNamespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
            ]
        },
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        "featureGates": {KUEUE_FEATURE_GATE: True},
    }
    if rdma:
        domain = spec.kubernetes.rdma_resource.split("/", 1)[0]
        config["resources"] = {"excludeResourcePrefixes": [f"{domain}/"]}
    return config
