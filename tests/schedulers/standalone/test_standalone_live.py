"""The rendered files run: a Spark master and a worker started exactly as their rendered
systemd units say (``Environment=`` and ``ExecStart=``, minus ``User=``), with
``$SPARK_CONF_DIR`` holding the rendered ``spark-defaults.conf`` and the host's
``spark-env.sh``. The worker registers with the cores, memory, GPUs, port and work dir the
spec gives its host, and its environment (which executors inherit) carries the node group's
network variables.

This machine has no GPU: the discovery script is a test file that prints 16 simulated
addresses, passed as ``--discovery-script`` would be. About a minute on two busy cores.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gpuspark._util.net import free_port
from gpuspark.cli.cmd_render_standalone import standalone_files
from gpuspark.schedulers.standalone.render import InstallPaths, Rendered
from gpuspark.spec import ClusterSpec, example_spec, parse_spec

pytestmark = [pytest.mark.spark, pytest.mark.slow]

GPUS = 16


def _spec(tmp: Path) -> ClusterSpec:
    data = parse_spec(example_spec()).model_dump()
    data["nodes"][0].update(
        hosts=["127.0.0.1"],
        gpus_per_node=GPUS,
        cpu_cores=6,
        ram_gb=10,
        local_dirs=[str(tmp / "local")],
        socket_ifname="lo",
    )
    data["spark"].update(master=f"spark://127.0.0.1:{free_port()}", executor_cores=4, task_cpus=1)
    data["spark"]["conf"].update(
        {"spark.master.ui.port": str(free_port()), "spark.worker.ui.port": str(free_port())}
    )
    return ClusterSpec.model_validate(data)


def _command(unit_text: str) -> tuple[list[str], dict[str, str]]:
    """``ExecStart=`` as argv and ``Environment=`` over this process's PATH and JAVA_HOME."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "JAVA_HOME")}
    argv: list[str] = []
    for line in unit_text.splitlines():
        if line.startswith("Environment="):
            key, value = line.removeprefix("Environment=").split("=", 1)
            env[key] = value
        elif line.startswith("ExecStart="):
            argv = shlex.split(line.removeprefix("ExecStart="))
    return argv, env


def _workers(url: str) -> list[dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            workers: list[dict[str, Any]] = json.load(response).get("workers", [])
            return workers
    except OSError:
        return []


def _install(tmp: Path, rendered: Rendered) -> None:
    conf = tmp / "conf"
    conf.mkdir()
    for name in ("spark-defaults.conf", "metrics.properties"):
        (conf / name).write_text(rendered.files[name])
    (conf / "spark-env.sh").write_text(rendered.files["hosts/127.0.0.1/spark-env.sh"])


def test_master_and_worker_start_from_the_rendered_files(tmp_path: Path) -> None:
    import pyspark

    script = tmp_path / "simulated-gpus.sh"
    addresses = ",".join(f'"{i}"' for i in range(GPUS))
    script.write_text(f'#!/bin/sh\necho \'{{"name":"gpu","addresses":[{addresses}]}}\'\n')
    script.chmod(0o755)
    spec = _spec(tmp_path)
    paths = InstallPaths(
        spark_home=os.path.dirname(pyspark.__file__),
        conf_dir=str(tmp_path / "conf"),
        discovery_script=str(script),
    )
    rendered = standalone_files(spec, paths)
    _install(tmp_path, rendered)
    url = f"http://127.0.0.1:{spec.spark.conf['spark.master.ui.port']}/json/"
    procs = []
    try:
        for unit in ("spark-master.service", "spark-worker.service"):
            argv, env = _command(rendered.files[f"systemd/{unit}"])
            log = open(tmp_path / f"{unit}.log", "w")  # noqa: SIM115 - closed with the process
            procs.append((subprocess.Popen(argv, env=env, stdout=log, stderr=log), log))
        deadline = time.monotonic() + 240
        while not (workers := _workers(url)) and time.monotonic() < deadline:
            assert all(p.poll() is None for p, _ in procs), "a daemon exited; see its log"
            time.sleep(0.5)
        assert workers, (tmp_path / "spark-worker.service.log").read_text()[-3000:]
        [worker] = workers
        assert worker["state"] == "ALIVE" and worker["host"] == "127.0.0.1"
        assert worker["port"] == 7078 and worker["cores"] == 6
        assert worker["memory"] == 9216  # 10 GB less a tenth, in MiB
        assert len(worker["resources"]["gpu"]["addresses"]) == GPUS
        environ = Path(f"/proc/{procs[1][0].pid}/environ").read_bytes().split(b"\0")
        assert b"NCCL_SOCKET_IFNAME==lo" in environ and b"GLOO_SOCKET_IFNAME=lo" in environ
        assert (tmp_path / "local" / "work").is_dir()  # SPARK_WORKER_DIR
    finally:
        codes = _stop(procs)
    assert codes == [143, 143]  # a JVM ends so on SIGTERM: SuccessExitStatus=143 in the units


def _stop(procs: list[tuple[subprocess.Popen[bytes], Any]]) -> list[int]:
    """Stop the daemons (SIGTERM, as systemd does; SIGKILL after a minute); their codes."""
    for proc, _ in procs:
        proc.terminate()
    codes = []
    for proc, log in procs:
        try:
            codes.append(proc.wait(60))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(proc.wait())
        log.close()
    return codes
