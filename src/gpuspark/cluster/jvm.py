"""JVM start-up of the drivers and executors that gpuspark starts on this machine.

A command on the embedded cluster starts two kinds of short-lived JVMs: its driver (the
``SparkSession``) and, for each application, one executor per worker. On a small machine most
of their start-up is class loading and JIT compilation, not work:

- **Class data sharing.** The driver maps a dynamic CDS archive of the classes a gpuspark
  driver loads (``-XX:SharedArchiveFile``), built once per Java and Spark installation by
  :func:`build_archive` (``make setup``, or in the background by ``gpuspark cluster up``)
  under ``~/.gpuspark/jvm``; so do the executors of the embedded cluster, from an archive a
  temporary one-worker cluster's executor writes in the same build. A JVM that cannot use an
  archive (another class path, another Java) ignores it in silence and starts as before.
  CDS refuses a class path that starts with a non-empty folder, and a worker puts
  ``$SPARK_CONF_DIR`` (the cluster's ``conf``, with the daemons' ``metrics.properties``) first
  in an executor's: a session on the embedded cluster gives its executors an empty folder of
  their own (``spark.executorEnv.SPARK_CONF_DIR``, which the worker reads first), the same
  for every cluster. The master and workers keep theirs (no archive).
- **Light JIT and GC** (``-XX:TieredStopAtLevel=1 -XX:+UseSerialGC``): the embedded cluster's
  drivers coordinate and do no heavy work, and neither do the executors of a training job
  (the ranks are Python processes). Executors of data jobs keep the JVM's defaults: their
  Arrow, Parquet and shuffle work needs the optimising compiler.

``GPUSPARK_JVM_TUNING=0`` turns all of it off; a setting of the user's for the same option
(``spark.driver.extraJavaOptions`` naming a GC, the JIT tier or an archive) wins.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuspark._util import envvars
from gpuspark._util.procs import pid_alive
from gpuspark.cluster.plan import local_defaults

__all__ = [
    "LIGHT",
    "archive_path",
    "build_archive",
    "build_executor_archive",
    "build_in_background",
    "executor_archive_path",
    "executor_conf_dir",
    "exercise_jobs",
    "java_options",
    "tuning_enabled",
]

log = logging.getLogger(__name__)

LIGHT = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The quick C1 compiler alone and the serial collector."""
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""A JVM that cannot map the archive falls back without a warning on the console."""
_OURS = ("-XX:TieredStopAtLevel", "-XX:+Use", "GC", "-XX:SharedArchiveFile", "-Xshare")
"""Options of the user's that override ours (any GC, the JIT tier, CDS)."""
_MIN_JAVA = 13
"""Dynamic CDS archives (``-XX:ArchiveClassesAtExit``) exist from Java 13."""
_BUILD_TIMEOUT_S = 300


def tuning_enabled() -> bool:
    """False when ``GPUSPARK_JVM_TUNING`` is ``0``."""
    return (envvars.JVM_TUNING.get("1") or "1").strip() not in ("0", "false", "no", "off")


def java_binary() -> Path | None:
    """The ``java`` that PySpark starts: ``$JAVA_HOME/bin/java``, else ``java`` on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home, "bin", "java") if home else None
    if found is None or not found.exists():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found is not None else None


def _key() -> str | None:
    """Names the Java and Spark installation an archive belongs to (cheap: no JVM runs)."""
    java = java_binary()
    if java is None:
        return None
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    parts = [str(java), str(java.stat().st_mtime_ns), pyspark.__version__, str(jars)]
    parts.append(os.environ.get("SPARK_HOME", ""))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def archive_dir() -> Path:
    """``~/.gpuspark/jvm`` (beside the logs and the cluster state)."""
    return Path.home() / ".gpuspark" / "jvm"


def archive_path() -> Path | None:
    """Where this installation's driver archive is (or would be); None without Java."""
    key = _key()
    return archive_dir() / f"driver-{key}.jsa" if key else None


def executor_archive_path() -> Path | None:
    """Where the embedded cluster's executor archive is (or would be); None without Java."""
    key = _key()
    return archive_dir() / f"executor-{key}.jsa" if key else None


