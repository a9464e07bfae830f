"""Where a training rank serves ``/metrics`` and how it tells the driver.

A rank's settings come, in this order, from the arguments of
:func:`gpuspark.monitor.exporter.serve`, from the environment the launcher sets
(``GPUSPARK_METRICS_PORT``, ``GPUSPARK_METRICS_HOST``, ``GPUSPARK_RUN_ID``, ``GPUSPARK_TEAM``;
torch's ``RANK`` and ``LOCAL_RANK``), from the spec's ``[monitoring]`` (``metrics_port``,
``metrics_host``), else port 9700 on 127.0.0.1. The rank's port is ``base + local rank``.

The endpoint a rank actually bound is written as ``rank-<RANK>.metrics.json`` into the
directory named by ``GPUSPARK_RANK_DIR`` (the launcher's per-task log directory); the task
that tails the rank logs forwards it to the driver, which writes the Prometheus target file.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuspark._util import envvars
from gpuspark.errors import LaunchError
from gpuspark.storage import atomic_write_text

if TYPE_CHECKING:
    from gpuspark.spec import ClusterSpec

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "ENDPOINT_SUFFIX",
    "ENV_HOST",
    "ENV_PORT",
    "ENV_RANK_DIR",
    "ENV_RUN_ID",
    "ENV_TEAM",
    "RankSettings",
    "check_team",
    "endpoint_rank",
    "rank_settings",
    "read_endpoint",
    "write_endpoint",
]

ENV_RUN_ID = envvars.RUN_ID.name
ENV_TEAM = envvars.TEAM.name
ENV_PORT = envvars.METRICS_PORT.name
ENV_HOST = envvars.METRICS_HOST.name
ENV_RANK_DIR = envvars.RANK_DIR.name
"""Set by the launcher in every rank: where the rank drops its endpoint file."""
DEFAULT_PORT = 9700
DEFAULT_HOST = "127.0.0.1"
ENDPOINT_SUFFIX = ".metrics.json"

_PROCESS_RUN_ID = uuid.uuid4().hex[:12]
"""The run id of a process no launcher started (one per process, so repeated fits share it)."""


@dataclass(frozen=True)
class RankSettings:
    """Everything one rank's exporter needs to start: plain data."""

    base_port: int
    """Base port (0: metrics off); the rank binds ``base_port + local_rank`` or the next free."""
    host: str
    """Address to bind."""
    run_id: str
    team: str
    rank: int
    local_rank: int
    hostname: str
    """This machine's name: the ``host`` label."""

    @property
    def port(self) -> int:
        """The port this rank tries first."""
        return self.base_port + self.local_rank if self.base_port else 0


def _port_from_env() -> int | None:
    text = os.environ.get(ENV_PORT, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) > 65535:
        raise LaunchError(
            f"{ENV_PORT}={text!r} is not a port number",
            remedy="set a number from 0 to 65535 (0 turns the ranks' metrics off)",
        )
    return int(text)


def _spec_defaults(spec: ClusterSpec | None) -> tuple[int, str]:
    if spec is not None:
        return int(spec.monitoring.metrics_port), str(spec.monitoring.metrics_host)

    return _env_spec_defaults(os.environ.get(envvars.SPEC.name) or None)


@functools.lru_cache(maxsize=4)
def _env_spec_defaults(path: str | None) -> tuple[int, str]:
    """The spec ``$GPUSPARK_SPEC`` names (or the default one), read once per process: every
    ``fit`` asks, and parsing a spec takes milliseconds."""

    from gpuspark.spec import resolve_spec

    mon = resolve_spec(path).monitoring
    return int(mon.metrics_port), str(mon.metrics_host)


def rank_settings(
    port: int | None = None,
    host: str | None = None,
    *,
    run_id: str | None = None,
    team: str | None = None,
    spec: ClusterSpec | None = None,
) -> RankSettings:
    """This rank's exporter settings: arguments, then environment, then spec, then defaults."""
    port = port if port is not None else _port_from_env()
    host = host or os.environ.get(ENV_HOST) or None
    if port is None or host is None:
        spec_port, spec_host = _spec_defaults(spec)
        port = spec_port if port is None else port
        host = host or spec_host
    if port < 0 or port > 65535:
        raise LaunchError(f"metrics port {port} is out of range", remedy="use 0 to 65535 (0: off)")
    return RankSettings(
        base_port=int(port),
        host=host or DEFAULT_HOST,
        run_id=run_id or os.environ.get(ENV_RUN_ID) or _PROCESS_RUN_ID,
        team=team if team is not None else os.environ.get(ENV_TEAM, ""),
        rank=int(os.environ.get("RANK", "0")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        hostname=socket.gethostname(),
    )


def check_team(team: str | None, spec: ClusterSpec | None) -> str:
    """``team`` if the spec's ``[[teams]]`` name it (``""`` for no team); else one-line error
    (:func:`gpuspark.spec.find_team`)."""
    if not team:
        return ""
    from gpuspark.spec import find_team, resolve_spec

    return find_team(resolve_spec(spec), team).name


# -- the endpoint file: rank -> its task -> the driver ---------------------------------------


def write_endpoint(settings: RankSettings, port: int, bind: str) -> Path | None:
    """Drop ``rank-<RANK>.metrics.json`` for the launcher; ``None`` outside a launch."""
    folder = os.environ.get(ENV_RANK_DIR)
    if not folder or not os.path.isdir(folder):
        return None
    path = Path(folder) / f"rank-{settings.rank}{ENDPOINT_SUFFIX}"
    body = {
        "rank": settings.rank,
        "local_rank": settings.local_rank,
        "host": settings.hostname,
        "bind": bind,
        "port": port,
        "run_id": settings.run_id,
        "team": settings.team,
        "pid": os.getpid(),
    }
    atomic_write_text(path, json.dumps(body) + "\n")
    return path


def endpoint_rank(name: str) -> int | None:
    """The rank of an endpoint file name (``rank-3.metrics.json`` -> 3), else ``None``."""
    if not (name.startswith("rank-") and name.endswith(ENDPOINT_SUFFIX)):
        return None
    middle = name[len("rank-") : -len(ENDPOINT_SUFFIX)]
    return int(middle) if middle.isdigit() else None


def read_endpoint(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """An endpoint file's content, or ``None`` if it is unreadable or malformed."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not {"rank", "port", "host"} <= set(data):
        return None
    return data
