"""Team quotas enforced by Spark itself on the embedded cluster (2 workers x 8 cores x 2
simulated GPUs; executors of 8 cores and 2 GPUs): two teams' concurrent applications, the
capped team never above its ``max_gpus`` (figures from the master's and workers' ``/json/``);
``quota status`` live; ``quota why`` for an executor shape no worker holds and for a team at
its ceiling. Applications other than the first run in subprocesses (one SparkContext per
process). The one whose shape no worker holds is built with PySpark's own builder, as
``spark-submit`` or another tool would: gpuspark's session path refuses that shape before it
reaches the master (:mod:`gpuspark.cluster.fit`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuspark.cluster import fit
from gpuspark.cluster.session import session_plan
from gpuspark.errors import ClusterError
from gpuspark.quota import status, team, why
from gpuspark.schedulers.standalone import api as standalone_api
from gpuspark.spec import ClusterSpec, default_spec

pytestmark = pytest.mark.spark

_APP = """
import json, os, sys, time
from gpuspark.cluster.local import LocalCluster
from gpuspark.cluster.session import session, session_plan
state_dir, name, conf, stop = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
cluster = LocalCluster.running(state_dir)
if sys.argv[5] == "gpuspark":
    spark = session(cluster.master_url, cluster=cluster, app_name=name, **conf)
else:  # a foreign application: gpuspark's settings, Spark's own builder, no checks
    from pyspark.sql import SparkSession
    plan = session_plan(cluster.master_url, cluster=cluster, app_name=name, **conf)
    os.environ.update(plan.env)
    builder = SparkSession.builder.master(plan.master).appName(name)
    for key, value in plan.conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
deadline = time.time() + 120
while not os.path.exists(stop) and time.time() < deadline:
    time.sleep(0.5)
spark.stop()
"""


def make_spec() -> ClusterSpec:
    data = default_spec().model_dump()
    data["teams"] = [
        {"name": "vision", "guaranteed_gpus": 2, "max_gpus": 2},
        {"name": "nlp", "guaranteed_gpus": 2, "max_gpus": 4},
    ]
    return ClusterSpec.model_validate(data)


def _wait(check: Callable[[], Any], what: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(1.0)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture()
def apps(tmp_path: Path, local_cluster: Any) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start applications in subprocesses; all stopped (stop file) and reaped at the end."""
    script = tmp_path / "app.py"
    script.write_text(_APP)
    stop = tmp_path / "stop"
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, conf: dict[str, str], via: str = "gpuspark") -> subprocess.Popen[bytes]:
        args = [sys.executable, str(script), str(local_cluster.state_dir), name]
        proc = subprocess.Popen([*args, json.dumps(conf), str(stop), via])
        started.append(proc)
        return proc

    yield start
    stop.write_text("")
    for proc in started:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.own_session
def test_two_teams_capped_status_and_why(
    local_cluster: Any, spark_factory: Any, apps: Callable[..., Any]
) -> None:
    spark_factory.stop()  # the cluster to ourselves
    spec = make_spec()
    web = f"http://{local_cluster.state.host}:{local_cluster.state.webui_port}"
    snap = lambda: standalone_api.standalone_snapshot(web)  # noqa: E731
    master = local_cluster.master_url
    quick = {"spark.scheduler.maxRegisteredResourcesWaitingTime": "2s"}

    # vision (max_gpus 2) first, on an empty cluster: uncapped it would take both workers.
    vision = team.team_conf(spec, "vision", master, state_dir=local_cluster.state_dir)
    assert vision["spark.cores.max"] == "8"  # one executor of 8 cores and 2 GPUs
    spark_factory.get(**vision, **quick, **{"spark.app.name": team.team_app_name("qa", "vision")})
    a = _wait(
        lambda: next((x for x in snap().apps if x.team == "vision" and x.gpus_held), None),
        "the vision app's executor",
    )
    # nlp (max_gpus 4) at the same time, in another process.
    nlp = team.team_conf(spec, "nlp", master, state_dir=local_cluster.state_dir)
    apps(team.team_app_name("qb", "nlp"), {**nlp, **quick})
    _wait(lambda: any(x.team == "nlp" and x.gpus_held for x in snap().apps), "the nlp app")

    now = snap()
    held = {x.team: x.gpus_held for x in now.apps}
    assert held == {"vision": 2, "nlp": 2}, held  # vision within max_gpus; nlp got the rest
    master_app = next(x for x in now.apps if x.id == a.id)
    assert master_app.cores == 8 and master_app.state == "RUNNING"  # master /json/ figures
    rows = {r.team: r for r in status.standalone_usage(spec, now)}
    assert (rows["vision"].gpus_in_use, rows["nlp"].gpus_in_use) == (2, 2)
    assert (rows["vision"].running_apps, rows["nlp"].running_apps) == (1, 1)

    # A second vision app (team at its ceiling) and one asking 4 GPUs per executor.
    apps(team.team_app_name("qc", "vision"), {**vision, **quick})
    big = {**nlp, **quick, "spark.executor.resource.gpu.amount": "4"}
    big["spark.task.resource.gpu.amount"] = "0.5"
    with pytest.raises(ClusterError, match="can never start"):  # gpuspark's own path refuses it
        fit.check_fits(master, session_plan(master, cluster=local_cluster, **big).conf, web)
    apps(team.team_app_name("qd", "nlp"), big, via="pyspark")
    waiting = _wait(
        lambda: (s := snap()) and len([x for x in s.apps if x.state == "WAITING"]) == 2 and s,
        "two waiting apps",
    )
    by_name = {x.name.split(" [")[0]: x for x in waiting.apps}
    ceiling = why.why_standalone(waiting, by_name["qc"].id, spec)
    assert ceiling.cause == "team-ceiling", ceiling
    assert "holds 2 of max_gpus 2" in ceiling.message
    shape = why.why_standalone(waiting, "qd", spec, local_cluster.state.master_log)
    assert shape.cause == "shape" and "4 GPUs per executor" in shape.message, shape
    assert by_name["qd"].gpus_held == 0 and by_name["qc"].gpus_held == 0

    # The same through the public entry points (the running embedded cluster is found).
    where, rows_list = status.quota_status(spec, master=master, state_dir=local_cluster.state_dir)
    live = {r.team: r for r in rows_list}
    assert where.kind == "standalone" and live["vision"].pending_apps == 1
    assert live["nlp"].pending_apps == 1 and live["vision"].gpus_in_use == 2
    reason = why.explain(spec, "qc", master=master, state_dir=local_cluster.state_dir)
    assert reason.cause == "team-ceiling"
    spark_factory.stop()
