"""Network-namespace hosts without Spark: the rate, the plan, the one-line refusals, the
network itself (made, shaped, removed) and the rendered files each host's worker starts from.
The tests that make namespaces need root and ``ip``; they skip otherwise."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuspark.cli.main import main
from gpuspark.cluster import netns
from gpuspark.cluster.shape import EmbeddedShape
from gpuspark.cluster.state import NetnsState
from gpuspark.errors import ClusterError
from gpuspark.spec import default_spec

ROOT = os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None
needs_root = pytest.mark.skipif(not ROOT, reason="network namespaces need root, ip and tc")


@pytest.mark.parametrize(
    ("text", "bits"),
    [("200mbit", 200_000_000), ("1gbit", 10**9), ("25mbps", 200_000_000), ("1.5Mbit", 1_500_000)],
)
def test_rate_in_tc_units(text: str, bits: int) -> None:
    assert netns.parse_rate(text) == bits


@pytest.mark.parametrize("text", ["fast", "200", "200 mb", "0mbit", "-1gbit", "1e9bit"])
def test_bad_rate_is_refused_with_the_units(text: str) -> None:
    with pytest.raises(ClusterError, match=r"is not a rate.*mbit"):
        netns.parse_rate(text)


def _up(capsys: pytest.CaptureFixture[str], tmp_path: Path, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["cluster", "up", "--state-dir", str(tmp_path / "state"), *extra])
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


def test_netns_without_root_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    rc, out = _up(capsys, tmp_path, "--hosts", "2", "--netns")
    assert rc == 1
    assert out.strip().splitlines() == [
        "error: --netns needs root to make network namespaces, veths and a bridge (uid 1000) "
        "(run it as root, or drop --netns for loopback hosts)"
    ]
    assert not (tmp_path / "state" / "cluster.json").exists()


def test_netns_without_ip_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    rc, out = _up(capsys, tmp_path, "--hosts", "2", "--netns", "--link-rate", "1gbit")
    assert rc == 1
    assert len(out.strip().splitlines()) == 1
    assert "--netns needs the `ip` command, which is not on PATH" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--netns"], "give --hosts N"),
        (["--hosts", "2", "--workers", "3", "--netns"], "workers=3 for 2 hosts"),
        (["--hosts", "2", "--netns", "--link-rate", "lots"], "'lots' is not a rate"),
    ],
)
def test_netns_requests_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    rc, out = _up(capsys, tmp_path, *args)
    assert rc == 1 and message in out, out
    assert len(out.strip().splitlines()) == 1
    assert not (tmp_path / "state" / "cluster.json").exists()


# -- the network itself (root) ----------------------------------------------------------------


@pytest.fixture()
def network() -> Iterator[NetnsState]:
    """Two namespace hosts at 100 Mbit/s; removed after the test whatever it did."""
    net = netns.plan_network(2, 2, "100mbit")
    try:
        netns.bring_up(net)
        yield net
    finally:
        netns.tear_down(net)


def _in(namespace: str, *cmd: str) -> str:
    done = subprocess.run(["ip", "netns", "exec", namespace, *cmd], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_root
def test_hosts_get_namespaces_addresses_and_shaped_links(network: NetnsState) -> None:
    made = [network.bridge, *(h.namespace for h in network.hosts), *(h.veth for h in network.hosts)]
    assert sorted(netns.leftovers(network)) == sorted(made)
    addresses = [ipaddress.ip_address(h.address) for h in network.hosts]
    assert all(a in netns.NETWORK for a in addresses) and len(set(addresses)) == 2
    for h in network.hosts:
        shown = _in(h.namespace, "ip", "-4", "-o", "addr", "show", "dev", netns.IFNAME)
        assert f"{h.address}/24" in shown
        inside = _in(h.namespace, "tc", "qdisc", "show", "dev", netns.IFNAME)
        outside = subprocess.run(["tc", "qdisc", "show", "dev", h.veth], capture_output=True)
        assert "tbf" in inside and "rate 100Mbit" in inside
        assert b"rate 100Mbit" in outside.stdout


_SINK = """
import socket, sys, time
srv = socket.create_server((sys.argv[1], 0)); print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept(); n = 0; t0 = None
while chunk := conn.recv(1 << 16):
    t0 = t0 or time.monotonic(); n += len(chunk)
print(n * 8 / (time.monotonic() - t0), flush=True)
"""
_SOURCE = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2]))); end = time.monotonic() + 2
buf = b"x" * (1 << 16)
while time.monotonic() < end:
    s.sendall(buf)
s.close()
"""


