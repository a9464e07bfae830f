"""Jobs on ``k8s://``: the session takes the spec's ``[kubernetes]`` table (image, namespace,
service account, the pod templates ``render k8s`` writes, the GPU vendor and the image's
discovery script) and the team's namespace and queue, with dynamic allocation for data jobs
only; a session without an image or naming a missing template is refused before Spark starts.

The slow tests run real Spark against the recording stand-in of the API server
(``tests/k8s_standin.py``; no API server can run here): ``gpuspark launch`` in client mode
(Spark POSTs the executor pods) and ``spark-submit --deploy-mode cluster`` with the files of
``render k8s`` (Spark's submission client POSTs the driver pod). Nothing runs those pods: each
test stops its process group once the pods are recorded, then checks what Spark asked for.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpuspark._util.procs import spawn_group, terminate_groups
from gpuspark.cluster.session import session_plan
from gpuspark.cluster.submit import team_conf
from gpuspark.errors import ClusterError
from gpuspark.quota.render import render_k8s, write_quota
from gpuspark.spec import ClusterSpec, parse_spec
from gpuspark.spec.models import DEFAULT_DISCOVERY_SCRIPT
from k8s_standin import StandIn  # tests/k8s_standin.py

MASTER = "k8s://https://127.0.0.1:6443"
IMAGE = "registry.example.com/gpuspark:0.1.0-test"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GPU = "nvidia.com/gpu"
PRODUCT = "NVIDIA-A100-SXM4-80GB"
TEMPLATE = "spark.kubernetes.{}.podTemplateFile"
VERSIONS = ("1.29", kubernetes_validate.latest_version())
KUBERNETES = f"""
[kubernetes]
image = "{IMAGE}"
gpu_product = "{PRODUCT}"
local_dirs = ["/nvme/spark"]
"""


def spec_text(
    master: str = "spark://dgx01:7077",
    *,
    kubernetes: str = KUBERNETES,
    conf: dict[str, str] | None = None,
    members: tuple[str, ...] = ("carol",),
    event_log: bool = True,
) -> str:
    """A small spec: 2 nodes x 4 GPUs on InfiniBand, executors of 2 GPUs, team ``vision``
    (2 guaranteed, 4 at most), the ``[kubernetes]`` table given, ``conf`` as ``[spark.conf]``
    (``event_log``: off where a driver runs here without the shared event log folder)."""
    lines = [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in (conf or {}).items()]
    return f"""
name = "kube"

[[nodes]]
name = "gpu"
hosts = ["n1", "n2"]
gpus_per_node = 4
gpu_model = "A100-SXM4-80GB"
gpu_memory_gb = 80
cpu_cores = 64
ram_gb = 512
nvme_tb = 4

[networks.compute]
kind = "infiniband"
gbps = 100
latency_us = 1.0

[networks.storage]
kind = "ethernet"
gbps = 25

[spark]
master = "{master}"
executor_gpus = 2
task_gpu_amount = 0.5
executor_cores = 4
task_cpus = 1
executor_memory = "1g"
event_log = {json.dumps(event_log)}

[spark.conf]
{chr(10).join(lines)}

[[teams]]
name = "vision"
guaranteed_gpus = 2
max_gpus = 4
members = {json.dumps(list(members))}
{kubernetes}
"""


def make_spec(**kwargs: Any) -> ClusterSpec:
    return parse_spec(spec_text(**kwargs))


@pytest.fixture(autouse=True)
def _state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Templates and Spark's state under the test's folder."""
    quota = tmp_path / "quota"
    monkeypatch.setenv("GPUSPARK_QUOTA_DIR", str(quota))
    monkeypatch.setenv("GPUSPARK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUSPARK_LOG_DIR", str(tmp_path / "logs"))
    return quota


def plan_conf(spec: ClusterSpec, kind: str, team: str | None = "vision") -> dict[str, str]:
    """The conf of a session of ``kind`` on :data:`MASTER`, as ``prepare_job`` makes it."""
    return session_plan(MASTER, spec, kind=kind, **team_conf(spec, team, MASTER)).conf


# ----------------------------------------------------------------------------- the plan


