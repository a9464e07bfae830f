"""Prometheus ``file_sd_configs`` target files: written when a run or a Spark application
starts, removed when it ends, so targets come and go without editing ``prometheus.yml``.

Layout under the targets directory (:func:`gpuspark.cluster.monitor_dirs.targets_dir`), one
sub-directory per scrape job of the rendered config:

- ``runs/<run_id>.json``: one target per training rank, labels ``run_id``, ``rank``, ``host``,
  ``team``;
- ``spark-apps/<app_id>.json``: a driver's UI (driver metrics and executor metrics);
- ``spark-master/<name>.json``: a standalone master's web UI.

Files are replaced atomically, so Prometheus never reads half a file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuspark.storage import atomic_write_text

__all__ = ["KINDS", "TargetGroup", "list_targets", "remove_targets", "write_targets"]

KINDS = ("runs", "spark-apps", "spark-master")
"""Sub-directories of the targets directory; each is one scrape job's ``file_sd`` glob."""

TargetGroup = tuple[Sequence[str], Mapping[str, str]]
"""``(["host:port", ...], {"label": "value"})``: one entry of a file_sd file."""

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _path(directory: str | os.PathLike[str], kind: str, name: str) -> Path:
    if kind not in KINDS:
        raise ValueError(f"target kind {kind!r} is not one of {', '.join(KINDS)}")
    return Path(directory) / kind / f"{_SAFE.sub('_', name)}.json"


def write_targets(
    directory: str | os.PathLike[str], kind: str, name: str, groups: Sequence[TargetGroup]
) -> Path:
    """Write (or replace) the file_sd file ``<directory>/<kind>/<name>.json``; return its path."""
    path = _path(directory, kind, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = [
        {"targets": list(targets), "labels": {k: str(v) for k, v in labels.items()}}
        for targets, labels in groups
    ]
    atomic_write_text(path, json.dumps(body, indent=2) + "\n")
    return path


def remove_targets(directory: str | os.PathLike[str], kind: str, name: str) -> bool:
    """Remove the file written by :func:`write_targets`; ``False`` if it was not there."""
    try:
        _path(directory, kind, name).unlink()
    except FileNotFoundError:
        return False
    return True


def list_targets(directory: str | os.PathLike[str], kind: str) -> list[dict[str, object]]:
    """Every target group currently in ``<directory>/<kind>/`` (unreadable files skipped)."""
    folder = Path(directory) / kind
    groups: list[dict[str, object]] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            groups.extend(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return groups
