"""Checks of this node: Java, pyspark, the NVIDIA stack, InfiniBand ports, NCCL's environment.

Each ``*_check`` function takes plain values (a tool's output, an environment) and returns
checks, so it is tested without the tool; :func:`node_checks` gathers the values here. A tool
that is not installed gives a "skipped: install X" check, never an exception.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from gpuspark._util import spark_compat
from gpuspark.doctor.parsers import (
    GpuHealth,
    IbPort,
    SmiSummary,
    parse_ibstat,
    parse_nvidia_smi,
    parse_nvidia_smi_q,
)
from gpuspark.doctor.report import Check, failure, info, ok, skipped, warning
from gpuspark.spec.network import hca_ports, node_group_for

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec, NodeGroup

__all__ = [
    "MIN_JAVA",
    "cuda_check",
    "ecc_checks",
    "gpu_stack_checks",
    "hca_checks",
    "ibstat_checks",
    "interface_checks",
    "interface_state",
    "java_check",
    "nccl_env_checks",
    "node_checks",
    "pyspark_check",
    "spec_network_checks",
    "tool_output",
]

MIN_JAVA = 17
"""Spark 4 runs on Java 17 or 21."""
_JAVA_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def tool_output(args: Sequence[str], timeout: float = 20.0) -> str | None:
    """stdout of a command, or ``None`` when it is not installed, fails or hangs."""
    exe = shutil.which(args[0])
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, *args[1:]], capture_output=True, text=True, timeout=timeout, check=True
        )
    except (subprocess.SubprocessError, OSError):
        return None
    return out.stdout or out.stderr


def java_check(version_text: str | None) -> Check:
    """``java -version`` output (``None``: no java) -> ok when Java >= 17."""
    name = "Java"
    if version_text is None:
        return failure(name, "no `java` on PATH", f"install a JDK {MIN_JAVA} or 21, set JAVA_HOME")
    found = _JAVA_VERSION.search(version_text)
    if found is None:
        return warning(name, f"cannot read {version_text.strip()[:60]!r}", "check `java -version`")
    major = int(found.group(1))
    if major == 1 and found.group(2):  # Java 8 says "1.8.0_392"
        major = int(found.group(2))
    line = version_text.strip().splitlines()[0]
    if major < MIN_JAVA:
        return failure(name, line, f"Spark 4 needs Java {MIN_JAVA}+: install JDK 17 or 21")
    return ok(name, line)


def pyspark_check() -> Check:
    """pyspark importable (found without importing it), in a version gpuspark supports."""
    import importlib.util

    remedy = f"pip install '{spark_compat.PYSPARK_REQUIREMENT}'"
    if importlib.util.find_spec("pyspark") is None:
        return failure("pyspark", "not importable", remedy)
    version = spark_compat.installed_version()
    problem = spark_compat.version_problem(version)
    return failure("pyspark", problem, remedy) if problem else ok("pyspark", f"pyspark {version}")


def _major_minor(version: str | None) -> tuple[int, int] | None:
    found = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def cuda_check(driver_cuda: str | None, torch_cuda: str | None, where: str) -> Check:
    """The CUDA a torch build needs vs the newest CUDA the driver supports."""
    name = f"CUDA ({where})"
    if torch_cuda is None:
        return failure(
            name,
            f"torch on {where} is a CPU build, on a node with NVIDIA GPUs",
            "install a CUDA build of torch (pip install torch --index-url "
            "https://download.pytorch.org/whl/cu121 or the cuXXX the driver supports)",
        )
    need, have = _major_minor(torch_cuda), _major_minor(driver_cuda)
    if need is None or have is None:
        return warning(name, f"torch CUDA {torch_cuda}, driver CUDA {driver_cuda}", "")
    evidence = f"torch built for CUDA {torch_cuda}; the driver supports up to {driver_cuda}"
    if need[0] > have[0]:
        return failure(
            name,
            evidence,
            f"upgrade the NVIDIA driver, or install a torch built for CUDA {have[0]}.x",
        )
    if need > have:
        return warning(
            name,
            evidence + " (minor-version compatibility only)",
            "upgrade the driver if kernels fail with 'no kernel image' or PTX errors",
        )
    return ok(name, evidence)


def ecc_checks(gpus: Sequence[GpuHealth]) -> list[Check]:
    """Memory-error state of each GPU from ``nvidia-smi -q``."""
    checks: list[Check] = []
    for g in gpus:
        name = f"GPU memory errors ({g.bus_id})"
        if g.remap_failure:
            checks.append(
                failure(
                    name,
                    "Remapped Rows: Remapping Failure Occurred: Yes",
                    "drain the node; run NVIDIA's field diagnostic (RMA check)",
                )
            )
        elif g.remap_pending or g.retired_pending or g.reset_required:
            checks.append(
                warning(
                    name,
                    _pending_evidence(g),
                    "reset the GPU (nvidia-smi -r) or "
                    "reboot when it is idle, so the remap takes effect",
                )
            )
        elif g.volatile_uncorrectable:
            checks.append(
                warning(
                    name,
                    f"{g.volatile_uncorrectable} uncorrectable ECC errors since the driver loaded",
                    "the last job's results on this "
                    "GPU are suspect: check XIDs in dmesg (48, 63, 64, 94, 95)",
                )
            )
        else:
            checks.append(ok(name, "no uncorrectable ECC errors, no pending remap"))
    return checks


def _pending_evidence(g: GpuHealth) -> str:
    parts = []
    if g.remap_pending:
        rows = g.remapped_uncorrectable
        count = "" if rows is None else f" ({rows} rows remapped for uncorrectable errors)"
        parts.append("row remapping pending" + count)
    if g.retired_pending:
        parts.append("page retirement pending")
    if g.reset_required:
        parts.append("GPU Reset Status: Reset Required: Yes")
    return "; ".join(parts)


def gpu_stack_checks(
    smi: SmiSummary | None, torch_cuda: str | None, q_text: str | None = None
) -> list[Check]:
    """Driver, CUDA vs torch on this node, ECC state. ``smi`` ``None``: no ``nvidia-smi``."""
    if smi is None:
        return [info("GPU stack", "no GPU on this node (no nvidia-smi): training uses gloo on CPU")]
    gpus = ", ".join(smi.gpus) or "no GPU listed"
    checks = [
        ok("NVIDIA driver", f"driver {smi.driver_version}, CUDA {smi.cuda_version}: {gpus}"),
        cuda_check(smi.cuda_version, torch_cuda, "driver"),
    ]
    if q_text is None:
        checks.append(skipped("GPU memory errors", "nvidia-smi -q gave no output"))
    else:
        checks += ecc_checks(parse_nvidia_smi_q(q_text)[2])
    return checks


def ibstat_checks(ports: Sequence[IbPort] | None, spec_gbps: float, spec_kind: str) -> list[Check]:
    """Every port Active/LinkUp and as fast as the spec's compute network. ``None``: no ibstat."""
    if ports is None:
        if spec_kind == "infiniband":
            return [
                skipped(
                    "InfiniBand ports",
                    "no ibstat on this node",
                    "install infiniband-diags (apt) / infiniband-diags (dnf)",
                )
            ]
        return [info("InfiniBand ports", "no ibstat; the spec's compute network is ethernet")]
    if not ports:
        return [warning("InfiniBand ports", "ibstat lists no port", "check the HCA driver")]
    return [_port_check(p, spec_gbps, spec_kind) for p in ports]