@pytest.mark.parametrize("kind", ["training", "data"])
def test_the_session_takes_the_kubernetes_table(kind: str) -> None:
    spec = make_spec()  # the spec's master is spark://: the session's decides
    conf = plan_conf(spec, kind)
    assert conf["spark.kubernetes.container.image"] == IMAGE
    assert conf["spark.kubernetes.namespace"] == "vision"  # the team's, as render k8s names it
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "spark"
    assert conf["spark.executor.resource.gpu.vendor"] == "nvidia.com"
    assert conf["spark.executor.resource.gpu.amount"] == "2"
    assert conf["spark.executor.resource.gpu.discoveryScript"] == DEFAULT_DISCOVERY_SCRIPT
    assert conf[f"spark.kubernetes.executor.label.{QUEUE_LABEL}"] == "vision"
    assert conf[f"spark.kubernetes.driver.label.{QUEUE_LABEL}"] == "vision"
    assert conf["spark.driver.port"] == "7078" and conf["spark.blockManager.port"] == "7079"
    assert "spark.master" not in conf
    rendered = render_k8s(spec)
    for role in ("driver", "executor"):
        path = Path(conf[TEMPLATE.format(role)])
        assert path.is_absolute() and path.is_file()
        assert path.read_text() == rendered[f"spark/{role}-pod-template.yaml"]
    if kind == "training":  # a barrier stage refuses dynamic allocation (SPARK-24942)
        assert conf["spark.dynamicAllocation.enabled"] == "false"
        assert "spark.dynamicAllocation.shuffleTracking.enabled" not in conf
    else:  # no external shuffle service on Kubernetes: shuffle tracking
        assert conf["spark.dynamicAllocation.enabled"] == "true"
        assert conf["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
        assert conf["spark.dynamicAllocation.maxExecutors"] == "2"  # max_gpus 4 / 2 per executor


def test_executors_run_the_images_python_unless_the_spec_names_one() -> None:
    from gpuspark.schedulers.kubernetes.session import IMAGE_PYTHON

    containerfile = (Path(__file__).parents[3] / "Containerfile").read_text()
    assert f"PYSPARK_PYTHON={IMAGE_PYTHON}" in containerfile  # the image's own Python
    plan = session_plan(MASTER, make_spec(), kind="training")
    assert plan.conf["spark.pyspark.python"] == IMAGE_PYTHON
    assert plan.conf["spark.executorEnv.PYSPARK_PYTHON"] == IMAGE_PYTHON
    assert plan.env["PYSPARK_PYTHON"] == IMAGE_PYTHON  # what pyspark hands the executors
    assert plan.conf["spark.pyspark.driver.python"] == sys.executable  # this process
    packed = make_spec(conf={"spark.pyspark.python": "./environment/bin/python"})
    plan = session_plan(MASTER, packed, kind="training")  # venv-pack + spark.archives
    assert plan.conf["spark.pyspark.python"] == "./environment/bin/python"
    assert plan.env["PYSPARK_PYTHON"] == "./environment/bin/python"


def test_without_a_team_the_shared_namespace_and_the_spec_master() -> None:
    spec = make_spec(master=MASTER, kubernetes=KUBERNETES + 'namespace = "ml-jobs"\n')
    plan = session_plan(None, spec, kind="data")
    assert plan.master == MASTER
    assert plan.conf["spark.kubernetes.namespace"] == "ml-jobs"
    assert not any(QUEUE_LABEL in key for key in plan.conf)


def test_spark_conf_overrides_the_kubernetes_settings(tmp_path: Path) -> None:
    own = tmp_path / "mine.yaml"
    own.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod"}))
    overrides = {
        "spark.driver.port": "40000",
        "spark.driver.host": "driver.vision.svc",
        "spark.kubernetes.container.image": "other/gpuspark:1",
        "spark.kubernetes.executor.podTemplateFile": str(own),
    }
    conf = plan_conf(make_spec(conf=overrides), "training", team=None)
    assert {k: conf[k] for k in overrides} == overrides
    assert conf["spark.blockManager.port"] == "7079"


def test_templates_are_written_only_when_they_change(_state: Path) -> None:
    first = Path(plan_conf(make_spec(), "training")[TEMPLATE.format("executor")])
    stamp = first.stat().st_mtime_ns
    time.sleep(0.01)
    assert Path(plan_conf(make_spec(), "data")[TEMPLATE.format("executor")]) == first
    assert first.stat().st_mtime_ns == stamp  # same content: not written again
    changed = make_spec(kubernetes=KUBERNETES.replace(PRODUCT, "NVIDIA-H100-80GB-HBM3"))
    plan_conf(changed, "training")
    assert "NVIDIA-H100-80GB-HBM3" in first.read_text()
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".")]  # no temp left


# ----------------------------------------------------------------------------- refusals


