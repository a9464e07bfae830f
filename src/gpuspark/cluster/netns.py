"""Network-namespace hosts for the embedded cluster (``cluster up --hosts N --netns``).

Each host gets a network namespace of its own (``gpuspark-<id>-h<i>``), a veth pair whose
host side (``gs-<id>-h<i>``) joins a bridge in this namespace (``gs-<id>-br``) and whose
namespace side is :data:`IFNAME`, an address from 198.18.0.0/15 (RFC 2544's benchmarking
range) and, with a link rate, a ``tc`` token bucket on both ends of its veth. The master and
the driver stay in this namespace on the bridge's address.

The workers start from the files ``render standalone`` writes for a spec of the rehearsal
cluster (:func:`rehearsal_spec`: one node group per host, with its address and
``socket_ifname`` = :data:`IFNAME`): ``ip netns exec NS spark-class ...Worker`` with
``SPARK_CONF_DIR`` = that host's folder, so ``spark-env.sh`` is what sets the worker's
address, ports, cores, memory, GPUs and NCCL's and gloo's interface, as on bare metal.

Everything made here is removed by :func:`tear_down` (``cluster down``, and a start that
fails or is interrupted). Only root can make namespaces: :func:`check_available` says so in
one line.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gpuspark._util.procs import spawn_group
from gpuspark.cluster.conf import render_spark, write_rendered, write_rendered_tree
from gpuspark.cluster.state import NetnsHost, NetnsState, WorkerState
from gpuspark.cluster.workers import spark_home
from gpuspark.errors import ClusterError
from gpuspark.schedulers.standalone.render import Inputs, InstallPaths, render_standalone
from gpuspark.spec import NodeGroup

if TYPE_CHECKING:
    from gpuspark.cluster.shape import EmbeddedShape
    from gpuspark.spec import ClusterSpec

__all__ = [
    "IFNAME",
    "NETWORK",
    "bring_up",
    "check_available",
    "driver_conf",
    "leftovers",
    "parse_rate",
    "plan_network",
    "remove",
    "render_hosts",
    "spark_env_values",
    "start_worker",
    "tear_down",
    "worker_fields",
]

NETWORK = ipaddress.ip_network("198.18.0.0/15")
"""Where the hosts' addresses come from: reserved for benchmarking (RFC 2544), one /24 each
cluster, the bridge on ``.1``, host ``i`` on ``.(2 + i)``."""
IFNAME = "gpuspark0"
"""The veth's name inside every host's namespace: the node groups' ``socket_ifname``."""
FOLDER = "netns"
"""Under the state directory: the rendered files, the hosts' local dirs, the GPU script."""
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$")
_BITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_GPU_SCRIPT = """#!/bin/sh
# GPU addresses of a rehearsal host: gpus.json beside its spark-env.sh ($SPARK_CONF_DIR).
exec cat "$SPARK_CONF_DIR/gpus.json"
"""


# -- checks and plan (no side effects) ------------------------------------------------------


def check_available(link_rate: str | None = None) -> None:
    """A :class:`ClusterError` when this process cannot make namespaces: not root, no ``ip``
    (or no ``tc`` for a link rate)."""
    if os.geteuid() != 0:
        raise ClusterError(
            f"--netns needs root to make network namespaces, veths and a bridge (uid "
            f"{os.geteuid()})",
            remedy="run it as root, or drop --netns for loopback hosts",
        )
    for tool in ("ip", "tc") if link_rate else ("ip",):
        if shutil.which(tool) is None:
            raise ClusterError(
                f"--netns needs the `{tool}` command, which is not on PATH",
                remedy="install iproute2 (apt-get install iproute2)",
            )


