"""``gpuspark render k8s``: everything Spark on Kubernetes needs from a cluster spec, one file
per concern, deterministic, with no path of the machine that renders.

- ``cluster/`` (``kubectl apply -f cluster/``, in file order): ``00-namespaces.yaml`` (the
  shared namespace and one per team), ``10-rbac.yaml`` (the Spark driver's ServiceAccount,
  Role and RoleBinding in each), ``20-queues.yaml`` (the flavour's queues: Kueue or Volcano),
  then the manifests a caller adds (monitoring: :mod:`gpuspark.monitor.k8s`).
- ``spark/`` (for ``spark-submit``): ``spark-defaults.conf``, the driver and executor pod
  templates, one properties file per team and job kind (``TEAM-data.conf``,
  ``TEAM-train.conf``) and, with Volcano, their PodGroup templates. Files refer to each other
  by name (relative: run ``spark-submit`` in that folder) or under ``conf_dir``.
- ``apps/``: a ``SparkApplication`` per team and job kind (Kubeflow Spark operator).
- ``kueue/kueue-configuration.yaml`` (Kueue flavour): what Kueue's own configuration needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gpuspark.schedulers.kubernetes import kueue, volcano
from gpuspark.schedulers.kubernetes.flavours import flavour, team_settings
from gpuspark.schedulers.kubernetes.operator import (
    Job,
    kueue_configuration,
    spark_application,
)
from gpuspark.schedulers.kubernetes.pods import (
    DRIVER_CONTAINER,
    EXECUTOR_CONTAINER,
    PART_OF,
    driver_template,
    executor_template,
    infiniband,
    shm_size,
)
from gpuspark.schedulers.shares import (
    DEFAULT_QUEUE,
    kube_name,
    spark_conf_text,
    unique_names,
    yaml_documents,
)
from gpuspark.schedulers.standalone.caps import team_caps
from gpuspark.spec.models import DEFAULT_DISCOVERY_SCRIPT

if TYPE_CHECKING:
    from gpuspark.spec.models import ClusterSpec

__all__ = [
    "DEFAULTS_FILE",
    "DRIVER_TEMPLATE_FILE",
    "EXECUTOR_TEMPLATE_FILE",
    "K8S_RENDERER",
    "KUEUE_CONFIG_FILE",
    "Manifest",
    "job_namespaces",
    "jobs",
    "k8s_notes",
    "pod_template_files",
    "render_k8s",
    "spark_defaults",
    "team_namespace",
]

K8S_RENDERER = "k8s"
DEFAULTS_FILE = "spark-defaults.conf"
DRIVER_TEMPLATE_FILE = "driver-pod-template.yaml"
EXECUTOR_TEMPLATE_FILE = "executor-pod-template.yaml"
KUEUE_CONFIG_FILE = "kueue/kueue-configuration.yaml"
DRIVER_ROLE = "gpuspark-spark-driver"
_DRIVER_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
        "verbs": [
            "create",
            "get",
            "list",
            "watch",
            "delete",
            "deletecollection",
            "patch",
            "update",
        ],
    }
]
"""What Spark's driver does with its executors' pods, its own service, the config maps of
its conf and pod templates, and on-demand volume claims (as the Spark operator grants)."""
_PER_JOB = (
    "spark.dynamicAllocation.enabled",
    "spark.dynamicAllocation.shuffleTracking.enabled",
    "spark.dynamicAllocation.minExecutors",
    "spark.dynamicAllocation.maxExecutors",
    "spark.executor.instances",
)
"""Set per job kind (``TEAM-data.conf``, ``TEAM-train.conf``), not in the defaults."""


@dataclass(frozen=True)
class Manifest:
    """Objects for ``kubectl apply``, written as ``cluster/NN-<name>.yaml`` after the
    backend's own (namespaces, RBAC, queues), in the order given."""

    name: str
    objects: list[dict[str, Any]]
    header: list[str] = field(default_factory=list)


def _ref(conf_dir: str | None, name: str) -> str:
    """How a rendered conf names the file ``name`` of ``spark/``."""
    return f"{conf_dir.rstrip('/')}/{name}" if conf_dir else name


def team_namespace(team: str, prefix: str = "") -> str:
    """The namespace of ``team``'s jobs: ``prefix`` (``render k8s --namespace-prefix``) +
    the team's name as a Kubernetes name."""
    return prefix + kube_name(team)


def job_namespaces(spec: ClusterSpec, namespace_prefix: str = "") -> list[str]:
    """The shared namespace, then each team's (``namespace_prefix`` + team), each once."""
    found = [spec.kubernetes.namespace]
    found += [team_namespace(t.name, namespace_prefix) for t in spec.teams]
    return list(dict.fromkeys(found))


