"""The Kubernetes client (lightkube) through the recording stand-in of the API server
(``tests/k8s_standin.py``: no real API server runs here): ``quota status`` and ``quota why``
on Kueue with each way of authenticating (kubeconfig with certificate files, with inline
``-data`` and a token, an exec plugin, the in-cluster service account, ``GPUSPARK_K8S_TOKEN``),
against servers preferring Kueue v1beta2 or serving v1beta1 only, and one-line errors with a
remedy for an unreachable server, bad credentials, a missing permission, a missing kubeconfig
and a cluster without Kueue."""

from __future__ import annotations

import base64
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuspark._util.net import free_port
from gpuspark.cli.main import main
from gpuspark.errors import ClusterError
from gpuspark.quota import explain, quota_status
from gpuspark.schedulers.kubernetes import client as k8s_client
from gpuspark.schedulers.kubernetes.api import parse_workload
from gpuspark.spec import ClusterSpec, default_spec
from k8s_standin import Pki, StandIn  # tests/k8s_standin.py

KUEUE = "kueue.x-k8s.io"


def make_spec() -> ClusterSpec:
    data = default_spec().model_dump()
    data["teams"] = [
        {"name": "vision", "guaranteed_gpus": 2, "max_gpus": 2, "members": ["alice"]},
        {"name": "nlp", "guaranteed_gpus": 2, "max_gpus": 4, "members": ["carol"]},
    ]
    return ClusterSpec.model_validate(data)


def cluster_queue(version: str, name: str, used: str, pending: int) -> dict[str, Any]:
    """A ClusterQueue as Kueue's ``version`` writes it (the cohort field differs)."""
    cohort = "cohortName" if version == "v1beta2" else "cohort"
    gpu = {"name": "nvidia.com/gpu", "nominalQuota": "2", "borrowingLimit": "2"}
    return {
        "apiVersion": f"{KUEUE}/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            cohort: "gpuspark",
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "a100", "resources": [gpu]}],
                }
            ],
        },
        "status": {
            "pendingWorkloads": pending,
            "reservingWorkloads": 1,
            "admittedWorkloads": 1,
            "flavorsUsage": [
                {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": used}]}
            ],
        },
    }


def workload(version: str, message: str) -> dict[str, Any]:
    """A pending Workload as Kueue's ``version`` writes it (the priority class field differs)."""
    priority = (
        {"priorityClassRef": {"group": KUEUE, "kind": "WorkloadPriorityClass", "name": "nlp-p"}}
        if version == "v1beta2"
        else {"priorityClassName": "nlp-p", "priorityClassSource": f"{KUEUE}/workloadpriorityclass"}
    )
    condition = {"type": "QuotaReserved", "status": "False", "reason": "Pending"}
    return {
        "apiVersion": f"{KUEUE}/{version}",
        "kind": "Workload",
        "metadata": {"name": "pod-driver-3f2a1", "namespace": "team-nlp"},
        "spec": {"queueName": "nlp", "podSets": [], **priority},
        "status": {"conditions": [{**condition, "message": message}]},
    }


def seed(standin: StandIn, version: str) -> None:
    standin.add(cluster_queue(version, "vision", "2", 0))
    standin.add(cluster_queue(version, "nlp", "3", 1))
    message = "couldn't assign flavors to pod set main: insufficient unused quota for "
    standin.add(workload(version, message + "nvidia.com/gpu in flavor a100, 2 more needed"))


def write_kubeconfig(
    path: Path, server: str, cluster: dict[str, Any], user: dict[str, Any]
) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "standin", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "tester", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "standin", "user": "tester"}}],
        "current-context": "ctx",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def status_and_why(standin: StandIn) -> tuple[dict[str, Any], Any]:
    """``quota status`` (rows by team) and ``quota why`` of the seeded workload."""
    spec, master = make_spec(), f"k8s://{standin.url}"
    where, rows = quota_status(spec, master=master)
    assert (where.kind, where.url) == ("kueue", standin.url)
    reason = explain(spec, "pod-driver-3f2a1", master=master, namespace="team-nlp")
    return {r.team: r for r in rows}, reason


