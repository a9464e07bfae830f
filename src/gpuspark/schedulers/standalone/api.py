"""The Spark standalone master's own API, as plain data: the master's ``/json/`` (workers with
``cores``/``coresfree``, ``resources``/``resourcesfree``; ``activeapps`` with ``name``,
``cores``, ``state``, ``resourcesperexecutor``) and each worker's ``/json/`` (``executors`` with
their ``appid`` and GPU ``addresses``: the GPUs an application holds).

The master shows only an application's name, so a job's team travels in the name as a
``[team=NAME]`` tag (:func:`team_app_name`, :func:`app_team`). Every ``parse_*`` takes the
decoded JSON, so tests can feed recorded documents.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpuspark.errors import ClusterError
from gpuspark.schedulers.base import http_json

__all__ = [
    "StandaloneApp",
    "StandaloneSnapshot",
    "StandaloneWorker",
    "app_team",
    "gpu_count",
    "parse_standalone",
    "standalone_snapshot",
    "team_app_name",
]

_TAG = re.compile(r"\[team=([A-Za-z0-9_.-]+)\]\s*$")


def team_app_name(app_name: str, team: str | None) -> str:
    """``app_name`` tagged ``[team=NAME]`` (the standalone master shows only names)."""
    if not team:
        return app_name
    base = _TAG.sub("", app_name).rstrip()
    return f"{base} [team={team}]"


def app_team(app_name: str) -> str | None:
    """The team an application name is tagged with (``"x [team=nlp]"`` -> ``"nlp"``)."""
    match = _TAG.search(app_name or "")
    return match.group(1) if match else None


def gpu_count(resources: Any) -> int:
    """GPU addresses in a master/worker ``/json/`` resources map (``resources``,
    ``resourcesfree``, an executor's ``resources``)."""
    gpu = (resources or {}).get("gpu") or {}
    return len(gpu.get("addresses") or [])


@dataclass
class StandaloneWorker:
    """One worker of a standalone master."""

    id: str
    state: str
    cores: int
    cores_free: int
    memory_mb: int
    memory_free_mb: int
    gpus: int
    gpus_free: int
    web_url: str = ""


@dataclass
class StandaloneApp:
    """One application as the master shows it, with the GPUs its executors hold."""

    id: str
    name: str
    team: str | None
    user: str
    state: str
    cores: int
    """Cores its executors hold now."""
    gpus_per_executor: int
    memory_per_executor_mb: int
    gpus_held: int = 0
    executors: int = 0


@dataclass
class StandaloneSnapshot:
    """A standalone master's workers and active applications at one moment."""

    url: str
    workers: list[StandaloneWorker] = field(default_factory=list)
    apps: list[StandaloneApp] = field(default_factory=list)

    def app(self, key: str) -> StandaloneApp | None:
        """The application whose id or name (tag included or not) is ``key``."""
        for app in self.apps:
            if key in (app.id, app.name) or app.name.split(" [team=")[0] == key:
                return app
        return None


def _per_executor_gpus(app: dict[str, Any]) -> int:
    for entry in app.get("resourcesperexecutor") or []:
        if entry.get("name") == "gpu":
            return int(entry.get("amount", 0))
    return 0


def parse_standalone(
    master: dict[str, Any], workers: dict[str, dict[str, Any]] | None = None, url: str = ""
) -> StandaloneSnapshot:
    """A snapshot from the master's ``/json/`` and the workers' (keyed by web URL)."""
    snap = StandaloneSnapshot(url=url or str(master.get("url", "")))
    for w in master.get("workers") or []:
        snap.workers.append(
            StandaloneWorker(
                id=str(w.get("id", "")),
                state=str(w.get("state", "")),
                cores=int(w.get("cores", 0)),
                cores_free=int(w.get("coresfree", 0)),
                memory_mb=int(w.get("memory", 0)),
                memory_free_mb=int(w.get("memoryfree", 0)),
                gpus=gpu_count(w.get("resources")),
                gpus_free=gpu_count(w.get("resourcesfree")),
                web_url=str(w.get("webuiaddress", "")),
            )
        )
    held: dict[str, list[int]] = {}
    for doc in (workers or {}).values():
        for ex in doc.get("executors") or []:
            held.setdefault(str(ex.get("appid")), []).append(gpu_count(ex.get("resources")))
    for a in master.get("activeapps") or []:
        app_id = str(a.get("id", ""))
        name = str(a.get("name", ""))
        snap.apps.append(
            StandaloneApp(
                id=app_id,
                name=name,
                team=app_team(name),
                user=str(a.get("user", "")),
                state=str(a.get("state", "")),
                cores=int(a.get("cores", 0)),
                gpus_per_executor=_per_executor_gpus(a),
                memory_per_executor_mb=int(a.get("memoryperexecutor", 0)),
                gpus_held=sum(held.get(app_id, [])),
                executors=len(held.get(app_id, [])),
            )
        )
    return snap


def standalone_snapshot(web_url: str, timeout: float = 5.0) -> StandaloneSnapshot:
    """Read a standalone master's ``/json/`` at ``web_url`` (its web UI) and its workers'."""
    base = web_url.rstrip("/")
    master = http_json(f"{base}/json/", timeout=timeout)
    workers: dict[str, dict[str, Any]] = {}
    for w in master.get("workers") or []:
        address = str(w.get("webuiaddress", ""))
        if address and w.get("state") == "ALIVE":
            try:
                workers[address] = http_json(f"{address.rstrip('/')}/json/", timeout=timeout)
            except ClusterError:
                continue  # that worker's executors count 0 GPUs; the master's figures stand
    return parse_standalone(master, workers, url=base)