def _port_check(p: IbPort, spec_gbps: float, spec_kind: str = "infiniband") -> Check:
    name = f"IB port {p.ca}/{p.port}"
    evidence = (
        f"State: {p.state}, Physical state: {p.physical_state}, Rate: {p.rate_gbps:g}"
        if p.rate_gbps is not None
        else f"State: {p.state}, Physical state: {p.physical_state}"
    )
    if not p.healthy:
        fix = (
            "check the cable and the switch port"
            if p.physical_state != "LinkUp"
            else "start a subnet manager (opensm) or check the switch's"
        )
        return failure(name, evidence, fix)
    if p.rate_gbps is not None and p.rate_gbps < spec_gbps:
        return warning(
            name,
            f"{evidence} Gb/s, below the spec's {spec_gbps:g} Gb/s",
            "check cable/transceiver and link width (ibportstate), or fix the spec",
        )
    if spec_kind == "infiniband" and p.link_layer.lower() == "ethernet":
        return warning(
            name,
            f"{evidence} Gb/s, link layer Ethernet (RoCE) while the spec's compute network "
            "is infiniband",
            'set networks.compute.kind = "ethernet" in the spec for a RoCE fabric (and '
            "NCCL_IB_GID_INDEX for RoCE v2), or use the HCA's InfiniBand ports",
        )
    return ok(name, f"{evidence} Gb/s ({p.link_layer})")