def executor_conf_dir() -> Path:
    """The empty ``$SPARK_CONF_DIR`` of the embedded cluster's executors (made if missing)."""
    folder = archive_dir() / "executor-conf"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _merge(existing: str | None, ours: str) -> str:
    """``existing`` plus those of ``ours`` it does not decide already."""
    if not existing:
        return ours
    if _decided(existing):
        return existing
    return f"{existing} {ours}"


def java_options(
    conf: dict[str, str],
    *,
    driver_light: bool,
    executor_light: bool,
    executor_archive: bool = False,
) -> None:
    """Add the archives and the light options to ``conf``'s driver and executor JVM options
    (in place): the driver archive whenever it exists, the executor archive (and the empty
    ``$SPARK_CONF_DIR`` it needs) where asked and built, the light options where asked."""
    if not tuning_enabled():
        return
    driver = [LIGHT] if driver_light else []
    archive = archive_path()
    if archive is not None and archive.is_file():
        driver.append(f"-XX:SharedArchiveFile={archive} {_QUIET}")
    if driver:
        key = "spark.driver.extraJavaOptions"
        conf[key] = _merge(conf.get(key), " ".join(driver))
    executor = [LIGHT] if executor_light else []
    archive = executor_archive_path() if executor_archive else None
    key = "spark.executor.extraJavaOptions"
    if archive is not None and archive.is_file() and not _decided(conf.get(key)):
        executor.append(f"-XX:SharedArchiveFile={archive} {_QUIET}")
        conf.setdefault("spark.executorEnv.SPARK_CONF_DIR", str(executor_conf_dir()))
    if executor:
        conf[key] = _merge(conf.get(key), " ".join(executor))


def _decided(options: str | None) -> bool:
    """Whether the user's JVM options decide one of ours already."""
    return bool(options) and any(marker in str(options) for marker in _OURS)


def _java_major(java: Path) -> int:
    out = subprocess.run(
        [str(java), "-version"], capture_output=True, text=True, timeout=60, check=False
    )
    first = (out.stderr or out.stdout).splitlines()[0] if (out.stderr or out.stdout) else ""
    version = first.split('"')[1] if first.count('"') >= 2 else "0"
    head = version.split(".")
    return int(head[1]) if head[0] == "1" and len(head) > 1 else int(head[0] or 0)


def _lock(target: Path) -> Path | None:
    """An exclusive lock beside ``target`` (None: another build runs); a dead owner's is
    taken over."""
    lock = target.with_suffix(".lock")
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = int(lock.read_text() or 0)
                os.kill(owner, 0)
                return None
            except (ValueError, ProcessLookupError, FileNotFoundError):
                lock.unlink(missing_ok=True)
                continue
            except PermissionError:
                return None
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        return lock
    return None


def build_archive(force: bool = False) -> Path | None:
    """Build this installation's driver archive unless it exists (``force``: again): a small
    session of the kinds of jobs gpuspark runs, in a child process whose driver JVM writes
    the classes it loaded at exit; the file appears whole (temp name + rename). Then the
    executor archive the same way (:func:`build_executor_archive`). Returns the driver
    archive, or None when this Java cannot (older than 13), tuning is off, or the build
    failed (logged; commands then start as before)."""
    built = _build(archive_path(), [], force)
    build_executor_archive(force)
    return built


def build_executor_archive(force: bool = False) -> Path | None:
    """Build the embedded cluster's executor archive unless it exists (``force``: again): a
    temporary one-worker cluster runs the same jobs, and its executor writes its classes
    when the worker stops it. Returns the archive or None, as :func:`build_archive`."""
    return _build(executor_archive_path(), ["--executor", str(executor_conf_dir())], force)


