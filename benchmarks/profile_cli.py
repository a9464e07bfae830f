"""Where a command's time goes: the driver's Python phases, the JVMs, the Python workers.

Runs one gpuspark command in this process (``gpuspark.cli.main.app``) with timers on every
function of ``gpuspark.cluster``, ``gpuspark.launch`` and ``gpuspark.data.prep`` that takes
over 0.1 s, splits ``SparkSession.builder.getOrCreate`` into PySpark's own steps (the driver
JVM's gateway, the SparkContext, the SparkSession), and reads the command's Spark driver log
for the JVM side: driver up, executors granted, executors registered, each job's start and
end. A rank that prints ``PROFILE_T0 <time.time()>`` as its first line adds the
Python-worker side (the rank's start, next to its task's start in the driver log), for
example ``import time; print("PROFILE_T0", time.time(), flush=True)`` first in ``train.py``::

    python benchmarks/profile_cli.py launch -n 2 train.py
    python benchmarks/profile_cli.py prep images data/images data/shards --world-size 2
    python benchmarks/profile_cli.py --name=launch_connect launch -n 2 train.py

The command runs against the embedded cluster that ``gpuspark cluster up`` started (or starts
its own, as the command would); through the cluster's Spark Connect server, the server's log
stands for the driver log. Prints a timeline (seconds from the command's start) and writes
``benchmarks/results/profile_<command>.json`` (``profile_<name>.json`` with ``--name=``).
"""

from __future__ import annotations

import functools
import importlib
import io
import pkgutil
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results

T0 = time.time()
MARKS: list[tuple[str, float, float]] = []
"""(what, start, seconds), start in seconds after T0."""
RANK_STARTS: list[float] = []
"""When each rank printed its ``PROFILE_T0`` stamp, in seconds after T0."""

_PACKAGES = ("gpuspark.cluster", "gpuspark.launch", "gpuspark.data.prep")
_LOG_EVENTS = {
    "driver JVM up": r"SparkContext: Running Spark version",
    "app registered": r"Connected to Spark cluster with app ID",
    "executor granted": r"Granted executor ID",
    "executor registered": r"Registered executor",
    "scheduler ready": r"SchedulerBackend is ready",
    "job start": r"SparkContext: Starting job",
    "task start": r"TaskSetManager: Starting task",
    "task end": r"TaskSetManager: Finished task",
    "job end": r"DAGScheduler: Job \d+ finished",
    "context stopped": r"Successfully stopped SparkContext",
}
_STAMP = re.compile(r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d)")


def _timed(owner: Any, name: str, label: str) -> None:
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            MARKS.append((label, start - T0, time.time() - start))

    setattr(owner, name, wrapper)


class _Tee(io.TextIOBase):
    """stdout, noting the ``PROFILE_T0`` stamps that ranks print (their lines reach this
    process through the launcher's log streaming)."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, text: str) -> int:
        for stamp in re.finditer(r"PROFILE_T0 ([0-9.]+)", text):
            RANK_STARTS.append(float(stamp.group(1)) - T0)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


def _instrument_gpuspark() -> None:
    for pkg_name in _PACKAGES:
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.iter_modules(pkg.__path__):
            if info.name.startswith("_"):
                continue
            mod = importlib.import_module(f"{pkg_name}.{info.name}")
            for name, fn in list(vars(mod).items()):
                own = getattr(fn, "__module__", None) == mod.__name__
                if own and callable(fn) and not isinstance(fn, type) and not name.startswith("__"):
                    _timed(mod, name, f"{mod.__name__}.{name}")


def _instrument_pyspark() -> None:
    from pyspark import java_gateway
    from pyspark.core import context
    from pyspark.sql import session

    _timed(session.SparkSession.Builder, "getOrCreate", "pyspark: getOrCreate")
    _timed(java_gateway, "launch_gateway", "pyspark: driver JVM + gateway")
    _timed(context.SparkContext, "_initialize_context", "pyspark: SparkContext (JVM)")
    _timed(session.SparkSession, "__init__", "pyspark: SparkSession")
    context.launch_gateway = java_gateway.launch_gateway  # the name context imported


def _driver_log(since: float) -> Path | None:
    """This command's Spark driver log; else, for a command that went through the embedded
    cluster's Spark Connect server, that server's log (its lines since ``since`` are read)."""
    from gpuspark.cluster.driver_log import log_dir
    from gpuspark.cluster.local import STATE_FILE, default_state_dir
    from gpuspark.cluster.state import read_state

    logs = [p for p in Path(log_dir()).glob("driver-*.log") if p.stat().st_mtime >= since]
    if logs:
        return max(logs, key=lambda p: p.stat().st_mtime)
    state = read_state(default_state_dir() / STATE_FILE)
    server = state.connect if state is not None else None
    return Path(server.log) if server is not None and Path(server.log).exists() else None


def _log_timeline(path: Path, since: float) -> list[tuple[str, float]]:
    events: list[tuple[str, float]] = []
    for line in path.read_text(errors="replace").splitlines():
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        when = datetime.strptime(stamp.group(1), "%y/%m/%d %H:%M:%S").timestamp()
        if when < since:
            continue
        for event, pattern in _LOG_EVENTS.items():
            if re.search(pattern, line):
                events.append((event, when - T0))
    return events


def main(argv: list[str]) -> int:
    name = ""
    if argv and argv[0].startswith("--name="):  # the results file's name: profile_<name>.json
        name, argv = argv[0].split("=", 1)[1], argv[1:]
    if not argv:
        raise SystemExit(__doc__)
    _instrument_gpuspark()
    _instrument_pyspark()
    from gpuspark.cli.main import app

    code = 0
    stdout, sys.stdout = sys.stdout, _Tee(sys.stdout)
    try:
        app(argv, prog_name="gpuspark", standalone_mode=True)
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.stdout = stdout
    total = time.time() - T0
    log = _driver_log(T0 - 1)
    events = _log_timeline(log, int(T0)) if log is not None else []
    print(f"\n{'what':<58} {'start s':>8} {'took s':>7}")
    for label, start, took in sorted(MARKS, key=lambda m: m[1]):
        if took >= 0.1:
            print(f"{label:<58} {start:>8.2f} {took:>7.2f}")
    print(f"\n{'driver log (1 s resolution): ' + (log.name if log else 'none'):<58} {'at s':>8}")
    for event, at in events:
        print(f"{event:<58} {at:>8.0f}")
    for at in sorted(RANK_STARTS):
        print(f"{'rank started (its PROFILE_T0 line)':<58} {at:>8.2f}")
    print(f"\ntotal {total:.2f} s, exit {code}")
    name = name or re.sub(r"[^a-z0-9]+", "_", "_".join(argv[:2]).lower()).strip("_")
    write_results(
        f"profile_{name}",
        {
            "argv": argv,
            "total_s": round(total, 2),
            "phases": [
                {"what": w, "start_s": round(s, 2), "took_s": round(t, 2)}
                for w, s, t in sorted(MARKS, key=lambda m: m[1])
                if t >= 0.1
            ],
            "driver_log": [{"event": e, "at_s": round(a)} for e, a in events],
            "rank_starts_s": [round(a, 2) for a in sorted(RANK_STARTS)],
        },
    )
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