def _matches(pattern: str, names: Sequence[str]) -> list[str]:
    """NCCL's list syntax: ``^`` excludes, ``=`` matches exactly, else prefixes."""
    exact = pattern.startswith("=")
    wanted = [w.split(":")[0] for w in pattern.lstrip("=").split(",") if w]
    return [n for n in names if any(n == w if exact else n.startswith(w) for w in wanted)]


def nccl_env_checks(
    env: Mapping[str, str], interfaces: Sequence[str], hcas: Sequence[str] | None, spec_kind: str
) -> list[Check]:
    """NCCL_* variables vs the interfaces and HCAs this node has, and known non-settings."""
    checks: list[Check] = []
    if "NCCL_SOCKET_TIMEOUT" in env:
        checks.append(
            warning(
                "NCCL_SOCKET_TIMEOUT",
                f"NCCL_SOCKET_TIMEOUT={env['NCCL_SOCKET_TIMEOUT']} is set, but it is not an NCCL "
                "setting: it does nothing",
                "set the collective timeout with init_process_group(timeout=...); see "
                "TORCH_NCCL_ASYNC_ERROR_HANDLING, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC, "
                "NCCL_IB_TIMEOUT",
            )
        )
    ifname = env.get("NCCL_SOCKET_IFNAME")
    if ifname and not ifname.startswith("^") and not _matches(ifname, interfaces):
        checks.append(
            failure(
                "NCCL_SOCKET_IFNAME",
                f"{ifname} matches none of {', '.join(interfaces)}",
                "set it to an interface of this node",
            )
        )
    elif ifname:
        checks.append(ok("NCCL_SOCKET_IFNAME", f"{ifname} (interfaces: {', '.join(interfaces)})"))
    checks += _ib_env_checks(env, hcas, spec_kind)
    if not checks:
        checks.append(ok("NCCL environment", "no NCCL_* overrides: NCCL picks interfaces itself"))
    return checks


def _ib_env_checks(env: Mapping[str, str], hcas: Sequence[str] | None, kind: str) -> list[Check]:
    checks: list[Check] = []
    hca = env.get("NCCL_IB_HCA")
    if hca and hcas is not None and not hca.startswith("^") and not _matches(hca, hcas):
        checks.append(
            failure(
                "NCCL_IB_HCA",
                f"{hca} matches none of {', '.join(hcas) or 'no HCA'}",
                "set it to this node's HCAs (ibstat -l)",
            )
        )
    elif hca:
        checks.append(ok("NCCL_IB_HCA", hca))
    if env.get("NCCL_IB_DISABLE") == "1" and kind == "infiniband":
        checks.append(
            warning(
                "NCCL_IB_DISABLE",
                "NCCL_IB_DISABLE=1 on an InfiniBand cluster: NCCL falls back to sockets",
                "unset NCCL_IB_DISABLE",
            )
        )
    return checks


_UP_STATES = ("up", "unknown")
"""``operstate`` values of a working interface: ``unknown`` is what drivers that do not track
the state report (the loopback interface among them)."""


