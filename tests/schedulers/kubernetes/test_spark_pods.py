"""Spark makes the executor pods: pyspark's own ``spark-submit`` (Spark's Kubernetes client,
fabric8) in client mode against the recording stand-in of the API server
(``tests/k8s_standin.py``), which keeps the pods Spark POSTs. Nothing runs those pods, so the
driver would wait for its executors forever: the test stops spark-submit's process group once
both pods are recorded, then checks what Spark asked Kubernetes for."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuspark._util.procs import spawn_group, terminate_groups
from k8s_standin import StandIn  # tests/k8s_standin.py

pytestmark = [pytest.mark.spark, pytest.mark.slow]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
APP = """\
from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("gpuspark-pods").getOrCreate()
print(spark.range(4).count())
"""


def spark_submit() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


def submit_command(standin: StandIn, app: Path, conf: dict[str, str]) -> list[str]:
    """``spark-submit --master k8s://<stand-in> --deploy-mode client`` with the stand-in's CA
    and client certificate (client mode reads ``spark.kubernetes.authenticate.*``)."""
    auth = {
        "spark.kubernetes.authenticate.caCertFile": str(standin.ca_file),
        "spark.kubernetes.authenticate.clientCertFile": str(standin.client_cert),
        "spark.kubernetes.authenticate.clientKeyFile": str(standin.client_key),
        "spark.driver.host": "127.0.0.1",
        "spark.ui.enabled": "false",
    }
    cmd = [str(spark_submit()), "--master", f"k8s://{standin.url}", "--deploy-mode", "client"]
    for key, value in {**auth, **conf}.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, str(app)]


def test_spark_submit_asks_for_gpu_executor_pods_on_the_team_queue(
    k8s_standin: StandIn, tmp_path: Path
) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17+ (make java installs it)")
    k8s_standin.require(cert=True)
    app = tmp_path / "app.py"
    app.write_text(APP)
    conf = {
        "spark.kubernetes.container.image": "gpuspark:test",
        "spark.kubernetes.namespace": "gpuspark",
        "spark.executor.instances": "2",
        "spark.executor.resource.gpu.amount": "1",
        "spark.executor.resource.gpu.vendor": "nvidia.com",
        f"spark.kubernetes.executor.label.{QUEUE_LABEL}": "vision",
    }
    log = tmp_path / "spark-submit.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "KUBECONFIG": str(tmp_path / "none")}
    pid = spawn_group(submit_command(k8s_standin, app, conf), log, env=env, cwd=tmp_path)
    try:
        made = k8s_standin.wait_for(lambda: len(k8s_standin.posted("pods")) >= 2, timeout=240)
    finally:
        terminate_groups([pid], timeout=30)
    tail = log.read_text(errors="replace")[-3000:]
    assert made, f"Spark did not create 2 executor pods; spark-submit's log ends:\n{tail}"
    pods: list[dict[str, Any]] = k8s_standin.posted("pods")
    assert len(pods) == 2
    for pod in pods:
        labels = pod["metadata"]["labels"]
        (container,) = pod["spec"]["containers"]
        assert labels["spark-role"] == "executor" and labels[QUEUE_LABEL] == "vision"
        assert container["image"] == "gpuspark:test"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    created = [r for r in k8s_standin.requests if r.method == "POST" and r.path.endswith("pods")]
    assert {r.path for r in created} == {"/api/v1/namespaces/gpuspark/pods"}
    assert {r.user for r in k8s_standin.requests} == {k8s_standin.pki.client_name}
    watches = [r for r in k8s_standin.requests if r.query.get("watch") == "true"]
    assert watches, "Spark watches its executor pods"
