"""``gpuspark doctor`` live checks: each check on values, then the whole command on the shared
embedded cluster (all ok, simulated GPU slots) and with executors on another Python."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuspark.doctor.cluster import (
    capacity_check,
    discovery_output_check,
    disjoint_check,
    dynamic_allocation_check,
    executor_gpu_checks,
    executor_job_failure,
    python_check,
    slot_check,
    workers_check,
)
from gpuspark.doctor.node import (
    cuda_check,
    ecc_checks,
    gpu_stack_checks,
    ibstat_checks,
    java_check,
    nccl_env_checks,
)
from gpuspark.doctor.parsers import parse_ibstat, parse_nvidia_smi, parse_nvidia_smi_q
from gpuspark.doctor.probe import bus_bandwidth, probe_check
from gpuspark.doctor.report import Report, Status, failure, ok
from gpuspark.launch import ExecutorCapacity

DATA = Path(__file__).parent / "data"
DRIVER = {"host": "d", "python": "3.11.7", "executable": "/v/bin/python", "gpuspark": "0.1.0",
          "torch": "2.5.1"}  # fmt: skip


def test_report_exit_code_and_summary() -> None:
    report = Report([ok("a", "fine")])
    assert report.exit_code == 0 and "no failures" in report.summary()
    report.add(failure("b", "broken", "fix it"))
    assert report.exit_code == 1 and "1 failure" in report.summary()
    assert report.as_dict()["checks"][1] == {
        "name": "b", "status": "failure", "evidence": "broken", "fix": "fix it"}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', Status.OK),
        ('openjdk version "21.0.2" 2024-01-16', Status.OK),
        ('openjdk version "11.0.22" 2024-01-16', Status.FAILURE),
        ('java version "1.8.0_392"', Status.FAILURE),
        (None, Status.FAILURE),
    ],
)
def test_java_version(text: str | None, status: Status) -> None:
    assert java_check(text).status is status


def test_no_nvidia_smi_is_information_not_failure() -> None:
    (check,) = gpu_stack_checks(None, None)
    assert check.status is Status.INFO and "no GPU on this node" in check.evidence


def test_gpu_stack_from_recorded_outputs() -> None:
    smi = parse_nvidia_smi((DATA / "nvidia-smi-a100.txt").read_text())
    q_text = (DATA / "nvidia-smi-q-a100.txt").read_text()
    checks = gpu_stack_checks(smi, "12.1", q_text)
    assert [c.status for c in checks] == [Status.OK, Status.OK, Status.OK, Status.WARNING]
    assert "535.104.05" in checks[0].evidence and "0F:00.0" in checks[3].name


def test_cuda_of_torch_vs_driver() -> None:
    assert cuda_check("12.2", "12.1", "driver").status is Status.OK
    assert cuda_check("12.2", "12.4", "driver").status is Status.WARNING
    assert cuda_check("11.4", "12.1", "driver").status is Status.FAILURE
    assert "CPU build" in cuda_check("12.2", None, "executor on h1").evidence


def test_remap_failure_is_a_failure_and_retired_pages_pending_a_warning() -> None:
    _, _, gpus = parse_nvidia_smi_q((DATA / "nvidia-smi-q-v100.txt").read_text())
    assert ecc_checks(gpus)[0].status is Status.WARNING
    from dataclasses import replace

    (check,) = ecc_checks([replace(gpus[0], remap_failure=True)])
    assert check.status is Status.FAILURE and "RMA" in check.fix


def test_ibstat_ports_vs_spec_rate() -> None:
    ports = parse_ibstat((DATA / "ibstat-hdr.txt").read_text())
    checks = ibstat_checks(ports, 200, "infiniband")
    assert [c.status for c in checks] == [Status.OK, Status.FAILURE, Status.WARNING]
    assert "mlx5_1" in checks[1].name and "Polling" in checks[1].evidence
    assert "below the spec's 200 Gb/s" in checks[2].evidence


def test_missing_ibstat_is_skipped_with_what_to_install() -> None:
    (check,) = ibstat_checks(None, 100, "infiniband")
    assert check.status is Status.SKIPPED and "infiniband-diags" in check.fix
    assert ibstat_checks(None, 10, "ethernet")[0].status is Status.INFO


def test_nccl_socket_timeout_is_not_an_nccl_setting() -> None:
    (check,) = nccl_env_checks({"NCCL_SOCKET_TIMEOUT": "600"}, ["eth0", "lo"], None, "ethernet")
    assert check.status is Status.WARNING and "not an NCCL setting" in check.evidence
    assert "init_process_group(timeout=" in check.fix


def test_nccl_interfaces_and_hcas_must_exist() -> None:
    env = {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_7:1", "NCCL_IB_DISABLE": "1"}
    checks = nccl_env_checks(env, ["eth0", "lo"], ["mlx5_0", "mlx5_1"], "infiniband")
    assert [(c.name, c.status) for c in checks] == [
        ("NCCL_SOCKET_IFNAME", Status.FAILURE),
        ("NCCL_IB_HCA", Status.FAILURE),
        ("NCCL_IB_DISABLE", Status.WARNING),
    ]
    good = nccl_env_checks({"NCCL_SOCKET_IFNAME": "eth", "NCCL_IB_HCA": "=mlx5_0"},
                           ["eth0"], ["mlx5_0"], "infiniband")  # fmt: skip
    assert all(c.status is Status.OK for c in good)
    assert nccl_env_checks({"NCCL_SOCKET_IFNAME": "^docker"}, ["eth0"], None, "x")[0].status is (
        Status.OK
    )


def test_workers_registered() -> None:
    alive = {"host": "h1", "port": 1, "state": "ALIVE", "cores": 8}
    assert workers_check([alive]).status is Status.OK
    dead = {"host": "h2", "port": 2, "state": "DEAD", "cores": 8}
    assert workers_check([alive, dead]).status is Status.WARNING
    assert workers_check([dead]).status is Status.FAILURE


def test_executor_on_another_python_names_the_host() -> None:
    same = {**DRIVER, "host": "h1"}
    other = {**DRIVER, "host": "h2", "executable": "/usr/bin/python3", "python": "3.11.2"}
    assert python_check(DRIVER, [same]).status is Status.OK
    check = python_check(DRIVER, [same, other])
    assert check.status is Status.FAILURE and "executor on h2" in check.evidence
    assert "h1" not in check.evidence and "PYSPARK_PYTHON" in check.fix
    assert python_check(DRIVER, []).status is Status.FAILURE


def test_python_job_failure_names_host_and_error() -> None:
    message = (
        "An error occurred while calling o57.collectAndServe.\n: org.apache.spark.SparkException: "
        "Job aborted due to stage failure: Task 0 in stage 0.0 failed 4 times, most recent "
        "failure: Lost task 0.3 in stage 0.0 (TID 3) (10.0.0.7 executor 1): "
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        "ModuleNotFoundError: No module named 'gpuspark'\n"
    )
    check = executor_job_failure(message)
    assert check.status is Status.FAILURE and "executor on 10.0.0.7" in check.evidence
    assert "No module named 'gpuspark'" in check.evidence


def test_executor_gpus_seen_by_torch() -> None:
    assert executor_gpu_checks([{"host": "h", "nvidia_smi": False}])[0].status is Status.INFO
    blind = {"host": "h", "nvidia_smi": True, "torch_gpus": 0, "torch_cuda": None}
    assert executor_gpu_checks([blind])[0].status is Status.FAILURE


def test_discovery_output() -> None:
    good = discovery_output_check("w0", '{"name": "gpu", "addresses": ["0", "1"]}')
    assert good.status is Status.OK and "0, 1" in good.evidence
    assert discovery_output_check("w0", "GPU 0: A100").status is Status.FAILURE
    assert discovery_output_check("w0", None).status is Status.FAILURE


def test_gpu_addresses_disjoint_per_host() -> None:
    def worker(host: str, port: int, addresses: list[str]) -> dict[str, Any]:
        return {"host": host, "port": port, "resources": {"gpu": {"addresses": addresses}}}

    fine = [worker("h1", 1, ["0", "1"]), worker("h2", 1, ["0", "1"])]
    check = disjoint_check(fine, simulated=True)
    assert check.status is Status.OK and "simulated" in check.evidence
    clash = disjoint_check([worker("h1", 1, ["0", "1"]), worker("h1", 2, ["1"])], False)
    assert clash.status is Status.FAILURE and "GPU 1 on h1" in clash.evidence


def test_slots_rule_on_the_live_conf() -> None:
    conf = {"spark.executor.resource.gpu.amount": "2", "spark.task.resource.gpu.amount": "0.25",
            "spark.executor.cores": "8"}  # fmt: skip
    check = slot_check(conf, simulated=True)
    assert check.status is Status.OK and "SIMULATED" in check.evidence
    bad = slot_check({**conf, "spark.executor.cores": "4"}, simulated=False)
    assert bad.status is Status.FAILURE and "spark.executor.cores=8" in bad.fix


def test_training_capacity_vs_world_size() -> None:
    cap = ExecutorCapacity(executors=2, cores_per_executor=8, gpus_per_executor=2)
    assert "4 whole-GPU" in capacity_check(cap, None).evidence
    assert capacity_check(cap, 4).status is Status.OK
    check = capacity_check(cap, 8)
    assert check.status is Status.FAILURE and "world size 8" in check.evidence


def test_dynamic_allocation_fails_only_for_training() -> None:
    on = {"spark.dynamicAllocation.enabled": "true"}
    assert dynamic_allocation_check(on, training=False).status is Status.OK
    check = dynamic_allocation_check(on, training=True)
    assert check.status is Status.FAILURE and "SPARK-24942" in check.evidence


def test_bus_bandwidth_like_nccl_tests() -> None:
    # nccl-tests: busbw = algbw * 2(n-1)/n; 8 ranks, 1 GB in 0.1 s: algbw 10 GB/s, busbw 17.5.
    assert bus_bandwidth(10**9, 0.1, 8) == pytest.approx(17.5e9)
    assert bus_bandwidth(10**9, 0.1, 1) == 0.0
    one_host = {"backend": "gloo", "world": 2, "bytes": 2**24, "seconds": 0.02, "hosts": ["a"]}
    assert probe_check(one_host, 100).status is Status.INFO
    slow = {**one_host, "hosts": ["a", "b"]}
    assert probe_check(slow, 100).status is Status.WARNING  # 0.84 GB/s << 12.5 GB/s
    assert probe_check({**slow, "seconds": 0.001}, 100).status is Status.OK


def test_no_embedded_cluster_is_reported_not_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuspark.cli.main import main

    monkeypatch.setenv("GPUSPARK_STATE_DIR", str(tmp_path / "none"))
    monkeypatch.delenv("GPUSPARK_SPEC", raising=False)
    assert main(["doctor", "--json"]) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert "no embedded cluster running" in checks["Spark master"]["evidence"]
    assert "gpuspark cluster up" in checks["Spark master"]["fix"]
    assert not (tmp_path / "none").exists()  # nothing was started


def _doctor(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, dict[str, str]]]:
    from gpuspark.cli.main import main

    code = main(["doctor", "--json", "--world-size", "2"])
    out = capsys.readouterr().out
    return code, {c["name"]: c for c in json.loads(out[out.index("{") :])["checks"]}


@pytest.mark.spark
def test_doctor_on_the_embedded_cluster(
    local_cluster: Any, spark: Any, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("GPUSPARK_STATE_DIR", str(local_cluster.state_dir))
    monkeypatch.delenv("GPUSPARK_SPEC", raising=False)
    code, checks = _doctor(capsys)
    assert code == 0, checks
    assert {c["status"] for c in checks.values()} <= {"ok", "info"}
    assert "SIMULATED" in checks["GPU slots"]["evidence"]
    assert "simulated" in checks["GPU addresses disjoint"]["evidence"]
    assert sys.executable in checks["executors' Python"]["evidence"]
    assert checks["workers registered"]["evidence"].startswith("2 ALIVE")
    assert checks["training capacity"]["status"] == "ok"


@pytest.mark.spark
def test_doctor_probe_times_an_allreduce_through_the_launcher(
    local_cluster: Any, spark: Any, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from gpuspark.cli.main import main

    monkeypatch.setenv("GPUSPARK_STATE_DIR", str(local_cluster.state_dir))
    monkeypatch.delenv("GPUSPARK_SPEC", raising=False)
    code = main(["doctor", "--json", "--world-size", "2", "--probe"])
    out = capsys.readouterr().out
    checks = {c["name"]: c for c in json.loads(out[out.index("{") :])["checks"]}
    probe = checks["collective probe"]
    assert code == 0, probe
    # two gloo ranks on this one machine: measured, and said not to cross the network
    assert probe["status"] == "info" and "one host" in probe["evidence"]
    assert "allreduce 16 MiB over 2 ranks (gloo): busbw" in probe["evidence"]
    busbw = float(probe["evidence"].split("busbw ")[1].split(" GB/s")[0])
    assert busbw > 0


def _other_python(where: Path) -> str:
    """A second interpreter: a venv (its own sys.executable) that sees this one's packages."""
    import site

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    (pth,) = where.glob("lib/python*/site-packages")
    (pth / "same-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return str(where / "bin" / "python")


@pytest.mark.spark
def test_doctor_names_the_executor_host_running_another_python(
    local_cluster: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import socket

    monkeypatch.setenv("GPUSPARK_STATE_DIR", str(local_cluster.state_dir))
    monkeypatch.delenv("GPUSPARK_SPEC", raising=False)
    other = _other_python(tmp_path / "venv")
    # What a session built outside gpuspark with PYSPARK_PYTHON pointing elsewhere does: the
    # context's Python for its workers (pyspark reads it from PYSPARK_PYTHON at start-up).
    sc = spark.sparkContext
    monkeypatch.setattr(sc, "pythonExec", other)
    code, checks = _doctor(capsys)
    check = checks["executors' Python"]
    assert code == 1
    assert check["status"] == "failure"
    assert f"executor on {socket.gethostname()}" in check["evidence"]
    assert other in check["evidence"] and "PYSPARK_PYTHON" in check["fix"]


def test_pending_remap_and_reset_required_say_what_is_pending() -> None:
    from dataclasses import replace

    from gpuspark.doctor.parsers import GpuHealth

    gpu = GpuHealth("00000000:07:00.0", remap_pending=True, remapped_uncorrectable=4)
    (check,) = ecc_checks([gpu])
    assert check.status is Status.WARNING
    assert "row remapping pending (4 rows remapped for uncorrectable errors)" in check.evidence
    (reset,) = ecc_checks([replace(gpu, remap_pending=False, reset_required=True)])
    assert reset.status is Status.WARNING and "Reset Required: Yes" in reset.evidence
    assert ecc_checks([GpuHealth("00000000:0F:00.0", volatile_uncorrectable=0)])[0].status is (
        Status.OK
    )


def test_roce_ports_on_an_infiniband_spec_are_a_warning() -> None:
    ports = parse_ibstat((DATA / "ibstat-roce.txt").read_text())
    (check,) = ibstat_checks(ports, 100, "infiniband")
    assert check.status is Status.WARNING and "RoCE" in check.evidence
    assert ibstat_checks(ports, 100, "ethernet")[0].status is Status.OK