def parse_rate(text: str) -> int:
    """``--link-rate`` in bits per second; ``tc``'s units: ``200mbit``, ``1gbit``, ``25mbps``
    (bytes per second), ..."""
    found = _RATE.match(text.strip().lower())
    if found is None or float(found.group(1)) <= 0:
        raise ClusterError(
            f"--link-rate {text!r} is not a rate",
            remedy="give a number and a tc unit: bit, kbit, mbit, gbit or kbps, mbps, gbps "
            "(bytes/s), e.g. 200mbit",
        )
    unit = found.group(2)
    bits = _BITS[unit] if unit in _BITS else 8 * _BITS[unit.replace("bps", "bit")]
    return max(1, int(float(found.group(1)) * bits))


def _used_networks() -> set[ipaddress.IPv4Network]:
    out = _ip("-j", "-4", "addr", "show")
    used = set()
    for link in json.loads(out or "[]"):
        for addr in link.get("addr_info", []):
            used.add(ipaddress.IPv4Network(f"{addr['local']}/24", strict=False))
    return used


def plan_network(hosts: int | None, workers: int, link_rate: str | None = None) -> NetnsState:
    """Names and addresses for ``hosts`` namespace hosts (one worker each) on a /24 of
    :data:`NETWORK` that no interface here uses yet; nothing is made."""
    if hosts is None or not 1 <= hosts <= 253:
        raise ClusterError(
            "--netns puts each of --hosts N hosts in a namespace of its own",
            remedy="give --hosts N (1 to 253) with --netns",
        )
    if workers != hosts:
        raise ClusterError(
            f"--netns runs one worker per host, as on bare metal: workers={workers} for "
            f"{hosts} hosts",
            remedy=f"drop --workers, or give --workers {hosts}",
        )
    rate = ""
    if link_rate:
        parse_rate(link_rate)
        rate = link_rate.strip().lower()
    check_available(rate)
    used = _used_networks()
    subnet = next((n for n in NETWORK.subnets(new_prefix=24) if n not in used), None)
    if subnet is None:
        raise ClusterError(f"every /24 of {NETWORK} is in use here", remedy="gpuspark cluster down")
    cid = secrets.token_hex(3)
    addrs = list(subnet.hosts())
    members = [
        NetnsHost(f"gpuspark-{cid}-h{i}", f"gs-{cid}-h{i}", IFNAME, str(addrs[1 + i]))
        for i in range(hosts)
    ]
    return NetnsState(cid, f"gs-{cid}-br", str(addrs[0]), 24, rate, members)


# -- make and remove ------------------------------------------------------------------------


def _ip(*args: str, namespace: str | None = None) -> str:
    return _run(["ip", *(["-n", namespace] if namespace else []), *args])


def _run(cmd: list[str]) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"`{' '.join(cmd)}` failed: {exc}") from exc
    if done.returncode != 0:
        raise ClusterError(
            f"`{' '.join(cmd)}` failed: {done.stderr.strip() or f'exit {done.returncode}'}",
            remedy="see `ip netns list` and `ip link`; `gpuspark cluster down` removes ours",
        )
    return done.stdout


def _shape_link(device: str, rate: str, namespace: str | None = None) -> None:
    """A token bucket on ``device``'s egress: ``rate``, a burst of 20 ms at that rate (at least
    ten 1514-byte frames), at most 100 ms of queue."""
    burst = max(15140, parse_rate(rate) // 8 // 50)
    where = ["-n", namespace] if namespace else []
    tbf = ["root", "tbf", "rate", rate, "burst", str(burst), "latency", "100ms"]
    _run(["tc", *where, "qdisc", "replace", "dev", device, *tbf])


def bring_up(net: NetnsState) -> str:
    """Make the bridge, and each host's namespace, veth, address and shaping; return the
    bridge's address (the master's). A failure leaves what it made: :func:`tear_down` it."""
    _ip("link", "add", net.bridge, "type", "bridge")
    _ip("addr", "add", f"{net.gateway}/{net.prefix}", "dev", net.bridge)
    _ip("link", "set", net.bridge, "up")
    for h in net.hosts:
        _ip("netns", "add", h.namespace)
        _ip("link", "add", h.veth, "type", "veth", "peer", "name", h.ifname, "netns", h.namespace)
        _ip("link", "set", h.veth, "master", net.bridge, "up")
        _ip("addr", "add", f"{h.address}/{net.prefix}", "dev", h.ifname, namespace=h.namespace)
        _ip("link", "set", h.ifname, "up", namespace=h.namespace)
        _ip("link", "set", "lo", "up", namespace=h.namespace)  # executors talk to their Python
        if net.link_rate:
            _shape_link(h.veth, net.link_rate)
            _shape_link(h.ifname, net.link_rate, h.namespace)
    return net.gateway


def leftovers(net: NetnsState) -> list[str]:
    """The namespaces and links of ``net`` that still exist."""
    names = {h.namespace for h in net.hosts}
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    found = [w[0] for ln in listed.stdout.splitlines() if (w := ln.split()) and w[0] in names]
    links = {net.bridge, *(h.veth for h in net.hosts)}
    shown = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False)
    for line in shown.stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name in links:
            found.append(name)
    return found