def test_a_spec_without_an_image_is_refused() -> None:
    spec = make_spec(kubernetes="")  # no [kubernetes] table
    with pytest.raises(ClusterError, match=r"spark\.kubernetes\.container\.image") as caught:
        plan_conf(spec, "training")
    assert "make image" in str(caught.value.remedy) and "\n" not in str(caught.value)
    given = make_spec(kubernetes="", conf={"spark.kubernetes.container.image": "mine:1"})
    assert plan_conf(given, "training")["spark.kubernetes.container.image"] == "mine:1"
    assert (
        session_plan(MASTER, spec, spark_kubernetes_container_image="cli:2").conf[
            "spark.kubernetes.container.image"
        ]
        == "cli:2"
    )


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_a_missing_template_is_refused(
    role: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # render k8s names its templates relative to spark/
    spec = make_spec(conf={TEMPLATE.format(role): f"{role}-pod-template.yaml"})
    with pytest.raises(ClusterError, match=f"{role}-pod-template.yaml: no such file") as caught:
        plan_conf(spec, "training")
    assert "gpuspark render k8s SPEC -o DIR" in str(caught.value.remedy)
    remote = make_spec(conf={TEMPLATE.format(role): "s3a://bucket/t.yaml"})
    assert plan_conf(remote, "training")[TEMPLATE.format(role)] == "s3a://bucket/t.yaml"


# ----------------------------------------------------------------------------- live Spark

SCRIPT = "print('a rank ran: no executor pod runs here')\n"


def _need_java() -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17+ (make java installs it)")


def _run_until(
    cmd: list[str], log: Path, env: dict[str, str], cwd: Path, done: Callable[[], bool]
) -> tuple[bool, str]:
    """Run ``cmd`` in its own process group until ``done()`` (checked on each change of the
    stand-in) or 80 s; stop the group; (done, the log's end)."""
    pid = spawn_group(cmd, log, env=env, cwd=cwd)
    try:
        deadline = time.monotonic() + 80
        ok = False
        while time.monotonic() < deadline and not ok:
            ok = done()
            time.sleep(0.2)
    finally:
        terminate_groups([pid], timeout=20)
    return ok, log.read_text(errors="replace")[-4000:]


def _env(tmp_path: Path) -> dict[str, str]:
    """This environment without a kubeconfig, and without a Python of this machine that
    ``spark-submit`` would hand on to the pods (the image has its own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    return {**env, "KUBECONFIG": str(tmp_path / "no-kubeconfig")}


def _applied(standin: StandIn, plural: str) -> list[Any]:
    """Bodies of the objects of ``plural`` created by POST or server-side apply (PATCH)."""
    return [
        r.body
        for r in list(standin.requests)
        if r.method in ("POST", "PATCH") and f"/{plural}" in r.path and isinstance(r.body, dict)
    ]


def _valid_pod(pod: dict[str, Any]) -> None:
    for version in VERSIONS:
        kubernetes_validate.validate(pod, version, strict=True)


def _template_parts(pod: dict[str, Any], spec: ClusterSpec, role: str) -> None:
    """The tolerations (and, for executors, the volumes and ``/dev/shm``) of ``role``'s
    template, as ``render k8s`` writes it, are in the pod Spark made."""
    template = yaml.safe_load(render_k8s(spec)[f"spark/{role}-pod-template.yaml"])
    for toleration in template["spec"]["tolerations"]:
        assert toleration in pod["spec"]["tolerations"]
    if role == "executor":
        names = {v["name"]: v for v in pod["spec"]["volumes"]}
        for volume in template["spec"]["volumes"]:
            assert names[volume["name"]] == volume
        (container,) = pod["spec"]["containers"]
        shm = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        assert shm and names[shm[0]["name"]]["emptyDir"]["medium"] == "Memory"
        assert pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == PRODUCT


@pytest.mark.slow
@pytest.mark.spark
def test_launch_on_k8s_asks_for_the_spec_executor_pods(
    k8s_standin: StandIn, tmp_path: Path
) -> None:
    """Client mode: ``gpuspark launch --master k8s://…``; the driver is the launcher."""
    _need_java()
    k8s_standin.require(cert=True)
    auth = {  # client mode reads spark.kubernetes.authenticate.*
        "spark.kubernetes.authenticate.caCertFile": str(k8s_standin.ca_file),
        "spark.kubernetes.authenticate.clientCertFile": str(k8s_standin.client_cert),
        "spark.kubernetes.authenticate.clientKeyFile": str(k8s_standin.client_key),
        "spark.driver.host": "127.0.0.1",
        "spark.ui.enabled": "false",
    }
    text = spec_text(conf=auth, members=(getpass.getuser(),), event_log=False)
    spec_file = tmp_path / "kube.toml"
    spec_file.write_text(text)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    gpuspark = Path(sys.executable).parent / "gpuspark"
    master = f"k8s://{k8s_standin.url}"
    cmd = [str(gpuspark), "launch", "-n", "2", "--master", master, "--spec", str(spec_file)]
    cmd += ["--team", "vision", str(script)]
    env = {**_env(tmp_path), "GPUSPARK_QUOTA_DIR": str(tmp_path / "quota")}
    made, tail = _run_until(
        cmd, tmp_path / "launch.log", env, tmp_path, lambda: len(k8s_standin.posted("pods")) >= 2
    )
    assert made, f"Spark created no executor pods; the launcher's log ends:\n{tail}"
    spec = parse_spec(text)
    pods: list[dict[str, Any]] = k8s_standin.posted("pods")
    for pod in pods:
        labels = pod["metadata"]["labels"]
        (container,) = pod["spec"]["containers"]
        assert labels["spark-role"] == "executor" and labels[QUEUE_LABEL] == "vision"
        assert container["image"] == IMAGE
        assert container["resources"]["limits"][GPU] == "2"  # the spec's executor_gpus
        assert container["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
        assert "IPC_LOCK" in container["securityContext"]["capabilities"]["add"]
        _template_parts(pod, spec, "executor")
        _valid_pod(pod)
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["SPARK_DRIVER_URL"].endswith("@127.0.0.1:7078")  # the fixed driver port
    created = {r.path for r in k8s_standin.requests if r.method == "POST"}
    assert "/api/v1/namespaces/vision/pods" in created  # the team's namespace


@pytest.mark.slow
@pytest.mark.spark
def test_cluster_mode_spark_submit_with_the_rendered_files(
    k8s_standin: StandIn, tmp_path: Path
) -> None:
    """Cluster mode: pyspark's ``spark-submit --deploy-mode cluster`` with ``render k8s``'s
    ``spark/`` folder (``--load-spark-defaults``: Spark 4 reads spark-defaults.conf too)."""
    _need_java()
    import pyspark

    k8s_standin.require(cert=True)
    spec = make_spec()
    write_quota(render_k8s(spec), tmp_path / "k8s")
    folder = tmp_path / "k8s" / "spark"
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    auth = {  # the submission client reads spark.kubernetes.authenticate.submission.*
        "spark.kubernetes.authenticate.submission.caCertFile": str(k8s_standin.ca_file),
        "spark.kubernetes.authenticate.submission.clientCertFile": str(k8s_standin.client_cert),
        "spark.kubernetes.authenticate.submission.clientKeyFile": str(k8s_standin.client_key),
        "spark.kubernetes.submission.waitAppCompletion": "false",
    }
    cmd = [str(submit), "--master", f"k8s://{k8s_standin.url}", "--deploy-mode", "cluster"]
    cmd += ["--properties-file", "vision-train.conf", "--load-spark-defaults"]
    for key, value in auth.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd.append("local:///opt/gpuspark/jobs/train_job.py")
    env = {**_env(tmp_path), "SPARK_CONF_DIR": str(folder)}
    made, tail = _run_until(
        cmd,
        tmp_path / "submit.log",
        env,
        folder,
        lambda: bool(k8s_standin.posted("pods")) and _applied(k8s_standin, "configmaps"),
    )
    assert made, f"no driver pod and ConfigMap recorded; spark-submit's log ends:\n{tail}"
    (pod,) = k8s_standin.posted("pods")
    assert pod["metadata"]["labels"]["spark-role"] == "driver"
    assert pod["metadata"]["labels"][QUEUE_LABEL] == "vision"
    assert pod["spec"]["serviceAccountName"] == "spark"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == spec.kubernetes.image
    _template_parts(pod, spec, "driver")
    _valid_pod(pod)
    assert sys.executable not in json.dumps(pod)  # nothing of this machine
    assert _applied(k8s_standin, "configmaps")  # the driver's conf and pod templates
    created = {r.path for r in k8s_standin.requests if r.method == "POST"}
    assert "/api/v1/namespaces/vision/pods" in created


def test_a_training_job_asks_for_the_executors_its_gpus_fill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuspark.cluster.submit import prepare_job

    monkeypatch.setattr("getpass.getuser", lambda: "carol")  # a member of vision

    spec = make_spec()  # 2 GPUs per executor; vision may hold 4
    job = prepare_job("training", spec=spec, master=MASTER, team="vision", gpus=4)
    assert job.conf["spark.executor.instances"] == "2"
    job = prepare_job("training", spec=spec, master=MASTER, team="vision", gpus=3)
    assert job.conf["spark.executor.instances"] == "2"  # 3 ranks of 1 GPU: 2 executors
    data = prepare_job("data", spec=spec, master=MASTER, team="vision", gpus=4)
    assert "spark.executor.instances" not in data.conf  # dynamic allocation sizes data jobs
    fixed = make_spec(conf={"spark.executor.instances": "1"})
    job = prepare_job("training", spec=fixed, master=MASTER, team="vision", gpus=4)
    assert "spark.executor.instances" not in job.conf  # the spec's own count stands
