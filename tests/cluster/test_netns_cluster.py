"""``gpuspark cluster up --hosts 2 --netns``: each worker, its executors and its ranks in a
network namespace of their own, started from the files ``render standalone`` wrote for that
host; ``down``, a failed ``up`` and a stopped ``up`` leave no namespace, veth or bridge."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from pyspark import cloudpickle as spark_cloudpickle

from gpuspark.cli.main import main
from gpuspark.cluster import netns
from gpuspark.cluster.local import LocalCluster

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
        reason="--netns needs root, ip and tc",
    ),
]

cloudpickle.register_pickle_by_value(sys.modules[__name__])
spark_cloudpickle.register_pickle_by_value(sys.modules[__name__])

UP = ["cluster", "up", "--hosts", "2", "--netns", "--cores", "2", "--gpus", "1", "--memory", "2g"]


def _ours() -> set[str]:
    """Every namespace and link named like the ones ``--netns`` makes."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = {ln.split()[0] for ln in listed.splitlines() if ln.startswith("gpuspark-")}
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith("gs-"):
            names.add(name)
    return names


def _processes_in(folder: Path) -> list[int]:
    """Processes whose working directory is ``folder`` (the daemons ``up`` started there)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")) == folder:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def gloo_addresses() -> list[dict[str, Any]]:
    """Each rank's view: the address of its ``GLOO_SOCKET_IFNAME`` and the local addresses of
    its established non-loopback TCP connections (gloo's and the store's), after an
    all-reduce; gathered on every rank."""
    import datetime
    import fcntl
    import socket
    import struct

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    total = torch.ones(1)
    dist.all_reduce(total)
    ifname = os.environ["GLOO_SOCKET_IFNAME"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", ifname.encode()[:15]))
    mine = {
        "rank": dist.get_rank(),
        "ifname": ifname,
        "address": socket.inet_ntoa(raw[20:24]),
        "connections": _own_connections(),
        "sum": float(total.item()),
    }
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    dist.destroy_process_group()
    return everyone


def _own_connections() -> list[str]:
    """Local IPv4 addresses of this process's established TCP sockets, loopback left out."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for line in Path("/proc/self/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
            raw = bytes.fromhex(fields[1].split(":")[0])
            address = ".".join(str(b) for b in raw[::-1])
            if not address.startswith("127."):
                found.add(address)
    return sorted(found)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


def _session_on(cluster: LocalCluster, **conf: Any) -> Any:
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    return cluster.session(**conf)


def _check_status(state: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    rc, out = _cli(capsys, "cluster", "status", "--json", "--state-dir", state)
    info = json.loads(out)
    assert rc == 0 and info["alive_workers"] == 2, info
    workers = info["workers"]
    assert [w["link_rate"] for w in workers] == ["1gbit", "1gbit"]
    assert info["netns"]["link_rate"] == "1gbit"
    assert info["hosts"] == [h["address"] for h in info["netns"]["hosts"]]
    rc, out = _cli(capsys, "cluster", "status", "--state-dir", state)
    for w in workers:
        assert f"worker {w['index']}: {w['host']} in {w['namespace']}, link 1gbit" in out, out
    return list(workers)


@pytest.mark.slow  # a netns cluster of its own (~35 s idle); make test-all
def test_launch_on_two_namespace_hosts(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from gpuspark import launch

    t0, before = time.monotonic(), _ours()
    state = str(tmp_path / "state")
    assert main([*UP, "--link-rate", "1gbit", "--state-dir", state, "--json"]) == 0
    try:
        cluster = LocalCluster.running(state)
        assert cluster is not None and cluster.state is not None
        workers = _check_status(state, capfd)
        for w in workers:  # each worker runs in its host's namespace, from its rendered files
            where = subprocess.run(["ip", "netns", "identify", str(w["pid"])], capture_output=True)
            assert where.stdout.decode().strip() == w["namespace"]
            env = Path(state) / "netns" / "rendered" / "hosts" / w["namespace"] / "spark-env.sh"
            assert netns.spark_env_values(env)["SPARK_LOCAL_IP"] == w["host"]
        spark = _session_on(cluster, kind="training", **{"spark.app.name": "gpuspark-netns"})
        try:
            out = launch.run(gloo_addresses, num_processes=2, spark=spark, timeout=240)
        finally:
            spark.stop()
        line = next(ln for ln in capfd.readouterr().out.splitlines() if "ranks:" in ln)
    finally:
        assert main(["cluster", "down", "--state-dir", state]) == 0
    hosts = [w["host"] for w in workers]
    assert all(ipaddress.ip_address(h) in netns.NETWORK for h in hosts) and len(set(hosts)) == 2
    assert [r["address"] for r in out] == hosts or sorted(r["address"] for r in out) == sorted(
        hosts
    ), (out, line)
    for rank in out:
        assert rank["ifname"] == netns.IFNAME and rank["sum"] == 2.0
        assert rank["connections"] == [rank["address"]], rank  # gloo's sockets: that link only
    assert _ours() == before
    assert _processes_in(Path(state)) == []
    print(f"ranks' addresses: {[(r['address'], r['connections']) for r in out]}")
    print(f"netns launch test: {time.monotonic() - t0:.1f} s")


def test_failed_up_leaves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Workers that cannot register in time: the start fails after the namespaces, the master
    and the workers were made, and removes them all."""
    before = _ours()
    state = tmp_path / "state"
    rc, out = _cli(capsys, *UP, "--timeout", "0.1", "--state-dir", str(state))
    assert rc == 1 and "of 2 Spark workers registered" in out, out
    assert sorted(p.name for p in (state / "logs").glob("worker-*.log")) == [
        "worker-0.log",
        "worker-1.log",
    ]  # both workers had been started in their namespaces
    assert _ours() == before
    assert not (state / "cluster.json").exists() and not (state / "netns").exists()
    assert _processes_in(state) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stopped_up_leaves_nothing(tmp_path: Path, signum: int) -> None:
    """``up`` stopped (Ctrl-C, or SIGTERM) while it waits for its workers cleans up too."""
    before = _ours()
    state = tmp_path / "state"
    env = {**os.environ, "GPUSPARK_STATE_DIR": str(state)}
    cmd = [sys.executable, "-m", "gpuspark.cli.main", *UP]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (state / "cluster.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # the namespaces and the master are up once the state is written
        assert len(_ours() - before) == 5  # a bridge, 2 namespaces, 2 veths
        proc.send_signal(signum)
        output = proc.communicate(timeout=60)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, output
    assert _ours() == before, output
    assert _processes_in(state) == []
