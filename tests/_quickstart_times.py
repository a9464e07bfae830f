"""The README quickstart's wall time per pyspark version, merged into
``$GPUSPARK_COMPAT_RESULTS`` (``benchmarks/results/compat.json``): the compatibility run
(``make test-compat``) records it on pyspark 3.5, then on ``.venv``'s 4.x; one ``.ci/run``
gives both the same ``GPUSPARK_COMPAT_RUN``, so their ratio is taken."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuspark._util import spark_compat


def record_quickstart(seconds: float, blocks: list[dict[str, Any]], load: float) -> None:
    """Merge this run's quickstart time into ``$GPUSPARK_COMPAT_RESULTS`` (when set), under
    the installed pyspark version, with the machine's load before and after (``load``: the
    1-minute load average at the start); the 3.5-to-4.x ratio when one run measured both."""
    target = os.environ.get("GPUSPARK_COMPAT_RESULTS")
    if not target:
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.parent):  # make test-compat runs two quickstarts side by side
        _merge(path, seconds, blocks, load)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _merge(path: Path, seconds: float, blocks: list[dict[str, Any]], load: float) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    runs = data.get("quickstart", {})
    version = str(spark_compat.installed_version())
    runs[version] = {
        "seconds": round(seconds, 1),
        "blocks": blocks,
        "run": os.environ.get("GPUSPARK_COMPAT_RUN"),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_avg_1m": {"start": round(load, 2), "end": round(os.getloadavg()[0], 2)},
    }
    data = {
        "what": "wall time of README.md's quickstart, run as written, per pyspark version",
        "command": "make test-compat",
        "quickstart": dict(sorted(runs.items())),
        "ratio_3_5_to_4": _ratio(runs),
        "machine": _machine(),
    }
    _write_atomically(path, json.dumps(data, indent=2) + "\n")


def _ratio(runs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The newest 3.5 time over the newest 4.x time, when one ``make test-compat`` measured
    both (the same ``run``)."""
    three = [(v, r) for v, r in runs.items() if v.startswith("3.5.")]
    four = [(v, r) for v, r in runs.items() if v.startswith("4.")]
    pairs = [(a, b) for a in three for b in four if a[1]["run"] and a[1]["run"] == b[1]["run"]]
    if not pairs:
        return None
    (old, a), (new, b) = pairs[-1]
    return {"pyspark": [old, new], "ratio": round(a["seconds"] / b["seconds"], 2)}


def _machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "java": _java_version(),
    }


def _java_version() -> str | None:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stderr or out.stdout).strip().splitlines()[0] if out.returncode == 0 else None


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