def _kill_inside(namespace: str) -> None:
    """SIGKILL what still runs in ``namespace`` (processes ``up`` started there)."""
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    for pid in done.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def tear_down(net: NetnsState | None, timeout: float = 10.0) -> list[str]:
    """Remove every namespace, veth and the bridge of ``net`` (those that exist) and wait
    until they are gone; return what is still there after ``timeout`` seconds."""
    if net is None:
        return []
    for h in net.hosts:
        _kill_inside(h.namespace)
        for cmd in (["link", "del", h.veth], ["netns", "del", h.namespace]):
            subprocess.run(["ip", *cmd], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", net.bridge], capture_output=True, check=False)
    deadline = time.monotonic() + timeout
    while (left := leftovers(net)) and time.monotonic() < deadline:
        time.sleep(0.1)  # a namespace's links go when the kernel has cleaned it up
    return left


def remove(net: NetnsState | None) -> None:
    """:func:`tear_down`, and a :class:`ClusterError` naming what could not be removed."""
    left = tear_down(net)
    if left:
        raise ClusterError(
            f"could not remove {', '.join(left)}",
            remedy="remove them by hand: `ip netns del NAME`, `ip link del NAME`",
        )


# -- the hosts' files and workers -----------------------------------------------------------


def rehearsal_spec(
    spec: ClusterSpec, net: NetnsState, master_url: str, shape: EmbeddedShape, root: Path
) -> ClusterSpec:
    """``spec`` as the rehearsal cluster: ``master_url``, and one node group per host (named
    after its namespace) with its address, ``socket_ifname`` = :data:`IFNAME`, the worker's
    cores, memory and GPUs of ``shape`` and its own local dir under ``root``."""
    template = spec.nodes[0] if spec.nodes else None
    memory_mib = _mib(shape.memory_per_worker)
    groups = [
        NodeGroup(
            name=h.namespace,
            hosts=[h.namespace],
            addresses=[h.address],
            socket_ifname=h.ifname,
            gpus_per_node=max(1, shape.gpus_per_worker),
            gpu_model=template.gpu_model if template else "simulated",
            gpu_memory_gb=template.gpu_memory_gb if template else 1.0,
            cpu_cores=shape.cores_per_worker,
            ram_gb=(memory_mib + 0.5) / 1024 / 0.9,  # spark_env leaves 10 % to the system
            local_dirs=[str(root / "local" / h.namespace)],
        )
        for h in net.hosts
    ]
    spark = spec.spark.model_copy(update={"master": master_url})
    return spec.model_copy(update={"nodes": groups, "spark": spark})


def _mib(size: str) -> int:
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2}
    unit = size[-1].lower() if size[-1].isalpha() else "m"
    return max(1, int(float(size.rstrip("kmgtKMGT")) * units[unit]))