def paths(standin: StandIn) -> list[str]:
    return [r.path for r in standin.requests]


# --------------------------------------------------------------------------- credentials


def cert_kubeconfig(tmp_path: Path, standin: StandIn) -> Path:
    """A kubeconfig of ``standin`` with its CA and client certificate as files."""
    return write_kubeconfig(
        tmp_path / "kubeconfig",
        standin.url,
        {"certificate-authority": str(standin.ca_file)},
        {"client-certificate": str(standin.client_cert), "client-key": str(standin.client_key)},
    )


def test_kubeconfig_with_client_certificate_files(
    k8s_standin: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    k8s_standin.require(cert=True)
    seed(k8s_standin, "v1beta2")
    home = tmp_path / "kube"
    home.mkdir()
    for name in ("ca.crt", "client.crt", "client.key"):  # relative paths: next to the kubeconfig
        shutil.copy(k8s_standin.ca_file.parent / name, home / name)
    config = write_kubeconfig(
        home / "config",
        k8s_standin.url,
        {"certificate-authority": "ca.crt"},
        {"client-certificate": "client.crt", "client-key": "client.key"},
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    rows, reason = status_and_why(k8s_standin)
    assert (rows["nlp"].gpus_in_use, rows["nlp"].pending_apps) == (3, 1)
    assert rows["vision"].gpus_in_use == 2
    assert reason.cause == "quota" and "2 more needed" in reason.message
    assert paths(k8s_standin)[:2] == [f"/apis/{KUEUE}", f"/apis/{KUEUE}/v1beta2/clusterqueues"]
    assert f"/apis/{KUEUE}/v1beta2/namespaces/team-nlp/workloads/pod-driver-3f2a1" in paths(
        k8s_standin
    )
    assert {r.user for r in k8s_standin.requests} == {"gpuspark-tests"}


def test_kubeconfig_with_inline_data_and_a_token(
    k8s_standin: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    k8s_standin.require(tokens={"inline-t0ken"})
    seed(k8s_standin, "v1beta2")
    pki = k8s_standin.pki
    config = write_kubeconfig(
        tmp_path / "kubeconfig",
        k8s_standin.url,
        {"certificate-authority-data": b64(pki.ca_file)},
        {
            "client-certificate-data": b64(pki.client_cert),
            "client-key-data": b64(pki.client_key),
            "token": "inline-t0ken",
        },
    )
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{config}")  # the first that exists
    rows, reason = status_and_why(k8s_standin)
    assert rows["nlp"].gpus_in_use == 3 and reason.cause == "quota"
    assert {(r.user, r.token) for r in k8s_standin.requests} == {("gpuspark-tests", "inline-t0ken")}
    assert "priority class nlp-p" in reason.evidence[-1]  # v1beta2's priorityClassRef


@pytest.mark.parametrize(
    "api", ["client.authentication.k8s.io/v1beta1", "client.authentication.k8s.io/v1"]
)
def test_exec_credential_plugin(
    k8s_standin: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    """As EKS (aws eks get-token), GKE (gke-gcloud-auth-plugin) and AKS (kubelogin) do."""
    k8s_standin.require(tokens={"from-exec-plugin"})
    seed(k8s_standin, "v1beta2")
    ran = tmp_path / "plugin-ran"
    plugin = tmp_path / "plugin.py"
    credential = {
        "apiVersion": api,
        "kind": "ExecCredential",
        "status": {"token": "from-exec-plugin"},
    }
    plugin.write_text(
        "import json, pathlib, sys\n"
        f"pathlib.Path({str(ran)!r}).write_text(' '.join(sys.argv[1:]))\n"
        f"print(json.dumps({credential!r}))\n"
    )
    user = {
        "exec": {
            "apiVersion": api,
            "command": sys.executable,
            "args": [str(plugin), "--cluster", "x"],
        }
    }
    config = write_kubeconfig(
        tmp_path / "kubeconfig",
        k8s_standin.url,
        {"certificate-authority": str(k8s_standin.ca_file)},
        user,
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    rows, reason = status_and_why(k8s_standin)
    assert rows["nlp"].gpus_in_use == 3 and reason.cause == "quota"
    assert ran.read_text() == "--cluster x"
    assert {r.token for r in k8s_standin.requests} == {"from-exec-plugin"}


def test_in_cluster_service_account(
    k8s_standin: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    k8s_standin.require(tokens={"sa-t0ken"})
    seed(k8s_standin, "v1beta2")
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("sa-t0ken")
    (account / "namespace").write_text("team-nlp")
    shutil.copy(k8s_standin.ca_file, account / "ca.crt")
    # Test-only: the pod's service account folder is a temp dir, and the env vars a pod has.
    monkeypatch.setattr(k8s_client, "SERVICE_ACCOUNT_DIR", account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", k8s_standin.url.rsplit(":", 1)[1])
    _, source = k8s_client.kube_config()
    assert "service account" in source
    rows, reason = status_and_why(k8s_standin)
    assert rows["nlp"].gpus_in_use == 3 and reason.cause == "quota"
    assert {r.token for r in k8s_standin.requests} == {"sa-t0ken"}


def test_gpuspark_token_replaces_the_kubeconfig_user(
    k8s_standin: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    k8s_standin.require(tokens={"env-t0ken"})
    seed(k8s_standin, "v1beta2")
    config = write_kubeconfig(
        tmp_path / "kubeconfig",
        "https://elsewhere.invalid:6443",  # the master's server wins, the CA stays
        {"certificate-authority": str(k8s_standin.ca_file)},
        {"token": "stale"},
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    monkeypatch.setenv("GPUSPARK_K8S_TOKEN", "env-t0ken")
    rows, _ = status_and_why(k8s_standin)
    assert rows["nlp"].gpus_in_use == 3
    assert {r.token for r in k8s_standin.requests} == {"env-t0ken"}


# --------------------------------------------------------------------------- Kueue versions


def test_a_v1beta1_only_kueue_is_read_in_v1beta1(
    k8s_pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StandIn(k8s_pki, kueue_versions=("v1beta1",)) as standin:
        seed(standin, "v1beta1")
        config = write_kubeconfig(
            tmp_path / "kubeconfig",
            standin.url,
            {"certificate-authority": str(k8s_pki.ca_file)},
            {"client-certificate": str(k8s_pki.client_cert), "client-key": str(k8s_pki.client_key)},
        )
        monkeypatch.setenv("KUBECONFIG", str(config))
        rows, reason = status_and_why(standin)
        assert f"/apis/{KUEUE}/v1beta1/clusterqueues" in paths(standin)
    assert (rows["nlp"].gpus_in_use, rows["nlp"].pending_apps) == (3, 1)
    assert reason.cause == "quota" and "priority class nlp-p" in reason.evidence[-1]


def test_both_versions_parse_the_same() -> None:
    from gpuspark.schedulers.kubernetes.api import parse_cluster_queue, pick_kueue_version

    old, new = (
        parse_cluster_queue(cluster_queue(v, "nlp", "3", 1)) for v in ("v1beta1", "v1beta2")
    )
    assert old == new and new.cohort == "gpuspark" and new.borrowing_limit_gpus == 2
    assert parse_workload(workload("v1beta1", "x")) == parse_workload(workload("v1beta2", "x"))
    group = {
        "preferredVersion": {"version": "v1"},
        "versions": [{"version": "v1"}, {"version": "v1beta2"}],
    }
    assert pick_kueue_version(group) == "v1beta2"  # a newer preferred version gpuspark cannot read
    with pytest.raises(ClusterError, match="serves v1 of kueue"):
        pick_kueue_version({"preferredVersion": {"version": "v1"}, "versions": [{"version": "v1"}]})


# --------------------------------------------------------------------------- the CLI


def test_cli_quota_status_and_why(
    k8s_standin: StandIn,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gpuspark.spec import example_spec

    seed(k8s_standin, "v1beta2")
    monkeypatch.setenv("KUBECONFIG", str(cert_kubeconfig(tmp_path, k8s_standin)))
    spec_file = tmp_path / "cluster.toml"
    spec_file.write_text(example_spec())
    master = f"k8s://{k8s_standin.url}"
    assert main(["quota", "status", "--spec", str(spec_file), "--master", master, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["scheduler"] == "kueue" and shown["url"] == k8s_standin.url
    why = ["quota", "why", "pod-driver-3f2a1", "--spec", str(spec_file), "--master", master]
    assert main([*why, "--namespace", "team-nlp"]) == 0
    assert "quota: " in capsys.readouterr().out
    k8s_standin.forbid("list", "clusterqueues")
    assert main(["quota", "status", "--spec", str(spec_file), "--master", master]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "kubectl auth can-i list clusterqueues" in err


# --------------------------------------------------------------------------- errors


def one_line(exc: pytest.ExceptionInfo[ClusterError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and exc.value.remedy, text
    return text


def test_unreachable_server_is_one_line_with_a_remedy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSPARK_K8S_TOKEN", "t")
    port = free_port()
    with pytest.raises(ClusterError) as exc:
        quota_status(make_spec(), master=f"k8s://127.0.0.1:{port}")  # no scheme: https
    assert f"cannot reach the Kubernetes API server at https://127.0.0.1:{port}" in one_line(exc)
    assert "kubectl cluster-info" in str(exc.value.remedy)


def test_forbidden_names_the_missing_permission(
    k8s_standin: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    k8s_standin.require(cert=True)
    k8s_standin.forbid("get", "workloads")
    seed(k8s_standin, "v1beta2")
    monkeypatch.setenv("KUBECONFIG", str(cert_kubeconfig(tmp_path, k8s_standin)))
    with pytest.raises(ClusterError) as exc:
        explain(
            make_spec(), "pod-driver-3f2a1", master=f"k8s://{k8s_standin.url}", namespace="team-nlp"
        )
    text = one_line(exc)
    assert f"get workloads.{KUEUE} in namespace team-nlp" in text and "gpuspark-tests" in text
    assert f"kubectl auth can-i get workloads.{KUEUE} -n team-nlp" in str(exc.value.remedy)


def test_bad_token_missing_kubeconfig_missing_kueue(
    k8s_pki: Pki, k8s_standin: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, master = make_spec(), f"k8s://{k8s_standin.url}"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))
    with pytest.raises(ClusterError) as exc:
        quota_status(spec, master=master)
    assert "names no file that exists" in one_line(exc)
    config = write_kubeconfig(
        tmp_path / "kubeconfig",
        k8s_standin.url,
        {"certificate-authority": str(k8s_pki.ca_file)},
        {"token": "wrong"},
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    k8s_standin.require(tokens={"right"})
    with pytest.raises(ClusterError) as exc:
        quota_status(spec, master=master)
    assert "401 Unauthorized" in one_line(exc) and "kubeconfig" in one_line(exc)
    with StandIn(k8s_pki, kueue_versions=()) as bare, pytest.raises(ClusterError) as exc:
        quota_status(spec, master=f"k8s://{bare.url}")
    assert "Kueue is not installed" in one_line(exc)


def test_a_server_certificate_from_another_ca(
    k8s_standin: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSPARK_K8S_TOKEN", "t")  # no kubeconfig: the system's CAs
    with pytest.raises(ClusterError) as exc:
        quota_status(make_spec(), master=f"k8s://{k8s_standin.url}")
    assert "certificate" in one_line(exc) and "certificate-authority" in str(exc.value.remedy)
