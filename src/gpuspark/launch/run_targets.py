"""The driver's Prometheus target file for a run: ``runs/<run_id>.json`` while it runs.

Ranks report the ``/metrics`` endpoint they bound (:func:`gpuspark.monitor.exporter.serve`)
through the launch's log channel; :class:`RunTargets` keeps one target group per rank and
rewrites the file (atomically) on every report. :meth:`RunTargets.remove` deletes it when the
run ends, whatever the way: success, failure, timeout or Ctrl-C.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from gpuspark.cluster.discovery import TargetGroup, remove_targets, write_targets

__all__ = ["RunTargets", "target_group"]

_KIND = "runs"


def _note(text: str) -> None:
    sys.stdout.write(f"[gpuspark] {text}\n")
    sys.stdout.flush()


def target_group(endpoint: dict[str, Any]) -> TargetGroup:
    """One rank's file_sd entry: ``address:port`` with the labels its series carry."""
    address = str(endpoint.get("address") or endpoint.get("host"))
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"  # IPv6
    labels = {
        "run_id": str(endpoint.get("run_id", "")),
        "rank": str(endpoint["rank"]),
        "host": str(endpoint["host"]),
        "team": str(endpoint.get("team", "")),
    }
    return [f"{address}:{int(endpoint['port'])}"], labels


class RunTargets:
    """The target file of one run (all its attempts), written as ranks report."""

    def __init__(self, directory: str | Path, run_id: str, num_processes: int) -> None:
        self.directory = Path(directory)
        self.run_id = run_id
        self.num_processes = num_processes
        self.endpoints: dict[int, dict[str, Any]] = {}
        self.path: Path | None = None
        self._announced = False
        self._closed = False
        self._lock = threading.Lock()

    def add(self, endpoint: dict[str, Any]) -> None:
        """A rank's endpoint (``rank``, ``host``, ``address``, ``port``, ``run_id``, ``team``)."""
        with self._lock:
            if self._closed:
                return
            self.endpoints[int(endpoint["rank"])] = endpoint
            groups = [target_group(self.endpoints[r]) for r in sorted(self.endpoints)]
            self.path = write_targets(self.directory, _KIND, self.run_id, groups)
            if not self._announced and len(self.endpoints) >= self.num_processes:
                self._announced = True
                shown = ", ".join(g[0][0] for g in groups[:4])
                more = f" (+{len(groups) - 4})" if len(groups) > 4 else ""
                _note(f"metrics: {shown}{more} /metrics; Prometheus targets in {self.path}")

    def remove(self) -> None:
        """Delete the file (the run ended); later reports are ignored."""
        with self._lock:
            self._closed = True
            self.endpoints.clear()
            remove_targets(self.directory, _KIND, self.run_id)

    def __enter__(self) -> RunTargets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