def render_hosts(
    spec: ClusterSpec,
    net: NetnsState,
    master_url: str,
    shape: EmbeddedShape,
    gpu_sets: list[list[str]],
    state_dir: Path,
) -> Path:
    """Write ``render standalone``'s files of the rehearsal cluster under
    ``<state_dir>/netns/rendered`` (each host's ``spark-env.sh`` in ``hosts/<namespace>/``,
    with ``gpus.json`` beside it) and return ``<state_dir>/netns``."""
    root = state_dir / FOLDER
    if shape.gpus_per_worker < 1:
        raise ClusterError(
            "--netns starts workers from rendered files, which give each host its GPUs",
            remedy="give each worker at least one GPU slot (drop --gpus 0)",
        )
    script = root / "gpus.sh"
    rehearsal = rehearsal_spec(spec, net, master_url, shape, root)
    paths = InstallPaths(spark_home=str(spark_home()), discovery_script=str(script))
    conf = render_spark(rehearsal, discovery_script_path=str(script))
    inputs = Inputs(conf, frozenset(), dcgm_port=9400, node_exporter_port=9100)
    files = dict(render_standalone(rehearsal, inputs, paths).files)
    for h, gpus in zip(net.hosts, gpu_sets, strict=True):
        files[f"hosts/{h.namespace}/gpus.json"] = json.dumps({"name": "gpu", "addresses": gpus})
        (root / "local" / h.namespace).mkdir(parents=True, exist_ok=True)
    write_rendered_tree(files, root / "rendered")
    write_rendered({"gpus.sh": _GPU_SCRIPT}, root)
    return root


def spark_env_values(path: Path) -> dict[str, str]:
    """The ``export NAME=value`` lines of a rendered ``spark-env.sh``, unquoted."""
    import shlex

    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, _, value = words[1].partition("=")
            values[name] = value
    return values


def start_worker(
    state_dir: Path, net: NetnsState, index: int, master_url: str, env: dict[str, str], props: str
) -> WorkerState:
    """Start worker ``index`` inside host ``index``'s namespace the bare-metal way:
    ``spark-class ...Worker MASTER`` with ``SPARK_CONF_DIR`` = that host's rendered folder
    (its ``spark-env.sh`` sets the rest); ``props``: its properties file's lines."""
    host = net.hosts[index]
    conf_dir = state_dir / FOLDER / "rendered" / "hosts" / host.namespace
    values = spark_env_values(conf_dir / "spark-env.sh")
    work = state_dir / FOLDER / "workers" / host.namespace  # removed with FOLDER on failure
    write_rendered({"worker.conf": props}, work, private=frozenset({"worker.conf"}))
    env = {k: v for k, v in env.items() if k != "SPARK_ENV_LOADED"}
    env.update(SPARK_CONF_DIR=str(conf_dir), SPARK_LOCAL_IP=host.address)
    spark_class = str(spark_home() / "bin" / "spark-class")
    cmd = ["ip", "netns", "exec", host.namespace, spark_class, WORKER_CLASS, master_url]
    cmd += ["--properties-file", str(work / "worker.conf")]
    log = state_dir / "logs" / f"worker-{index}.log"
    pid = spawn_group(cmd, log, env=env, cwd=state_dir)
    gpus = json.loads((conf_dir / "gpus.json").read_text(encoding="utf-8"))["addresses"]
    port, webui = int(values["SPARK_WORKER_PORT"]), int(values["SPARK_WORKER_WEBUI_PORT"])
    cores, memory = int(values["SPARK_WORKER_CORES"]), values["SPARK_WORKER_MEMORY"]
    return WorkerState(index, pid, port, webui, cores, memory, gpus, str(log), host.address)


def worker_fields(net: NetnsState | None, index: int) -> dict[str, str]:
    """``namespace`` and ``link_rate`` of worker ``index`` for its status (none: ``{}``)."""
    if net is None or index >= len(net.hosts):
        return {}
    return {"namespace": net.hosts[index].namespace, "link_rate": net.link_rate or "unshaped"}


def driver_conf(net: NetnsState | None) -> dict[str, str]:
    """Where a driver of this machine binds so the namespaces reach it: the bridge's
    address (``{}`` without namespace hosts)."""
    if net is None:
        return {}
    return {"spark.driver.host": net.gateway, "spark.driver.bindAddress": net.gateway}