def _build(target: Path | None, args: list[str], force: bool) -> Path | None:
    java = java_binary()
    if target is None or java is None or not tuning_enabled():
        return None
    if target.is_file() and not force:
        return target
    if _java_major(java) < _MIN_JAVA:
        log.info("Java %s has no dynamic CDS archives: JVMs start without one", java)
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock(target)
    if lock is None:
        return None
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        child = [sys.executable, "-m", "gpuspark.cluster.jvm", *args, str(tmp)]
        done = subprocess.run(
            child, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S, check=False
        )
        if done.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            _not_built(target, " | ".join(tail))
            return None
        os.replace(tmp, target)
        _failed(target).unlink(missing_ok=True)
        _remove_stale(target)
        return target
    except subprocess.TimeoutExpired:
        _not_built(target, f"no archive in {_BUILD_TIMEOUT_S} s")
        return None
    finally:
        tmp.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)


def _failed(target: Path) -> Path:
    """The marker of a failed build of ``target``: :func:`build_in_background` does not
    try again (``build_archive(force=True)`` does)."""
    return target.with_suffix(".failed")


def _not_built(target: Path, why: str) -> None:
    kind = target.name.split("-", 1)[0]
    log.warning("the %s CDS archive was not built (JVMs start without one): %s", kind, why)
    with contextlib.suppress(OSError):
        _failed(target).write_text(why + "\n")


_KEEP = 3
"""Archives kept per user: this installation's and the most recently built others (each is
over 100 MB; virtual environments with their own Spark each have one)."""


def _remove_stale(current: Path) -> None:
    """Archives beyond the :data:`_KEEP` newest (``current`` is one of them), and the
    half-written archives of builds whose process is gone (killed before cleaning up)."""
    kind = current.name.split("-", 1)[0]
    others = [p for p in current.parent.glob(f"{kind}-*.jsa") if p != current]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for other in others[_KEEP - 1 :]:
        with contextlib.suppress(OSError):
            other.unlink()
            _failed(other).unlink(missing_ok=True)
    for tmp in current.parent.glob(f".{kind}-*.jsa.*.tmp"):
        pid = tmp.name.rsplit(".", 2)[-2]
        if pid.isdigit() and not pid_alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _archives() -> list[Path]:
    return [p for p in (archive_path(), executor_archive_path()) if p is not None]


def _missing(target: Path) -> bool:
    """Not built, and no build of it failed (a failed one is not retried in the background)."""
    return not target.is_file() and not _failed(target).exists()


def build_in_background() -> None:
    """Start :func:`build_archive` in a detached, low-priority process when the archive is
    missing (``gpuspark cluster up``); later commands use it once it exists."""
    if not tuning_enabled() or not any(_missing(p) for p in _archives()):
        return
    code = "from gpuspark.cluster.jvm import build_archive; build_archive()"
    with contextlib.suppress(OSError):
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=lambda: os.nice(10),
        )


def exercise_jobs(spark: Any) -> None:
    """The kinds of jobs gpuspark runs, small: a DataFrame job with Arrow and a Python UDF,
    and an RDD barrier stage."""
    frame = spark.createDataFrame([(i, float(i)) for i in range(64)], "id long, x double")
    frame.groupBy((frame.id % 4).alias("k")).sum("x").collect()
    frame.mapInArrow(lambda batches: batches, frame.schema).count()
    rdd = spark.sparkContext.parallelize(range(2), 2).barrier()
    rdd.mapPartitions(lambda rows: [sum(rows)]).collect()


def _exercise(out: str) -> None:
    """The archive's workload (child process): the classes of a session, a DataFrame job
    with Arrow and a Python UDF, and an RDD barrier stage; then the driver JVM exits and
    writes ``out``."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("gpuspark-jvm-archive")
    for key, value in local_defaults().items():
        builder = builder.config(key, value)
    builder = builder.config("spark.driver.extraJavaOptions", f"-XX:ArchiveClassesAtExit={out}")
    spark = builder.getOrCreate()
    exercise_jobs(spark)
    spark.stop()
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is not None:  # the JVM exits when its stdin closes, then writes the archive
        proc.stdin.close()
        proc.wait(timeout=_BUILD_TIMEOUT_S)


def _main(args: list[str]) -> None:
    """The build's child process: ``[--executor CONF_DIR] OUT``."""
    if args[0] == "--executor":
        from gpuspark.cluster.executor_archive import exercise_executor

        exercise_executor(args[2], args[1])
    else:
        _exercise(args[0])


if __name__ == "__main__":
    _main(sys.argv[1:])