def jobs(spec: ClusterSpec, namespace_prefix: str = "") -> list[Job]:
    """A data and a train :class:`Job` per team (per cluster when the spec has no teams), as
    ``spark-submit`` runs them: data jobs with dynamic allocation when the spec's ``[spark]``
    has it, up to the team's cap; training on the team's guaranteed GPUs (at least one
    executor), dynamic allocation off (barrier stage)."""
    per_executor = spec.spark.executor_gpus
    dynamic = spec.spark.dynamic_allocation
    if not spec.teams:
        most = max(1, spec.total_gpus // per_executor)
        ns = spec.kubernetes.namespace
        return [Job(None, "data", ns, most, dynamic), Job(None, "train", ns, most, False)]
    out = []
    for team in spec.teams:
        cap = team_caps(spec, team).max_executors
        train = min(cap, max(1, team.guaranteed_gpus // per_executor))
        ns = team_namespace(team.name, namespace_prefix)
        out += [Job(team.name, "data", ns, cap, dynamic), Job(team.name, "train", ns, train, False)]
    return out


def spark_defaults(
    spec: ClusterSpec, app_conf: Mapping[str, str], conf_dir: str | None = None
) -> dict[str, str]:
    """``spark-defaults.conf`` for Kubernetes: the image, the shared namespace, the driver's
    service account, the pod templates, the GPU vendor and the image's discovery script, then
    ``app_conf`` (the application settings of every cluster), then ``[spark.conf]``."""
    k = spec.kubernetes
    conf = {
        "spark.kubernetes.container.image": k.image,
        "spark.kubernetes.namespace": k.namespace,
        "spark.kubernetes.authenticate.driver.serviceAccountName": k.service_account,
        "spark.kubernetes.driver.podTemplateFile": _ref(conf_dir, DRIVER_TEMPLATE_FILE),
        "spark.kubernetes.executor.podTemplateFile": _ref(conf_dir, EXECUTOR_TEMPLATE_FILE),
        "spark.kubernetes.driver.podTemplateContainerName": DRIVER_CONTAINER,
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        "spark.executor.resource.gpu.vendor": "nvidia.com",
        **app_conf,
        "spark.executor.resource.gpu.discoveryScript": DEFAULT_DISCOVERY_SCRIPT,
        **spec.spark.conf,
    }
    if spec.spark.master.startswith("k8s://"):
        conf["spark.master"] = spec.spark.master
    for key in _PER_JOB:
        conf.pop(key, None)  # set per job kind: TEAM-data.conf / TEAM-train.conf
    return dict(sorted(conf.items()))


def _podgroup_file(job: Job) -> str:
    return f"{job.name}-podgroup.yaml"


def _job_conf(spec: ClusterSpec, job: Job, conf_dir: str | None) -> dict[str, str]:
    conf = {"spark.kubernetes.namespace": job.namespace}
    if job.team is not None:
        template = _ref(conf_dir, _podgroup_file(job))
        conf.update(team_settings(spec, job.team, podgroup_template=template, priority=True))
    elif flavour(spec) == "kueue":  # no teams: the one shared LocalQueue kueue_objects renders
        for role in ("driver", "executor"):
            conf[f"spark.kubernetes.{role}.label.{kueue.QUEUE_LABEL}"] = kueue.SHARED_QUEUE
    if job.dynamic:
        conf.update(
            {
                "spark.dynamicAllocation.enabled": "true",
                # No external shuffle service on Kubernetes: executors holding shuffle data
                # are kept until it is no longer needed (SPARK-27963).
                "spark.dynamicAllocation.shuffleTracking.enabled": "true",
                "spark.dynamicAllocation.minExecutors": "0",
                "spark.dynamicAllocation.maxExecutors": str(job.executors),
            }
        )
    else:
        conf["spark.dynamicAllocation.enabled"] = "false"
        conf["spark.executor.instances"] = str(job.executors)
    return conf


def _namespaces(spec: ClusterSpec, prefix: str) -> list[dict[str, Any]]:
    teams = {team_namespace(t.name, prefix): kube_name(t.name) for t in spec.teams}
    docs = []
    for name in job_namespaces(spec, prefix):
        labels = dict(PART_OF)
        if name in teams:
            labels["gpuspark/team"] = teams[name]
        docs.append(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
        )
    return docs


def _rbac(spec: ClusterSpec, prefix: str) -> list[dict[str, Any]]:
    account = spec.kubernetes.service_account
    rbac = "rbac.authorization.k8s.io"
    docs: list[dict[str, Any]] = []
    for ns in job_namespaces(spec, prefix):
        meta = {"namespace": ns, "labels": dict(PART_OF)}
        docs += [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, **meta}},
            {
                "apiVersion": f"{rbac}/v1",
                "kind": "Role",
                "metadata": {"name": DRIVER_ROLE, **meta},
                "rules": _DRIVER_RULES,
            },
            {
                "apiVersion": f"{rbac}/v1",
                "kind": "RoleBinding",
                "metadata": {"name": DRIVER_ROLE, **meta},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
                "roleRef": {"apiGroup": rbac, "kind": "Role", "name": DRIVER_ROLE},
            },
        ]
    return docs


def _queues(spec: ClusterSpec, api: str, prefix: str) -> list[dict[str, Any]]:
    kind = flavour(spec)
    if kind == "volcano":
        unique_names(spec, kube_name, "Volcano", DEFAULT_QUEUE)
        return [volcano.volcano_queue(spec, t) for t in spec.teams]
    if kind == "kueue":
        return kueue.kueue_objects(spec, api=api, namespace_prefix=prefix)
    return []  # YuniKorn's queues live in its own configuration (root.<team>)


def _cluster_files(
    spec: ClusterSpec, api: str, prefix: str, manifests: Sequence[Manifest]
) -> dict[str, str]:
    apply = "Apply with: kubectl apply -f cluster/ (in file order)"
    own = [
        Manifest("namespaces", _namespaces(spec, prefix), ["the shared namespace and each team's"]),
        Manifest(
            "rbac",
            _rbac(spec, prefix),
            ["the Spark driver's ServiceAccount, Role and RoleBinding in every job namespace"],
        ),
    ]
    queues = _queues(spec, api, prefix)
    if queues:
        own.append(Manifest("queues", queues, [f"the team queues ({flavour(spec)})"]))
    files = {}
    for i, m in enumerate([*own, *manifests]):
        number = i * 10 if i < len(own) else 30 + (i - len(own)) * 10
        header = [f"{spec.name}: {line}" if j == 0 else line for j, line in enumerate(m.header)]
        header = [*header, "Rendered by gpuspark render k8s from the cluster spec.", apply]
        files[f"cluster/{number:02d}-{m.name}.yaml"] = yaml_documents(header, m.objects)
    return files


def pod_template_files(spec: ClusterSpec) -> dict[str, str]:
    """The driver's and the executors' pod template files (name -> content), as
    ``render k8s`` writes them into ``spark/`` and a ``k8s://`` session under its state
    directory."""
    return {
        DRIVER_TEMPLATE_FILE: yaml_documents(
            ["Spark driver pod template (spark.kubernetes.driver.podTemplateFile)."],
            [driver_template(spec)],
        ),
        EXECUTOR_TEMPLATE_FILE: yaml_documents(
            [
                "Spark executor pod template (spark.kubernetes.executor.podTemplateFile).",
                f"/dev/shm: memory-backed, {shm_size(spec)} at most, counted in the pod's"
                " memory limit.",
            ],
            [executor_template(spec)],
        ),
    }


def _spark_files(
    spec: ClusterSpec, found: list[Job], app_conf: Mapping[str, str], conf_dir: str | None
) -> dict[str, str]:
    defaults = spark_defaults(spec, app_conf, conf_dir)
    where = f"under {conf_dir}" if conf_dir else "relative: run spark-submit in this folder"
    files = {
        f"spark/{DEFAULTS_FILE}": spark_conf_text(
            f"Spark on Kubernetes defaults for cluster '{spec.name}' (gpuspark render k8s).",
            defaults,
            (
                f"Templates are referenced {where}.",
                "Per job: --load-spark-defaults --properties-file TEAM-KIND.conf (Spark >= 4.0)",
            ),
        ),
        **{f"spark/{name}": text for name, text in pod_template_files(spec).items()},
    }
    volcano_flavour = flavour(spec) == "volcano"
    for job in found:
        title = f"{job.kind} jobs of team '{job.team}'" if job.team else f"{job.kind} jobs"
        files[f"spark/{job.name}.conf"] = spark_conf_text(
            f"Spark on Kubernetes settings for {title}, on top of {DEFAULTS_FILE}.",
            _job_conf(spec, job, conf_dir),
        )
        if volcano_flavour and job.team is not None:
            pg = volcano.podgroup_template(spec, job.team, min_executors=job.executors)
            files[f"spark/{_podgroup_file(job)}"] = yaml_documents(
                [f"PodGroup template for {title} (Spark's Volcano feature step)."], [pg]
            )
    return files


def render_k8s(
    spec: ClusterSpec,
    *,
    api: str = "v1beta2",
    namespace_prefix: str = "",
    conf_dir: str | None = None,
    app_conf: Mapping[str, str] | None = None,
    manifests: Sequence[Manifest] = (),
) -> dict[str, str]:
    """Relative path -> content of every file (see the module's description).

    ``api``: Kueue's API version (objects and Configuration); ``conf_dir``: where ``spark/``
    will be when ``spark-submit`` runs (default: files named relative to it);
    ``app_conf``: the Spark application settings every cluster gets (GPU amounts, executor
    shape, metrics, event log); ``manifests``: more objects for ``cluster/``.
    """
    unique_names(spec, kube_name, "Kubernetes", "")  # one namespace and file set per team
    found = jobs(spec, namespace_prefix)
    files = _cluster_files(spec, api, namespace_prefix, manifests)
    files.update(_spark_files(spec, found, app_conf or {}, conf_dir))
    defaults = spark_defaults(spec, app_conf or {}, conf_dir)
    placeholder = "mainApplicationFile is a placeholder: your job script in the image."
    for job in found:
        app_job = replace(job, dynamic=job.dynamic and flavour(spec) != "kueue")
        app = spark_application(spec, app_job, defaults)
        files[f"apps/{job.name}.yaml"] = yaml_documents(
            [
                f"SparkApplication ({job.kind}) for cluster '{spec.name}'.",
                placeholder,
                f"Run with: kubectl apply -f apps/{job.name}.yaml",
            ],
            [app],
        )
    if flavour(spec) == "kueue":
        config = kueue_configuration(
            spec, api=api, namespaces=job_namespaces(spec, namespace_prefix), rdma=infiniband(spec)
        )
        files[KUEUE_CONFIG_FILE] = yaml_documents(
            [
                "What gpuspark needs in Kueue's Configuration: merge it into the manager's",
                "config (ConfigMap kueue-manager-config) and restart Kueue. Not for kubectl apply.",
            ],
            [config],
        )
    return files


def k8s_notes(spec: ClusterSpec, *, conf_dir: str | None = None) -> list[str]:
    """What the files of :func:`render_k8s` mean and leave to the administrator."""
    notes = []
    if not spec.teams:
        queue = f" in Kueue's '{kueue.SHARED_QUEUE}' queue" if flavour(spec) == "kueue" else ""
        notes.append(
            "the spec has no [[teams]]: every job runs in namespace"
            f" '{spec.kubernetes.namespace}'{queue} (spark/data.conf, spark/train.conf)"
        )
    notes += [
        "kubectl apply -f cluster/ creates the namespaces first; the queue and monitoring"
        " objects need their operators' CRDs (Kueue or Volcano; the Prometheus operator)",
        "spark-submit: cd spark/ && SPARK_CONF_DIR=$PWD spark-submit --master"
        " k8s://https://API:6443 --deploy-mode cluster --load-spark-defaults"
        " --properties-file TEAM-data.conf ... (--load-spark-defaults: Spark >= 4.0 reads"
        " spark-defaults.conf as well as the properties file)",
        "training jobs (TEAM-train.conf, apps/TEAM-train.yaml) run on fixed executors, dynamic"
        " allocation off: a barrier stage refuses it",
        f"executors get a memory-backed /dev/shm of {shm_size(spec)}: it counts against their"
        " memory limit (raise spark.executor.memoryOverhead, or set [kubernetes] shm_size)",
    ]
    if not conf_dir:
        notes.append(
            "spark/*.conf name the pod and PodGroup templates relative to spark/: run"
            " spark-submit there, or render with --conf-dir where they will be"
        )
    if flavour(spec) == "kueue":
        notes.append(
            f"merge {KUEUE_CONFIG_FILE} into Kueue's configuration: it enables the"
            " SparkApplication integration (alpha, feature gate) and the pod integration"
        )
    if infiniband(spec) or spec.kubernetes.local_dirs:
        notes.append(
            "executors use hostPath volumes (local_dirs) or IPC_LOCK with RDMA devices: the job"
            " namespaces' Pod Security level must allow them (privileged)"
        )
    if spec.monitoring.metrics_host.startswith("127."):
        notes.append(
            "the ranks' /metrics listen on [monitoring] metrics_host ="
            f" {spec.monitoring.metrics_host}: set 0.0.0.0 so that Prometheus reaches them"
        )
    return notes