def _bits_per_s(net: NetnsState, src: int, dst: int) -> float:
    """What host ``src`` sends to host ``dst`` in 2 s over TCP, bits per second."""
    ns_src, ns_dst = net.hosts[src].namespace, net.hosts[dst].namespace
    cmd = ["ip", "netns", "exec", ns_dst, sys.executable, "-c", _SINK, net.hosts[dst].address]
    sink = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None
        port = sink.stdout.readline().strip()
        source = [sys.executable, "-c", _SOURCE, net.hosts[dst].address, port]
        subprocess.run(["ip", "netns", "exec", ns_src, *source], check=True, timeout=30)
        return float(sink.stdout.readline())
    finally:
        sink.wait(timeout=30)


@needs_root
def test_shaped_link_carries_its_rate_each_way(network: NetnsState) -> None:
    """Both hosts' links are shaped at 100 Mbit/s: either direction gets close to it."""
    forward, back = _bits_per_s(network, 0, 1), _bits_per_s(network, 1, 0)
    print(f"100mbit link: {forward / 1e6:.1f} Mbit/s h0->h1, {back / 1e6:.1f} Mbit/s h1->h0")
    for rate in (forward, back):
        assert 60e6 < rate < 110e6


@needs_root
def test_tear_down_leaves_nothing(network: NetnsState) -> None:
    assert netns.tear_down(network) == []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert network.cluster_id not in listed and network.cluster_id not in links


@needs_root
def test_a_failed_bring_up_is_torn_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second host's shaping fails half way through: what was made goes again."""
    net = netns.plan_network(2, 2, "100mbit")
    real, calls = netns._shape_link, []

    def fail_late(device: str, rate: str, namespace: str | None = None) -> None:
        calls.append(device)
        if len(calls) == 3:
            raise ClusterError("provoked")
        real(device, rate, namespace)

    monkeypatch.setattr(netns, "_shape_link", fail_late)
    with pytest.raises(ClusterError, match="provoked"):
        try:
            netns.bring_up(net)
        finally:
            assert netns.leftovers(net)  # the first host and the bridge were made
            assert netns.tear_down(net) == []


@needs_root
def test_plan_takes_a_subnet_no_interface_uses(network: NetnsState) -> None:
    other = netns.plan_network(1, 1)
    assert ipaddress.ip_network(f"{other.gateway}/24", strict=False) != ipaddress.ip_network(
        f"{network.gateway}/24", strict=False
    )
    assert other.cluster_id != network.cluster_id


# -- the files each host's worker starts from --------------------------------------------------


def _shape() -> EmbeddedShape:
    return EmbeddedShape(2, 1, 2, "2g", 1, 1, 1, 0.5, "1g")


def test_rendered_spark_env_of_each_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "check_available", lambda link_rate=None: None)
    monkeypatch.setattr(netns, "_used_networks", set)
    net = netns.plan_network(2, 2, "200mbit")
    root = netns.render_hosts(
        default_spec(), net, f"spark://{net.gateway}:7077", _shape(), [["0"], ["1"]], tmp_path
    )
    for i, h in enumerate(net.hosts):
        folder = root / "rendered" / "hosts" / h.namespace
        env = netns.spark_env_values(folder / "spark-env.sh")
        assert env["SPARK_LOCAL_IP"] == h.address
        assert env["GLOO_SOCKET_IFNAME"] == netns.IFNAME
        assert env["NCCL_SOCKET_IFNAME"] == "=" + netns.IFNAME
        assert env["SPARK_WORKER_CORES"] == "2" and env["SPARK_WORKER_MEMORY"] == "2g"
        assert env["SPARK_LOCAL_DIRS"] == str(root / "local" / h.namespace)
        assert f"discoveryScript={root / 'gpus.sh'}" in env["SPARK_WORKER_OPTS"]
        assert "gpu.amount=1" in env["SPARK_WORKER_OPTS"]
        script = subprocess.run(
            [str(root / "gpus.sh")], env={"SPARK_CONF_DIR": str(folder)}, capture_output=True
        )
        assert script.stdout == f'{{"name": "gpu", "addresses": ["{i}"]}}'.encode()
    workers = (root / "rendered" / "workers").read_text()
    assert [h.namespace for h in net.hosts] == workers.split()[-2:]


def test_driver_conf_binds_to_the_bridge() -> None:
    net = NetnsState("abc123", "gs-abc123-br", "198.18.7.1", 24)
    assert netns.driver_conf(net) == {
        "spark.driver.host": "198.18.7.1",
        "spark.driver.bindAddress": "198.18.7.1",
    }
    assert netns.driver_conf(None) == {}