def interface_state(name: str, root: str = "/sys/class/net") -> str | None:
    """The ``operstate`` of interface ``name`` (``up``, ``down``, ``unknown``, ...); ``None``
    when this node has no such interface."""
    try:
        with open(os.path.join(root, name, "operstate"), encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return None


def interface_checks(states: Mapping[str, str | None], interfaces: Sequence[str]) -> list[Check]:
    """The spec's ``socket_ifname`` interfaces (name -> operstate, ``None``: missing) exist
    and are up; ``interfaces``: what this node has, for the message."""
    checks = []
    for name, state in states.items():
        check = f"socket_ifname {name}"
        if state is None:
            have = ", ".join(interfaces) or "none"
            checks.append(
                failure(
                    check,
                    f"no interface {name} on this node (it has {have})",
                    "fix socket_ifname of this node group in the spec (ip -br link lists them)",
                )
            )
        elif state not in _UP_STATES:
            checks.append(
                failure(
                    check,
                    f"{name} is {state}",
                    f"bring it up (ip link set {name} up), check the cable",
                )
            )
        else:
            checks.append(ok(check, f"{name} operstate {state}"))
    return checks


def hca_checks(
    wanted: Sequence[tuple[str, int | None]], ports: Sequence[IbPort] | None, rate_gbps: float
) -> list[Check]:
    """The spec's ``ib_hca`` adapters (adapter, port or ``None`` for any) are in ``ibstat``
    (``None``: no ibstat), Active, at ``rate_gbps`` or faster."""
    if ports is None:
        return [skipped("ib_hca", "no ibstat on this node", "install infiniband-diags")]
    checks = []
    for ca, port in wanted:
        name = f"ib_hca {ca}" + (f":{port}" if port is not None else "")
        found = [p for p in ports if p.ca == ca and (port is None or p.port == port)]
        if not found:
            listed = ", ".join(sorted({f"{p.ca}:{p.port}" for p in ports})) or "no port"
            checks.append(
                failure(
                    name,
                    f"ibstat does not list it (it lists {listed})",
                    "fix ib_hca of this node group in the spec (ibstat -l lists the adapters)",
                )
            )
            continue
        active = [p for p in found if p.state == "Active"]
        checks.append(_hca_port_check(name, active or found, rate_gbps))
    return checks


def _hca_port_check(name: str, ports: Sequence[IbPort], rate_gbps: float) -> Check:
    """Ports of one ``ib_hca`` entry: the first that is not Active fails; a slow one warns."""
    for p in ports:
        evidence = f"port {p.port}: State: {p.state}, Rate: {_rate(p)}"
        if p.state != "Active":
            return failure(
                name, evidence, "check the cable, the switch port and the subnet manager (opensm)"
            )
        if p.rate_gbps is not None and p.rate_gbps < rate_gbps:
            return warning(
                name,
                f"{evidence} Gb/s, below the spec's {rate_gbps:g} Gb/s",
                "check cable, transceiver and link width (ibportstate), or the spec's ib_rate_gbps",
            )
    return ok(name, "; ".join(f"port {p.port}: State: Active, Rate: {_rate(p)}" for p in ports))


def _rate(p: IbPort) -> str:
    return "?" if p.rate_gbps is None else f"{p.rate_gbps:g}"


def _network_fields(group: NodeGroup) -> bool:
    return group.socket_ifname is not None or group.ib_hca is not None


def spec_network_checks(
    spec: ClusterSpec,
    host: str,
    ports: Sequence[IbPort] | None,
    state: Callable[[str], str | None] = interface_state,
) -> list[Check]:
    """The network fields of ``host``'s node group against this node: ``socket_ifname``'s
    interfaces exist and are up (``state``), ``ib_hca``'s adapters are in ``ibstat``
    (``ports``), Active, at the spec's rate. Nothing when no group sets these fields."""
    if not any(_network_fields(g) for g in spec.nodes):
        return []
    group = node_group_for(spec, host)
    if group is None:
        return [info("network fields", f"{host} is in no [[nodes]] group of the spec: not checked")]
    checks = []
    if group.socket_ifname is not None:
        names = group.socket_ifname.split(",")
        checks += interface_checks({n: state(n) for n in names}, _interfaces())
    if group.ib_hca is not None:
        rate = group.ib_rate_gbps or spec.networks.compute.gbps
        checks += hca_checks(hca_ports(group), ports, rate)
    return checks


def _interfaces() -> list[str]:
    import socket

    return sorted(name for _, name in socket.if_nameindex())


def _torch_cuda() -> str | None:
    import torch

    return torch.version.cuda


def node_checks(spec: ClusterSpec) -> list[Check]:
    """Every check of this node, from the tools found here."""
    checks = [java_check(_java_version_text()), pyspark_check()]
    smi_text = tool_output(["nvidia-smi"])
    smi = parse_nvidia_smi(smi_text) if smi_text is not None else None
    torch_cuda = _torch_cuda() if smi is not None else None
    checks += gpu_stack_checks(smi, torch_cuda, tool_output(["nvidia-smi", "-q"]) if smi else None)
    ib_text = tool_output(["ibstat"])
    ports = parse_ibstat(ib_text) if ib_text is not None else None
    compute = spec.networks.compute
    checks += ibstat_checks(ports, compute.gbps, compute.kind)
    hcas = sorted({p.ca for p in ports}) if ports is not None else None
    checks += nccl_env_checks(os.environ, _interfaces(), hcas, compute.kind)
    checks += spec_network_checks(spec, _hostname(), ports)
    return checks


def _hostname() -> str:
    import socket

    return socket.gethostname()


def _java_version_text() -> str | None:
    java = "java"
    if os.environ.get("JAVA_HOME"):
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    exe = shutil.which(java)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-version"], capture_output=True, text=True, timeout=30)
    except (subprocess.SubprocessError, OSError):
        return None
    return out.stderr or out.stdout
