"""``gpuspark monitor up|down|status``: a Prometheus (and node_exporter) for this machine.

``up`` renders the monitoring files for the spec, swaps in the embedded variant of
``prometheus.yml`` (the Spark master, applications, executors and training runs found through
the file_sd directory; node_exporter on loopback), and starts Debian's ``prometheus`` and, when
installed, ``prometheus-node-exporter``, both bound to 127.0.0.1. Pids, ports and logs live in
the monitoring directory (:func:`gpuspark.cluster.monitor_dirs.monitor_dir`); ``down`` stops exactly
the processes ``up`` recorded there.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuspark._util.net import free_port, http_get, http_get_json
from gpuspark._util.procs import pid_alive, spawn_group, terminate_groups
from gpuspark.cluster.monitor_dirs import monitor_dir, targets_dir
from gpuspark.errors import MonitorError
from gpuspark.monitor.prometheus import EmbeddedScrape, prometheus_yml
from gpuspark.monitor.render import render_monitoring, write_monitoring
from gpuspark.spec import resolve_spec
from gpuspark.storage import atomic_write_text

__all__ = ["MonitorState", "Service", "down", "running", "status", "up"]

STATE_FILE = "monitor.json"
_PROMETHEUS = ("prometheus",)
_NODE_EXPORTER = ("prometheus-node-exporter", "node_exporter")
_RULES = ("rules/*.yml",)
_INSTALL = "install Debian's prometheus and prometheus-node-exporter (`make setup` does, as root)"


@dataclass
class Service:
    """One process ``up`` started."""

    name: str
    pid: int
    port: int
    url: str
    log: str


@dataclass
class MonitorState:
    """What ``up`` started, where its files are; saved as ``monitor.json``."""

    prometheus: Service
    node_exporter: Service | None
    config_dir: str
    targets_dir: str
    started: float = field(default_factory=time.time)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MonitorState:
        """Inverse of :meth:`as_dict`."""
        node = data.get("node_exporter")
        return cls(
            prometheus=Service(**data["prometheus"]),
            node_exporter=Service(**node) if node else None,
            config_dir=data["config_dir"],
            targets_dir=data["targets_dir"],
            started=data.get("started", 0.0),
        )


def _which(names: tuple[str, ...]) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


def _port(preferred: int) -> int:
    """``preferred`` when free on loopback, else (or for 0) any free port."""
    import socket

    if preferred == 0:
        return free_port()
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            return free_port()
    return preferred


def _spawn(cmd: list[str], log: Path) -> int:

    return spawn_group(cmd, log)


def _tail(path: str, lines: int = 5) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " | ".join(text.strip().splitlines()[-lines:])


def _wait_http(url: str, pid: int, log: str, timeout: float) -> None:

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            raise MonitorError(
                f"{Path(log).stem} exited during start-up: {_tail(log)}", remedy=f"see {log}"
            )
        try:
            http_get(url, timeout=2)  # an answer other than 2xx raises HTTPError, an OSError
            return
        except OSError:
            time.sleep(0.2)
    raise MonitorError(f"{url} did not answer within {timeout:.0f} s", remedy=f"see {log}")


def running(directory: Path | None = None) -> MonitorState | None:
    """The recorded state if its Prometheus is alive, else ``None``."""

    path = (directory or monitor_dir()) / STATE_FILE
    try:
        state = MonitorState.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return state if pid_alive(state.prometheus.pid) else None


def _write_config(
    spec: Any, config_dir: Path, targets: Path, node: str | None, interval: int
) -> Path:
    """Render the monitoring files for ``spec`` into ``config_dir``, embedded scrape config
    (the alert rules loaded, so ``ALERTS`` shows what would fire on this machine)."""

    files = render_monitoring(spec, targets_dir=targets)
    files = {k: v for k, v in files.items() if not k.startswith("grafana/")}
    scrape = EmbeddedScrape(node_exporter=node, scrape_interval_s=interval, rule_files=_RULES)
    files["prometheus.yml"] = prometheus_yml(spec, targets_dir=targets, embedded=scrape)
    write_monitoring(files, config_dir)
    return config_dir / "prometheus.yml"


def _start_node_exporter(base: Path, port: int) -> Service | None:
    binary = _which(_NODE_EXPORTER)
    if binary is None:
        return None
    port = _port(port)
    log = str(base / "logs" / "node_exporter.log")
    pid = _spawn([binary, f"--web.listen-address=127.0.0.1:{port}"], Path(log))
    url = f"http://127.0.0.1:{port}"
    _wait_http(f"{url}/metrics", pid, log, 20.0)
    return Service("node_exporter", pid, port, url, log)


def _start_prometheus(base: Path, config: Path, port: int) -> Service:
    binary = _which(_PROMETHEUS)
    if binary is None:
        raise MonitorError("prometheus is not installed", remedy=_INSTALL)
    port = _port(port)
    log = str(base / "logs" / "prometheus.log")
    cmd = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={base / 'data'}",
        "--storage.tsdb.retention.time=7d",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
    ]
    pid = _spawn(cmd, Path(log))
    url = f"http://127.0.0.1:{port}"
    _wait_http(f"{url}/-/ready", pid, log, 60.0)
    return Service("prometheus", pid, port, url, log)


def up(
    spec: Any = None,
    *,
    port: int = 9090,
    node_exporter: bool = True,
    node_exporter_port: int = 9100,
    scrape_interval_s: int = 5,
    directory: Path | None = None,
) -> MonitorState:
    """Start Prometheus (and node_exporter) on loopback for this machine; return the state.

    Raises :class:`MonitorError` when one is already running (see :func:`running`) or the
    tools are missing. Ports default to 9090 / 9100, or a free port when those are taken.
    Targets are scraped every ``scrape_interval_s`` seconds.
    """

    for name, value in (("port", port), ("node_exporter_port", node_exporter_port)):
        if not 0 <= value <= 65535:
            raise MonitorError(
                f"{name} {value} is not a TCP port", remedy="use a port from 1 to 65535"
            )
    base = directory or monitor_dir()
    found = running(base)
    if found is not None:
        raise MonitorError(
            f"monitoring is already running at {found.prometheus.url}",
            remedy="use it, or stop it with `gpuspark monitor down`",
        )
    spec_obj = resolve_spec(spec)
    targets = targets_dir(spec_obj)
    if _which(_PROMETHEUS) is None:
        raise MonitorError("prometheus is not installed", remedy=_INSTALL)
    (base / "logs").mkdir(parents=True, exist_ok=True)
    for kind in ("runs", "spark-apps", "spark-master"):
        (targets / kind).mkdir(parents=True, exist_ok=True)
    node = _start_node_exporter(base, node_exporter_port) if node_exporter else None
    try:
        node_addr = f"127.0.0.1:{node.port}" if node else None
        config = _write_config(spec_obj, base / "config", targets, node_addr, scrape_interval_s)
        prom = _start_prometheus(base, config, port)
    except BaseException:
        _stop([node] if node else [])
        raise
    state = MonitorState(prom, node, str(base / "config"), str(targets))

    atomic_write_text(base / STATE_FILE, json.dumps(state.as_dict(), indent=2) + "\n")
    return state


def _stop(services: list[Service]) -> list[int]:

    pids = [s.pid for s in services]
    terminate_groups(pids, 15.0)
    return pids


def down(directory: Path | None = None) -> list[int]:
    """Stop what :func:`up` recorded; return the pids stopped (``[]``: nothing was running)."""
    base = directory or monitor_dir()
    path = base / STATE_FILE
    try:
        state = MonitorState.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return []
    services = [state.prometheus] + ([state.node_exporter] if state.node_exporter else [])
    pids = _stop(services)
    path.unlink(missing_ok=True)
    return pids


def _api(url: str, path: str) -> Any:
    return http_get_json(f"{url}{path}", timeout=5)


def status(directory: Path | None = None) -> dict[str, Any]:
    """Running state, and per scrape job the targets up / total (from Prometheus's API)."""
    state = running(directory)
    if state is None:
        return {"running": False, "monitor_dir": str(directory or monitor_dir())}
    jobs: dict[str, dict[str, int]] = {}
    try:
        active = _api(state.prometheus.url, "/api/v1/targets?state=active")["data"]
    except (OSError, ValueError, KeyError) as exc:
        raise MonitorError(f"Prometheus at {state.prometheus.url} did not answer: {exc}") from None
    for target in active.get("activeTargets", []):
        job = jobs.setdefault(target["labels"].get("job", "?"), {"up": 0, "total": 0})
        job["total"] += 1
        job["up"] += target.get("health") == "up"
    return {"running": True, **state.as_dict(), "jobs": jobs}
