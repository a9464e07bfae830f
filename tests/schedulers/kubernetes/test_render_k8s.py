"""``gpuspark render k8s``: what each file holds (pod templates, Spark settings per job kind,
SparkApplications per team, Kueue's Configuration, monitoring), the ``[kubernetes]`` spec
table, and that no rendered file names a path of the machine that rendered it (also for
``render kueue`` and ``render volcano``). The schemas are checked in test_k8s_schemas.py."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuspark.cli.main import main
from gpuspark.errors import SpecError
from gpuspark.monitor import names
from gpuspark.monitor.dashboards import build_dashboards
from gpuspark.monitor.rules import rule_groups
from gpuspark.quota.render import quota_notes, render_k8s
from gpuspark.schedulers import backend_for
from gpuspark.spec import ClusterSpec, example_spec, load_spec, parse_spec
from gpuspark.spec.models import DEFAULT_DISCOVERY_SCRIPT

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "cluster.toml"


def _spec(conf: dict[str, str] | None = None, **kubernetes: Any) -> ClusterSpec:
    data = parse_spec(example_spec()).model_dump()
    data["kubernetes"].update(kubernetes)
    data["spark"]["conf"].update(conf or {})
    return ClusterSpec.model_validate(data)


def _doc(files: dict[str, str], name: str) -> dict[str, Any]:
    return yaml.safe_load(files[name])


def _docs(files: dict[str, str], name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(files[name]) if d is not None]


def _props(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return dict(line.split(" ", 1) for line in lines)


# ----------------------------------------------------------------------------- the files


def test_the_files_one_per_concern_in_apply_order() -> None:
    files = render_k8s(load_spec(EXAMPLE))
    teams = ("radiology", "vision", "research")
    assert sorted(files) == sorted(
        [
            "cluster/00-namespaces.yaml",
            "cluster/10-rbac.yaml",
            "cluster/20-queues.yaml",
            "cluster/30-monitoring.yaml",
            "cluster/40-dashboards.yaml",
            "kueue/kueue-configuration.yaml",
            "spark/spark-defaults.conf",
            "spark/driver-pod-template.yaml",
            "spark/executor-pod-template.yaml",
            *(f"spark/{t}-{kind}.conf" for t in teams for kind in ("data", "train")),
            *(f"apps/{t}-{kind}.yaml" for t in teams for kind in ("data", "train")),
        ]
    )
    assert render_k8s(load_spec(EXAMPLE)) == files  # deterministic
    namespaces = [d["metadata"]["name"] for d in _docs(files, "cluster/00-namespaces.yaml")]
    assert namespaces == ["gpuspark", *teams]
    rbac = _docs(files, "cluster/10-rbac.yaml")
    assert {(d["kind"], d["metadata"]["namespace"]) for d in rbac} == {
        (kind, ns) for kind in ("ServiceAccount", "Role", "RoleBinding") for ns in namespaces
    }
    role = next(d for d in rbac if d["kind"] == "Role")
    assert set(role["rules"][0]["resources"]) == {
        "pods",
        "services",
        "configmaps",
        "persistentvolumeclaims",
    }
    assert set(role["rules"][0]["verbs"]) == {
        "create",
        "get",
        "list",
        "watch",
        "delete",
        "deletecollection",
        "patch",
        "update",
    }


def test_executor_template_on_infiniband_with_nvme_and_a_gpu_product() -> None:
    spec = _spec(gpu_product="NVIDIA-A100-SXM4-80GB", local_dirs=["/raid/a", "/raid/b"])
    files = render_k8s(spec)
    pod = _doc(files, "spark/executor-pod-template.yaml")
    body = pod["spec"]
    (container,) = body["containers"]
    assert container["name"] == "spark-kubernetes-executor"
    assert body["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert body["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    volumes = {v["name"]: v for v in body["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "24576Mi"}  # 24g
    assert volumes["spark-local-dir-1"]["hostPath"]["path"] == "/raid/a"
    assert volumes["spark-local-dir-2"]["hostPath"]["path"] == "/raid/b"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {
        "dshm": "/dev/shm",
        "spark-local-dir-1": "/raid/a",
        "spark-local-dir-2": "/raid/b",
    }
    assert container["resources"] == {"limits": {"rdma/rdma_shared_device_a": 1}}
    assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert container["ports"] == [{"name": "rank-0", "containerPort": 9700, "protocol": "TCP"}]
    driver = _doc(files, "spark/driver-pod-template.yaml")["spec"]
    assert driver["containers"] == [{"name": "spark-kubernetes-driver"}]
    assert "nodeSelector" not in driver and "volumes" not in driver


def test_executor_template_on_ethernet_without_tolerations() -> None:
    data = _spec(shm_size="8Gi", tolerations=[]).model_dump()
    data["networks"]["compute"]["kind"] = "ethernet"
    data["spark"].update(executor_gpus=2, executor_cores=32)
    files = render_k8s(ClusterSpec.model_validate(data))
    body = _doc(files, "spark/executor-pod-template.yaml")["spec"]
    (container,) = body["containers"]
    assert "resources" not in container and "securityContext" not in container
    assert "tolerations" not in body and "nodeSelector" not in body
    assert [v["name"] for v in body["volumes"]] == ["dshm"]
    assert body["volumes"][0]["emptyDir"]["sizeLimit"] == "8Gi"
    assert [p["name"] for p in container["ports"]] == ["rank-0", "rank-1"]


# ----------------------------------------------------------------------------- Spark settings


def test_spark_defaults_for_kubernetes() -> None:
    spec = _spec(image="registry.example.com/gpuspark:0.1.0-cuda", service_account="driver")
    conf = _props(render_k8s(spec)["spark/spark-defaults.conf"])
    assert conf["spark.kubernetes.container.image"] == "registry.example.com/gpuspark:0.1.0-cuda"
    assert conf["spark.kubernetes.namespace"] == "gpuspark"
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "driver"
    assert conf["spark.kubernetes.driver.podTemplateFile"] == "driver-pod-template.yaml"
    assert conf["spark.kubernetes.executor.podTemplateFile"] == "executor-pod-template.yaml"
    assert conf["spark.executor.resource.gpu.vendor"] == "nvidia.com"
    assert conf["spark.executor.resource.gpu.discoveryScript"] == DEFAULT_DISCOVERY_SCRIPT
    assert conf["spark.executor.resource.gpu.amount"] == "1"
    assert conf["spark.task.resource.gpu.amount"] == "0.25"
    assert conf["spark.metrics.namespace"] == names.SPARK_NAMESPACE
    assert conf["spark.executor.memoryOverhead"] == "24g"  # [spark.conf]
    assert not [k for k in conf if k.startswith("spark.dynamicAllocation.")]  # per job kind
    assert "spark.master" not in conf  # the example's master is spark://
    k8s = _spec(conf=None).model_dump()
    k8s["spark"]["master"] = "k8s://https://api.example:6443"
    conf = _props(render_k8s(ClusterSpec.model_validate(k8s))["spark/spark-defaults.conf"])
    assert conf["spark.master"] == "k8s://https://api.example:6443"


def test_data_jobs_allocate_dynamically_training_does_not() -> None:
    files = render_k8s(load_spec(EXAMPLE), namespace_prefix="team-")
    data = _props(files["spark/vision-data.conf"])
    assert data["spark.kubernetes.namespace"] == "team-vision"
    assert data["spark.dynamicAllocation.enabled"] == "true"
    assert data["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
    assert data["spark.dynamicAllocation.maxExecutors"] == "12"  # max_gpus 12, 1 GPU each
    assert data["spark.kubernetes.executor.label.kueue.x-k8s.io/queue-name"] == "vision"
    assert data["spark.kubernetes.driver.label.kueue.x-k8s.io/priority-class"] == "vision-priority"
    train = _props(files["spark/vision-train.conf"])
    assert train["spark.dynamicAllocation.enabled"] == "false"
    assert train["spark.executor.instances"] == "4"  # guaranteed_gpus 4
    assert "spark.dynamicAllocation.shuffleTracking.enabled" not in train


def test_volcano_and_yunikorn_job_settings() -> None:
    volcano = render_k8s(_spec(conf={"spark.kubernetes.scheduler.name": "volcano"}))
    conf = _props(volcano["spark/research-train.conf"])
    assert conf["spark.kubernetes.scheduler.name"] == "volcano"
    template = conf["spark.kubernetes.scheduler.volcano.podGroupTemplateFile"]
    assert template == "research-train-podgroup.yaml"
    group = _doc(volcano, f"spark/{template}")
    assert group["spec"]["queue"] == "research"
    assert group["spec"]["minResources"]["nvidia.com/gpu"] == 4  # the train job's executors
    assert [q["metadata"]["name"] for q in _docs(volcano, "cluster/20-queues.yaml")] == [
        "radiology",
        "vision",
        "research",
    ]
    assert "kueue/kueue-configuration.yaml" not in volcano
    yunikorn = render_k8s(_spec(conf={"spark.kubernetes.scheduler.name": "yunikorn"}))
    conf = _props(yunikorn["spark/research-data.conf"])
    assert conf["spark.kubernetes.executor.label.queue"] == "root.research"
    assert "cluster/20-queues.yaml" not in yunikorn


def test_conf_dir_names_the_templates_under_it() -> None:
    files = render_k8s(
        _spec(conf={"spark.kubernetes.scheduler.name": "volcano"}), conf_dir="/etc/gs/"
    )
    conf = _props(files["spark/spark-defaults.conf"])
    assert conf["spark.kubernetes.executor.podTemplateFile"] == "/etc/gs/executor-pod-template.yaml"
    team = _props(files["spark/vision-data.conf"])
    assert team["spark.kubernetes.scheduler.volcano.podGroupTemplateFile"] == (
        "/etc/gs/vision-data-podgroup.yaml"
    )


# ----------------------------------------------------------------------------- operators


def test_spark_applications_with_kueue() -> None:
    files = render_k8s(load_spec(EXAMPLE))
    app = _doc(files, "apps/radiology-data.yaml")
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    assert app["metadata"]["namespace"] == "radiology"
    assert app["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "radiology"
    spec = app["spec"]
    assert spec["mode"] == "cluster" and spec["type"] == "Python"
    # Kueue refuses dynamic allocation on a SparkApplication: fixed executors, the team's cap
    assert "dynamicAllocation" not in spec and spec["executor"]["instances"] == 16
    assert spec["executor"]["gpu"] == {"name": "nvidia.com/gpu", "quantity": 1}
    assert spec["executor"]["template"]["spec"]["volumes"][0]["name"] == "dshm"
    assert spec["driver"]["serviceAccount"] == "spark"
    # the queue label is on the application, never on its pods (no double admission)
    assert not [k for k in spec["sparkConf"] if "kueue" in k or "podTemplateFile" in k]
    assert spec["sparkConf"]["spark.executor.resource.gpu.vendor"] == "nvidia.com"
    train = _doc(files, "apps/radiology-train.yaml")["spec"]
    assert train["executor"]["instances"] == 8 and "dynamicAllocation" not in train


def test_spark_applications_with_volcano_allocate_data_jobs_dynamically() -> None:
    files = render_k8s(_spec(conf={"spark.kubernetes.scheduler.name": "volcano"}))
    data = _doc(files, "apps/vision-data.yaml")["spec"]
    assert data["batchScheduler"] == "volcano"
    assert data["batchSchedulerOptions"] == {"queue": "vision"}
    assert data["dynamicAllocation"] == {
        "enabled": True,
        "minExecutors": 0,
        "maxExecutors": 12,
        "shuffleTrackingEnabled": True,
    }
    train = _doc(files, "apps/vision-train.yaml")["spec"]
    assert "dynamicAllocation" not in train and train["executor"]["instances"] == 4


def test_kueue_configuration_enables_the_spark_operator_integration() -> None:
    files = render_k8s(load_spec(EXAMPLE), api="v1beta1", namespace_prefix="t-")
    config = _doc(files, "kueue/kueue-configuration.yaml")
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta1"
    # FrameworkName in kueue pkg/controller/jobs/sparkapplication (v0.17+, alpha)
    assert "sparkoperator.k8s.io/sparkapplication" in config["integrations"]["frameworks"]
    assert config["featureGates"] == {"SparkApplicationIntegration": True}
    selector = config["managedJobsNamespaceSelector"]["matchExpressions"][0]
    assert selector["values"] == ["gpuspark", "t-radiology", "t-vision", "t-research"]
    assert config["resources"] == {"excludeResourcePrefixes": ["rdma/"]}  # InfiniBand
    queues = _docs(files, "cluster/20-queues.yaml")
    assert {q["apiVersion"] for q in queues} == {"kueue.x-k8s.io/v1beta1"}


# ----------------------------------------------------------------------------- monitoring


def test_monitoring_objects_carry_the_rendered_rules_and_dashboards() -> None:
    spec = _spec(monitoring_labels={"release": "prom"})
    files = render_k8s(spec)
    objects = _docs(files, "cluster/30-monitoring.yaml")
    rule = next(o for o in objects if o["kind"] == "PrometheusRule")
    assert rule["spec"]["groups"] == rule_groups(spec)
    assert rule["metadata"]["labels"]["release"] == "prom"
    jobs = set()
    for monitor in (o for o in objects if o["kind"] in ("PodMonitor", "ServiceMonitor")):
        endpoints = monitor["spec"].get("podMetricsEndpoints") or monitor["spec"]["endpoints"]
        jobs |= {e["relabelings"][0]["replacement"] for e in endpoints}
    expected = {
        names.JOB_RUNS,
        names.JOB_SPARK_APPS,
        names.JOB_SPARK_EXECUTORS,
        names.JOB_DCGM,
        names.JOB_NODE,
    }
    assert jobs == expected
    # every job the rules select on is scraped under that name
    selected = set(re.findall(r'job="([^"]+)"', json.dumps(rule_groups(spec))))
    assert selected <= jobs
    ranks = next(o for o in objects if o["metadata"]["name"] == "gpuspark-ranks")
    ports = _doc(files, "spark/executor-pod-template.yaml")["spec"]["containers"][0]["ports"]
    assert [e["port"] for e in ranks["spec"]["podMetricsEndpoints"]] == [p["name"] for p in ports]
    maps = _docs(files, "cluster/40-dashboards.yaml")
    assert all(m["metadata"]["labels"]["grafana_dashboard"] == "1" for m in maps)
    shown = {k: json.loads(v) for m in maps for k, v in m["data"].items()}
    assert shown == {f"gpuspark-{n}.json": d for n, d in build_dashboards(spec).items()}


# ----------------------------------------------------------------------------- no machine paths


def _machine_paths(tmp: Path) -> list[str]:
    found = {str(tmp), os.getcwd(), str(Path.home()), str(ROOT), sys.prefix, str(tmp.resolve())}
    return sorted(p for p in found if len(p) > 1)


@pytest.mark.parametrize("what", ["k8s", "kueue", "volcano"])
def test_no_rendered_file_names_a_path_of_this_machine(
    what: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "cluster.toml"
    conf = '"spark.kubernetes.scheduler.name" = "volcano"\n' if what == "volcano" else ""
    shuffle = '"spark.sql.shuffle.partitions" = "512"\n'
    spec.write_text(example_spec().replace(shuffle, shuffle + conf))
    out = tmp_path / "rendered"
    assert main(["render", what, str(spec), "-o", str(out)]) == 0
    capsys.readouterr()
    written = [p for p in out.rglob("*") if p.is_file()]
    assert written
    for path in written:
        text = path.read_text()
        for machine in _machine_paths(tmp_path):
            assert machine not in text, f"{path.relative_to(out)} names {machine}"
    if what == "volcano":
        conf_text = (out / "spark-volcano-vision.conf").read_text()
        assert "podGroupTemplateFile volcano-podgroup-vision.yaml" in conf_text


# ----------------------------------------------------------------------------- CLI and notes


def test_cli_render_k8s_prints_json_and_notes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "k8s", str(EXAMPLE), "--json", "--conf-dir", "/opt/conf"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "spark/spark-defaults.conf" in report["files"]
    assert any("Kueue's configuration" in n for n in report["notes"])
    assert not any("relative to spark/" in n for n in report["notes"])  # --conf-dir given
    notes = quota_notes(load_spec(EXAMPLE), "k8s")
    assert any("relative to spark/" in n for n in notes)


def test_cli_render_k8s_bad_kueue_api_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "k8s", str(EXAMPLE), "--kueue-api", "v2"]) == 2
    assert "v1beta1, v1beta2" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the spec table


def test_the_example_kubernetes_table_uncommented_is_valid() -> None:
    text = example_spec()
    start = text.index("# [kubernetes]")
    table = "\n".join(line.removeprefix("# ") for line in text[start:].splitlines())
    spec = parse_spec(text[:start] + table + "\n")
    k = spec.kubernetes
    assert k.image == "registry.example.com/gpuspark:0.1.0-cuda"
    assert k.local_dirs == ["/raid/spark"] and k.shm_size == "24Gi"
    assert k.monitoring_labels == {"release": "kube-prometheus-stack"}
    assert parse_spec(text).kubernetes.image == "gpuspark:latest"  # commented out: defaults
    render_k8s(spec)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('shm_size = "lots"', 'kubernetes.shm_size="lots": must be a Kubernetes quantity'),
        ('namespace = "Team_A"', 'kubernetes.namespace="Team_A": must be a namespace name'),
        ('local_dirs = ["scratch"]', "'scratch' must be an absolute path on the nodes"),
        ('local_dirs = ["/dev/shm"]', "/dev/shm is the memory-backed volume"),
        ('rdma_resource = "rdma"', "must be an extended resource name"),
        ('tolerations = [{ key = "a", value = "b" }]', 'a value needs operator = "Equal"'),
        (
            'imag = "x"',
            "kubernetes.imag is not a known key in [kubernetes] (did you mean 'image'?)",
        ),
    ],
)
def test_kubernetes_table_errors_are_one_line(line: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(example_spec() + f"[kubernetes]\n{line}\n", source="c.toml")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_session_team_conf_keeps_its_queue_labels() -> None:
    backend = backend_for("k8s://https://api:6443")
    spec = _spec()
    conf = backend.team_conf(spec, "vision")
    assert conf == {
        "spark.kubernetes.driver.label.kueue.x-k8s.io/queue-name": "vision",
        "spark.kubernetes.executor.label.kueue.x-k8s.io/queue-name": "vision",
        "spark.kubernetes.namespace": "vision",  # as render k8s names the team's namespace
        "spark.dynamicAllocation.maxExecutors": "12",  # max_gpus 12 / 1 GPU per executor
    }
    yunikorn = backend.team_conf(
        _spec(conf={"spark.kubernetes.scheduler.name": "yunikorn"}), "vision"
    )
    assert yunikorn["spark.kubernetes.driver.label.queue"] == "root.vision"


def test_teams_that_become_one_kubernetes_name_are_refused() -> None:
    data = parse_spec(example_spec()).model_dump()
    data["teams"][1]["name"] = "Radiology"
    with pytest.raises(SpecError, match="'radiology' and 'Radiology' both become Kubernetes name"):
        render_k8s(ClusterSpec.model_validate(data))
