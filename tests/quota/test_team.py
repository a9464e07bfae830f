"""Team resolution, submit settings per master, the GPU ceiling refusal; the YARN and Kueue
clients against a local HTTP server on 127.0.0.1 serving the documented JSON shapes with the
schedulers' real diagnostic strings (YARN and Kueue cannot run here); ``quota why``
classification; the standalone parser on a ``/json/`` document recorded from the embedded
cluster."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gpuspark.errors import LaunchError, SpecError
from gpuspark.quota import status, team, why
from gpuspark.schedulers.kubernetes import api as k8s_api
from gpuspark.schedulers.standalone import api as standalone_api
from gpuspark.spec import ClusterSpec, default_spec

# --------------------------------------------------------------------------- fixtures


def make_spec(**spark: Any) -> ClusterSpec:
    data = default_spec().model_dump()
    data["spark"].update(spark)
    data["teams"] = [
        {"name": "vision", "guaranteed_gpus": 2, "max_gpus": 2, "members": ["alice", "bob"]},
        {"name": "nlp", "guaranteed_gpus": 2, "max_gpus": 4, "members": ["carol"]},
    ]
    return ClusterSpec.model_validate(data)


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, Any]] = {}
    seen_auth: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen_auth.append(self.headers.get("Authorization", ""))
        body = self.routes.get(self.path)
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture()
def server() -> Iterator[tuple[str, dict[str, Any]]]:
    routes: dict[str, Any] = {}
    handler = type("H", (_Handler,), {"routes": routes, "seen_auth": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", routes
    httpd.shutdown()
    httpd.server_close()


# --------------------------------------------------------------------------- team


def test_resolve_team_by_name_members_and_default() -> None:
    spec = make_spec()
    named = team.resolve_team(spec, "nlp", user="carol")
    default = team.resolve_team(spec, None, user="bob")  # default: the team listing the user
    assert named is not None and named.name == "nlp"
    assert default is not None and default.name == "vision"
    assert team.resolve_team(spec, None, user="nobody") is None
    with pytest.raises(SpecError, match=r"did you mean 'vision'"):
        team.resolve_team(spec, "visoin", user="alice")
    with pytest.raises(LaunchError, match=r"user 'carol' is not a member of team 'vision'"):
        team.resolve_team(spec, "vision", user="carol")


def test_app_name_tag_round_trip() -> None:
    name = team.team_app_name("gpuspark-train-x", "nlp")
    assert name == "gpuspark-train-x [team=nlp]"
    assert team.app_team(name) == "nlp"
    assert team.team_app_name(name, "vision") == "gpuspark-train-x [team=vision]"
    assert team.app_team("plain") is None and team.team_app_name("plain", None) == "plain"


def test_team_conf_per_master() -> None:
    spec = make_spec()
    assert team.team_conf(spec, None, "yarn") == {}
    yarn = team.team_conf(spec, "nlp", "yarn")
    assert yarn == {"spark.gpuspark.team": "nlp", "spark.yarn.queue": "nlp"}
    k8s = team.team_conf(spec, "nlp", "k8s://https://api:6443")
    assert k8s["spark.kubernetes.driver.label.kueue.x-k8s.io/queue-name"] == "nlp"
    assert k8s["spark.kubernetes.executor.label.kueue.x-k8s.io/queue-name"] == "nlp"


def test_team_conf_volcano(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSPARK_QUOTA_DIR", str(tmp_path))
    spec = make_spec(conf={"spark.kubernetes.scheduler.name": "volcano"})
    conf = team.team_conf(spec, "vision", "k8s://https://api:6443")
    assert conf["spark.kubernetes.scheduler.name"] == "volcano"
    assert conf["spark.kubernetes.driver.pod.featureSteps"].endswith("VolcanoFeatureStep")
    template = Path(conf["spark.kubernetes.scheduler.volcano.podGroupTemplateFile"])
    import yaml

    doc = yaml.safe_load(template.read_text())
    assert doc["kind"] == "PodGroup" and doc["spec"]["queue"] == "vision"


def test_standalone_caps_keep_executors_within_max_gpus() -> None:
    spec = make_spec(executor_gpus=2, executor_cores=4)
    for name, gpus, cores in (("vision", 2, 8), ("nlp", 2, 8), ("nlp", 1, 3), ("nlp", 3, 5)):
        conf = team.team_conf(spec, name, "spark://h:7077", shape=(gpus, cores))
        max_gpus = next(t.max_gpus for t in spec.teams if t.name == name)
        executors = int(conf["spark.cores.max"]) // cores  # whole executors standalone starts
        assert int(conf["spark.dynamicAllocation.maxExecutors"]) == executors
        assert executors * gpus <= max_gpus < (executors + 1) * gpus
    with pytest.raises(LaunchError, match="less than one executor's 4"):
        team.team_conf(spec, "vision", "spark://h:7077", shape=(4, 8))


def test_ceiling_refused_with_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "bob")
    spec = make_spec()
    team.check_team_gpus(spec, "nlp", 4)
    with pytest.raises(LaunchError, match=r"asks 6 GPUs but team 'nlp' may hold at most 4"):
        team.check_team_gpus(spec, "nlp", 6)
    with pytest.raises(LaunchError, match="at most 2"):
        team.submit_under(spec, "vision", "yarn", gpus=3)


def test_launch_refuses_above_ceiling_before_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuspark import launch

    monkeypatch.setattr("getpass.getuser", lambda: "alice")
    with pytest.raises(LaunchError, match=r"asks 4 GPUs but team 'vision' may hold at most 2"):
        launch.run(print, num_processes=4, gpus_per_process=1, spec=make_spec(), team="vision")


# --------------------------------------------------------------------------- YARN

# Shapes of GET /ws/v1/cluster/scheduler (Capacity Scheduler, Hadoop 3.x ResourceManager REST
# API "Cluster Scheduler API"), trimmed to the fields gpuspark reads plus neighbours.
YARN_SCHEDULER = {
    "scheduler": {
        "schedulerInfo": {
            "type": "capacityScheduler",
            "capacity": 100.0,
            "usedCapacity": 37.5,
            "maxCapacity": 100.0,
            "queueName": "root",
            "queues": {
                "queue": [
                    {
                        "type": "capacitySchedulerLeafQueueInfo",
                        "capacity": 25.0,
                        "usedCapacity": 100.0,
                        "maxCapacity": 25.0,
                        "absoluteCapacity": 25.0,
                        "absoluteMaxCapacity": 25.0,
                        "absoluteUsedCapacity": 25.0,
                        "numApplications": 3,
                        "numActiveApplications": 1,
                        "numPendingApplications": 2,
                        "queueName": "vision",
                        "state": "RUNNING",
                        "resourcesUsed": {
                            "memory": 16384,
                            "vCores": 9,
                            "resourceInformations": {
                                "resourceInformation": [
                                    {"name": "memory-mb", "units": "Mi", "value": 16384},
                                    {"name": "vcores", "units": "", "value": 9},
                                    {"name": "yarn.io/gpu", "units": "", "value": 2},
                                ]
                            },
                        },
                    },
                    {
                        "capacity": 50.0,
                        "usedCapacity": 12.5,
                        "maxCapacity": 100.0,
                        "queueName": "research",
                        "queues": {
                            "queue": [
                                {
                                    "type": "capacitySchedulerLeafQueueInfo",
                                    "capacity": 100.0,
                                    "usedCapacity": 25.0,
                                    "maxCapacity": 100.0,
                                    "absoluteCapacity": 50.0,
                                    "absoluteMaxCapacity": 100.0,
                                    "absoluteUsedCapacity": 12.5,
                                    "numActiveApplications": 1,
                                    "numPendingApplications": 0,
                                    "queueName": "nlp",
                                    "state": "RUNNING",
                                    "resourcesUsed": {
                                        "memory": 8192,
                                        "vCores": 4,
                                        "resourceInformations": {
                                            "resourceInformation": [
                                                {"name": "yarn.io/gpu", "value": 1}
                                            ]
                                        },
                                    },
                                }
                            ]
                        },
                    },
                ]
            },
        }
    }
}


def _yarn_app(state: str, diagnostics: str) -> dict[str, Any]:
    return {
        "app": {
            "id": "application_1700000000000_0007",
            "user": "alice",
            "name": "gpuspark-train-mnist [team=vision]",
            "queue": "vision",
            "state": state,
            "finalStatus": "UNDEFINED",
            "progress": 0.0,
            "diagnostics": diagnostics,
            "applicationType": "SPARK",
        }
    }


def test_yarn_status_from_scheduler_api(server: tuple[str, dict[str, Any]]) -> None:
    url, routes = server
    routes["/ws/v1/cluster/scheduler"] = YARN_SCHEDULER
    where, rows = status.quota_status(make_spec(), master="yarn", url=url)
    assert where.kind == "yarn"
    by = {r.team: r for r in rows}
    assert (by["vision"].gpus_in_use, by["vision"].pending_apps, by["vision"].running_apps) == (
        2,
        2,
        1,
    )
    assert (by["nlp"].gpus_in_use, by["nlp"].max_gpus) == (1, 4)  # nested leaf found


AM_LIMIT = (
    "[Tue Nov 28 10:00:00 +0000 2023] Application is added to the scheduler and is not yet "
    "activated. Queue's AM resource limit exceeded.  Details : AM Partition = "
    "<DEFAULT_PARTITION>; AM Resource Request = <memory:2048, vCores:1>; Queue Resource Limit "
    "for AM = <memory:4096, vCores:1>; User AM Resource Limit of the queue = <memory:4096, "
    "vCores:1>; Queue AM Resource Usage = <memory:4096, vCores:2>; "
)


@pytest.mark.parametrize(
    ("diagnostics", "cause"),
    [
        (AM_LIMIT, "queue-am-limit"),
        (
            "[Tue Nov 28 10:00:00 +0000 2023] Application is added to the scheduler and is not "
            "yet activated. User's AM resource limit exceeded.  Details : AM Partition = "
            "<DEFAULT_PARTITION>;",
            "user-am-limit",
        ),
        (
            "[Tue Nov 28 10:00:00 +0000 2023] Application is Activated, waiting for resources "
            "to be assigned for AM.  Details : AM Partition = <DEFAULT_PARTITION> ; ",
            "waiting-am",
        ),
        (
            "[Tue Nov 28 10:00:00 +0000 2023] Application is added to the scheduler and is not "
            "yet activated. Skipping AM assignment as cluster resource is empty.  Details : AM "
            "Partition = <DEFAULT_PARTITION>;",
            "cluster-empty",
        ),
        (
            "[Tue Nov 28 10:00:00 +0000 2023] Application is added to the scheduler and is not "
            "yet activated.",
            "not-activated",
        ),
        ("", "unknown"),
    ],
)
def test_yarn_why_classifies_real_diagnostics(
    server: tuple[str, dict[str, Any]], diagnostics: str, cause: str
) -> None:
    url, routes = server
    routes["/ws/v1/cluster/apps/application_1700000000000_0007"] = _yarn_app(
        "ACCEPTED", diagnostics
    )
    reason = why.explain(make_spec(), "application_1700000000000_0007", master="yarn", url=url)
    assert reason.cause == cause and reason.waiting
    assert "vision" in reason.message


def test_yarn_running_app_is_not_waiting() -> None:
    assert not why.classify_yarn(_yarn_app("RUNNING", "")["app"]).waiting


# --------------------------------------------------------------------------- Kueue

# API discovery of a server whose Kueue serves v1beta1 only: the client reads that version.
_KUEUE_DISCOVERY = {
    "kind": "APIGroup",
    "apiVersion": "v1",
    "name": "kueue.x-k8s.io",
    "versions": [{"groupVersion": "kueue.x-k8s.io/v1beta1", "version": "v1beta1"}],
    "preferredVersion": {"groupVersion": "kueue.x-k8s.io/v1beta1", "version": "v1beta1"},
}


def _cluster_queue(name: str, nominal: str, limit: str, used: str, borrowed: str) -> Any:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohort": "gpuspark",
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": "memory", "nominalQuota": "512Gi"},
                                {
                                    "name": "nvidia.com/gpu",
                                    "nominalQuota": nominal,
                                    "borrowingLimit": limit,
                                },
                            ],
                        }
                    ],
                }
            ],
        },
        "status": {
            "pendingWorkloads": 1,
            "reservingWorkloads": 2,
            "admittedWorkloads": 2,
            "flavorsUsage": [
                {
                    "name": "a100",
                    "resources": [
                        {"name": "cpu", "total": "24", "borrowed": "0"},
                        {"name": "memory", "total": "96Gi", "borrowed": "0"},
                        {"name": "nvidia.com/gpu", "total": used, "borrowed": borrowed},
                    ],
                }
            ],
        },
    }


def test_kueue_status_with_bearer_token(
    server: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, routes = server
    monkeypatch.setenv("GPUSPARK_K8S_TOKEN", "t0ken")
    routes["/apis/kueue.x-k8s.io"] = _KUEUE_DISCOVERY
    routes["/apis/kueue.x-k8s.io/v1beta1/clusterqueues"] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueueList",
        "items": [
            _cluster_queue("vision", "2", "0", "2", "0"),
            _cluster_queue("nlp", "2", "2", "3", "1"),
        ],
    }
    where, rows = status.quota_status(make_spec(), master=f"k8s://{url}")
    assert where.kind == "kueue"
    by = {r.team: r for r in rows}
    assert by["nlp"].gpus_in_use == 3 and by["vision"].pending_apps == 1
    queue = k8s_api.parse_cluster_queue(_cluster_queue("nlp", "2", "2", "3", "1"))
    assert (queue.nominal_gpus, queue.borrowing_limit_gpus, queue.borrowed_gpus) == (2, 2, 1)
    assert queue.cohort == "gpuspark"


def _workload(message: str, admitted: bool = False) -> dict[str, Any]:
    conditions = [
        {
            "type": "QuotaReserved",
            "status": "True" if admitted else "False",
            "reason": "QuotaReserved" if admitted else "Pending",
            "message": message,
            "lastTransitionTime": "2024-05-01T10:00:00Z",
        }
    ]
    if admitted:
        conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted"})
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "pod-spark-driver-3f2a1", "namespace": "team-nlp"},
        "spec": {"queueName": "nlp"},
        "status": {"conditions": conditions},
    }


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        (
            "couldn't assign flavors to pod set main: insufficient unused quota for "
            "nvidia.com/gpu in flavor a100, 2 more needed",
            "quota",
        ),
        ("LocalQueue nlp doesn't exist", "no-local-queue"),
        ("ClusterQueue nlp is inactive", "inactive-queue"),
        ("waiting for something else", "unknown"),
    ],
)
def test_kueue_why_from_workload_conditions(
    server: tuple[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    message: str,
    cause: str,
) -> None:
    url, routes = server
    monkeypatch.setenv("GPUSPARK_K8S_TOKEN", "t0ken")
    path = "/apis/kueue.x-k8s.io/v1beta1/namespaces/team-nlp/workloads/pod-spark-driver-3f2a1"
    routes["/apis/kueue.x-k8s.io"] = _KUEUE_DISCOVERY
    routes[path] = _workload(message)
    reason = why.explain(
        make_spec(), "pod-spark-driver-3f2a1", master=f"k8s://{url}", namespace="team-nlp"
    )
    assert reason.cause == cause
    if cause == "quota":
        assert "a100" in reason.message and "2 more needed" in reason.message


def test_kueue_admitted_is_not_waiting() -> None:
    assert not why.classify_kueue(_workload("Quota reserved in ClusterQueue nlp", True)).waiting


def test_quantities() -> None:
    assert k8s_api.parse_quantity("500m") == 0.5
    assert k8s_api.parse_quantity("2Gi") == 2 * 2**30
    assert k8s_api.parse_quantity(4) == 4


# --------------------------------------------------------------------------- standalone


RECORDED = Path(__file__).parent / "data" / "standalone_master.json"


def test_standalone_parse_and_why_shape_from_recorded_json() -> None:
    """A master /json/ recorded from the embedded cluster: app 0000 holds one 2-GPU executor,
    app 0001 asks 4 GPUs per executor on 2-GPU workers and waits."""
    master = json.loads(RECORDED.read_text())
    worker_doc = {
        "executors": [
            {
                "appid": "app-20261201032924-0000",
                "resources": {"gpu": {"name": "gpu", "addresses": ["2", "3"]}},
            }
        ]
    }
    snap = standalone_api.parse_standalone(master, {"w": worker_doc})
    by = {a.id: a for a in snap.apps}
    assert by["app-20261201032924-0000"].gpus_held == 2
    assert by["app-20261201032924-0000"].team == "vision"
    rows = {r.team: r for r in status.standalone_usage(make_spec(), snap)}
    assert rows["vision"].gpus_in_use == 2 and rows["nlp"].pending_apps == 1
    reason = why.why_standalone(snap, "app-20261201032938-0001", make_spec())
    assert reason.cause == "shape"
    assert "4 GPUs per executor" in reason.message and "more than 2" in reason.message
    with pytest.raises(Exception, match="no active application 'nope'"):
        why.why_standalone(snap, "nope")


def test_plot_writes_png(tmp_path: Path) -> None:
    rows = [status.TeamUsage("vision", 2, 2, 2, 1, 0, gpu_hours=3.0, guaranteed_gpu_hours=48)]
    out = status.plot_usage(rows, tmp_path / "q.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gpu_hours_query_uses_the_shared_metric_name() -> None:
    from gpuspark.monitor.names import CUDA_ALLOCATED

    query = status.gpu_hours_query("24h")
    assert CUDA_ALLOCATED in query and "[24h:1m]" in query and "by (team)" in query


def test_team_conf_yunikorn() -> None:
    spec = make_spec(conf={"spark.kubernetes.scheduler.name": "yunikorn"})
    conf = team.team_conf(spec, "vision", "k8s://https://api:6443")
    assert conf["spark.kubernetes.scheduler.name"] == "yunikorn"
    assert conf["spark.kubernetes.driver.label.queue"] == "root.vision"
    assert conf["spark.kubernetes.executor.label.queue"] == "root.vision"
    key = "spark.kubernetes.driver.annotation.yunikorn.apache.org/app-id"
    assert conf[key] == "{{APP_ID}}"
    assert not any("kueue" in k for k in conf)


def test_a_user_in_two_teams_must_name_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --team, a member of two teams was put in the first one silently; now the job is
    refused naming both teams and --team, in a dry run as in the run."""
    from gpuspark.cli.main import main

    data = make_spec().model_dump()
    data["teams"][1]["members"].append("bob")  # bob: vision and nlp
    spec = ClusterSpec.model_validate(data)
    monkeypatch.setattr("getpass.getuser", lambda: "bob")
    with pytest.raises(LaunchError, match=r"member of several teams \(vision, nlp\)"):
        team.resolve_team(spec)
    assert team.resolve_team(spec, "nlp").name == "nlp"  # naming one is enough
    from gpuspark.spec import example_spec

    text = example_spec().replace('members = ["carol", "dan"]', 'members = ["carol", "dan", "bob"]')
    path = tmp_path / "c.toml"
    path.write_text(text.replace('master = "spark://dgx01:7077"', 'master = "local-cluster"'))
    script = tmp_path / "t.py"
    script.write_text("pass\n")
    assert main(["launch", "-n", "2", "--dry-run", "--spec", str(path), str(script)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pass --team (one of radiology, vision)" in err
